"""One GPU's gate: who may use the device now. It replaces signals (stopping the other lanes' processes
while one times) with admission: work asks before it starts and says when it ends.

- **Exclusive** work (timed rounds, a profiled call, a reference's timing) runs alone: it waits for
  the shared work in flight to drain, and once it is queued no shared work starts, so a timer waits
  at most for the longest shared step already running. Exclusive requests are served in order.
- **Shared** work (checks, memcheck, Triton's JIT, a late nvcc) runs in up to `slots` at once, each
  admitted by the device memory it needs (a reference's measured peak): the sum in flight never
  passes `memory`. Shared requests are served in order too, so a large one is not passed forever by
  small ones. A request that needs more than the whole card is refused at once (`MemoryRefused`).

Nothing is signalled: a process that holds a grant keeps running until it releases it. Every grant is
kept as an `Interval` (kind, start, end, memory, label), which the tests and the simulated device
(harness.parent.stages) read to check the invariants.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import threading
import time
from typing import Callable, Iterator

EXCLUSIVE, SHARED = "exclusive", "shared"


class MemoryRefused(RuntimeError):
    """Shared work that needs more device memory than the card has: it can never be admitted."""

    def __init__(self, label: str, needs: int, has: int) -> None:
        super().__init__(f"{label or 'work'} needs {needs / 2**30:.1f} GB, the card has {has / 2**30:.1f}")
        self.needs, self.has = needs, has


@dataclasses.dataclass(frozen=True)
class Grant:
    """A grant held now: what `release` needs."""

    kind: str  # EXCLUSIVE | SHARED
    start: float
    memory: int
    label: str


@dataclasses.dataclass(frozen=True)
class Interval:
    """One grant of the gate, from admission to release."""

    kind: str  # EXCLUSIVE | SHARED
    start: float
    end: float
    memory: int  # bytes held (shared work; 0 for exclusive)
    label: str


class GpuGate:
    """The admission of one GPU's work (see the module docstring). Thread-safe; `clock` is the time
    the intervals are kept in (a simulated device may pass its own)."""

    def __init__(self, slots: int, memory: int, clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1 or memory <= 0:
            raise ValueError("a GPU gate needs at least one shared slot and some memory")
        self.slots, self.memory, self.clock = slots, memory, clock
        self._cond = threading.Condition()
        self._tickets = itertools.count()
        self._exclusive_queue: collections.deque[int] = collections.deque()
        self._shared_queue: collections.deque[int] = collections.deque()
        self._exclusive_running = False
        self._shared_running = 0
        self._memory_used = 0
        self._intervals: list[Interval] = []

    @contextlib.contextmanager
    def exclusive(self, label: str = "") -> Iterator[None]:
        """Hold the GPU alone for the block."""
        grant = self.take_exclusive(label)
        try:
            yield
        finally:
            self.release(grant)

    @contextlib.contextmanager
    def shared(self, memory: int, label: str = "") -> Iterator[None]:
        """Hold one shared slot and `memory` bytes of the device for the block."""
        grant = self.take_shared(memory, label)
        try:
            yield
        finally:
            self.release(grant)

    def take_exclusive(self, label: str = "") -> "Grant":
        """Wait for the GPU alone and hold it until `release(grant)`."""
        with self._cond:
            ticket = next(self._tickets)
            self._exclusive_queue.append(ticket)
            self._cond.wait_for(
                lambda: self._exclusive_queue[0] == ticket and not self._exclusive_running and not self._shared_running
            )
            self._exclusive_queue.popleft()
            self._exclusive_running = True
            return Grant(EXCLUSIVE, self.clock(), 0, label)

    def take_shared(self, memory: int, label: str = "") -> "Grant":
        """Wait for a shared slot and `memory` bytes, and hold them until `release(grant)`."""
        if memory > self.memory:
            raise MemoryRefused(label, memory, self.memory)
        with self._cond:
            ticket = next(self._tickets)
            self._shared_queue.append(ticket)
            self._cond.wait_for(lambda: self._shared_queue[0] == ticket and self._admits(memory))
            self._shared_queue.popleft()
            self._shared_running += 1
            self._memory_used += memory
            self._cond.notify_all()  # the next shared request in line may fit too
            return Grant(SHARED, self.clock(), memory, label)

    def release(self, grant: "Grant") -> None:
        """End a grant (once)."""
        with self._cond:
            if grant.kind == EXCLUSIVE:
                self._exclusive_running = False
            else:
                self._shared_running -= 1
                self._memory_used -= grant.memory
            self._intervals.append(Interval(grant.kind, grant.start, self.clock(), grant.memory, grant.label))
            self._cond.notify_all()

    def exclusive_waiting(self) -> bool:
        """Whether exclusive work is queued: shared work at a step boundary should let it through."""
        with self._cond:
            return bool(self._exclusive_queue)

    def _admits(self, memory: int) -> bool:
        return (
            not self._exclusive_running
            and not self._exclusive_queue
            and self._shared_running < self.slots
            and self._memory_used + memory <= self.memory
        )

    def queued(self) -> tuple[int, int]:
        """(exclusive, shared) requests waiting now."""
        with self._cond:
            return len(self._exclusive_queue), len(self._shared_queue)

    def intervals(self) -> list[Interval]:
        """Every grant released so far, in the order they ended."""
        with self._cond:
            return list(self._intervals)


def violations(intervals: list[Interval], slots: int, memory: int) -> list[str]:
    """What in `intervals` breaks the gate's promises: exclusive work overlapping any other work, more
    than `slots` shared at once, more than `memory` bytes held at once. [] when none."""
    found = []
    exclusive = [i for i in intervals if i.kind == EXCLUSIVE]
    for one in exclusive:
        for other in intervals:
            if other is not one and other.start < one.end and one.start < other.end:
                found.append(f"{one.label} (exclusive) overlaps {other.label} ({other.kind})")
    events = sorted(
        [(i.start, 1, i.memory) for i in intervals if i.kind == SHARED]
        + [(i.end, -1, -i.memory) for i in intervals if i.kind == SHARED],
        key=lambda event: (event[0], event[1]),  # ends before starts at the same instant
    )
    running = held = 0
    for at, step, bytes_ in events:
        running, held = running + step, held + bytes_
        if running > slots:
            found.append(f"{running} shared at {at:.6f} (slots {slots})")
        if held > memory:
            found.append(f"{held} bytes held at {at:.6f} (memory {memory})")
    return found
