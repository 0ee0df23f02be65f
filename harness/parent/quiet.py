"""A quiet host while a lane times: background work is stopped, or kept on CPUs of its own.

Two kinds of processes share the host during a run. *Background* processes do work that can
wait: the build pool's compiles (harness.parent.prebuild, with their ninja and compiler children) and the
spare prestarted worker (harness.parent.supervise.Launcher), which imports torch while it waits for a
job. *Timing* processes are a lane's judge and the worker that was handed a job.

`timing.quiet` says what the run does about it:
- `pause`: while any lane holds the host (`with host.hold(): ...` around timed rounds),
  every background process group is stopped (SIGSTOP) and continued (SIGCONT) when the last
  holder leaves. A background process registered during a hold is stopped at once; one that is
  unregistered (a build that ended, a spare handed out for a job) is continued first.
- `pin`: this process's CPUs are split: each lane gets `CPUS_PER_LANE` CPUs of its own, taken
  from the end of the sorted list, for its judge and its workers; background processes get the
  rest. Children inherit their parent's CPUs, so a build's compilers stay on the builds' CPUs.
  With too few CPUs for that, nothing is pinned and `pin_note` says why.
- `both` (the default) does both; `off` touches nothing.

Lanes may share a GPU (`workers.lanes_per_gpu`): lane `i` is on GPU group `i // lanes_per_gpu`, and
the group's lanes go through its gate (harness.parent.gpugate, `LaneShares`), not signals. A lane at
work on a candidate (`host.lane_work(lane)`: its checks, its memcheck) holds a shared grant, admitted
by the memory its problem needs; at each step boundary (`host.step(lane)`: a worker's message, before
it is answered) it lets a queued timing through. A lane's hold (`host.hold(lane_index)`) is exclusive:
it waits for the other lanes' shared work in flight to reach a step boundary, and no shared work
starts while it is queued. Their checks overlap; their timings take turns; nothing of another lane is
stopped. The time a lane waits at its gate does not count against its processes' limits. With lanes
sharing a GPU nothing is paused whatever `timing.quiet` says: builds are only pinned.

Each run has a host of its own (harness.parent.resources.RunResources), handed to what starts its
processes; code given none (tests, Ray actors) uses an `off` host, which touches nothing. The run
calls `close()` on every exit path: a background process left stopped would never finish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from harness.core.config import QuietMode
from harness.parent.gpugate import EXCLUSIVE, GpuGate, Grant

CPUS_PER_LANE = 2  # a lane's judge and worker, each with a CPU of its own
DRAIN_S = 0.05  # after an exclusive grant on a shared GPU: what another lane launched before its step ends
MIN_BACKGROUND_CPUS = 2  # pinning is not worth it with fewer left for builds and prestarts

Process = Union[int, Any]  # a pid, or anything with `.pid` (subprocess.Popen); `.returncode` is honoured when present


def cpu_ranges(cpus: Iterable[int]) -> str:
    """`0-13`, `0,2,4-5`: a CPU list the way /proc and taskset write it."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start: int | None = None
    previous: int | None = None
    for cpu in ordered + [None]:
        if start is not None:
            assert previous is not None  # set together with start
            if cpu is None or cpu != previous + 1:
                parts.append(str(start) if start == previous else f"{start}-{previous}")
                start = None
        if cpu is not None:
            if start is None:
                start = cpu
            previous = cpu
    return ",".join(parts)


def task_ids(pid: int) -> list[int]:
    """The thread ids of a process (/proc/<pid>/task); just `pid` where /proc cannot tell."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit()]
    except OSError:
        return [pid]


def pin(pid: int, cpus: Iterable[int]) -> bool:
    """Restrict every thread of process `pid` to `cpus` (sched_setaffinity on a pid changes only
    that one thread); threads and children made later inherit it. Threads that end meanwhile are
    skipped; threads started while this runs are caught by a second pass. False when no thread
    could be pinned (the process is gone, or not ours)."""
    wanted = set(cpus)
    done: set[int] = set()
    pinned = False
    for _ in range(3):
        fresh = [tid for tid in task_ids(pid) if tid not in done]
        if not fresh:
            break
        for tid in fresh:
            done.add(tid)
            try:
                os.sched_setaffinity(tid, wanted)
                pinned = True
            except OSError:  # ended (ESRCH), not ours, or a CPU the cpuset no longer allows
                continue
    return pinned


def _pid(proc: Process) -> int:
    return proc if isinstance(proc, int) else int(proc.pid)


def _send(pid: int, proc: Process, leads: bool, signum: int) -> bool:
    """Signal the process's group (the process alone when it shares a group); False when it has
    exited or cannot be signalled."""
    if _exited(proc):
        return False
    try:
        if leads:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _exited(proc: Process) -> bool:
    return not isinstance(proc, int) and getattr(proc, "returncode", None) is not None


@dataclasses.dataclass(frozen=True)
class CpuPlan:
    """Which CPUs each lane's timing processes get, and which the background work gets."""

    lanes: tuple[tuple[int, ...], ...] = ()  # per lane index: its CPUs (none: nothing is pinned)
    background: tuple[int, ...] = ()  # builds and prestarted workers
    note: str = ""  # why pinning was skipped, when it was asked for

    @classmethod
    def partition(cls, cpus: list[int], lanes: int, per_lane: int) -> "CpuPlan":
        """The last `per_lane` CPUs for each lane, the rest for the background; no pinning (a
        note) when fewer than MIN_BACKGROUND_CPUS would be left."""
        needed = lanes * per_lane + MIN_BACKGROUND_CPUS
        if len(cpus) < needed:
            asked = "1 lane needs" if lanes == 1 else f"{lanes} lanes need"
            return cls(
                note=(
                    f"pinning skipped: {len(cpus)} CPU{'s' if len(cpus) != 1 else ''} available, {asked} {needed} "
                    f"({per_lane} per lane, {MIN_BACKGROUND_CPUS} for builds)"
                )
            )
        end = len(cpus)
        taken = []
        for _ in range(lanes):
            taken.append(tuple(cpus[end - per_lane : end]))
            end -= per_lane
        return cls(tuple(taken), tuple(cpus[:end]))

    def describe(self, pausing: bool) -> str:
        if self.lanes:
            name = "pause+pin" if pausing else "pin"
            return (
                f"{name}: lanes on CPUs {cpu_ranges([cpu for cpus in self.lanes for cpu in cpus])}, builds on "
                f"{cpu_ranges(self.background)}"
            )
        if self.note:
            return f"{'pause' if pausing else 'off'}; {self.note}"
        return "pause"


class QuietHost:
    """A run's registry of background and timing processes, and the holds of the lanes that are
    timing. Thread-safe: several lanes may hold at once."""

    def __init__(
        self,
        quiet_mode: str = QuietMode.OFF,
        lanes: int = 1,
        *,
        cpus: Optional[Iterable[int]] = None,
        cpus_per_lane: int = CPUS_PER_LANE,
        lanes_per_gpu: int = 1,
        card_memory: int = 0,
    ) -> None:
        if quiet_mode not in QuietMode.words():
            raise ValueError(f"quiet mode must be one of {list(QuietMode.words())}, got {quiet_mode!r}")
        self.quiet_mode = quiet_mode
        self.lanes = max(1, int(lanes))
        self.lanes_per_gpu = max(1, int(lanes_per_gpu))
        self.sharing = self.lanes_per_gpu > 1  # lanes share a GPU: a hold is the GPU's alone
        self.cpus_per_lane = max(1, int(cpus_per_lane))
        # lanes sharing a GPU stop nothing: their gate keeps timings apart, and builds stay on CPUs of
        # their own where there are enough (pause + gate stalled the GPU smoke with 3 lanes)
        self.pausing = quiet_mode in (QuietMode.PAUSE, QuietMode.BOTH) and not self.sharing
        self.cpus = (
            CpuPlan.partition(
                sorted(set(cpus if cpus is not None else os.sched_getaffinity(0))), self.lanes, self.cpus_per_lane
            )
            if quiet_mode in (QuietMode.PIN, QuietMode.BOTH)
            else CpuPlan()
        )
        self.pin_note = self.cpus.note
        self._lock = threading.RLock()
        self._work = BackgroundWork()  # the background processes, and which a hold stopped
        self._timing: dict[int, int] = {}  # pid -> lane index
        self._holders = 0
        self._held_since: Optional[float] = None
        self._paused = 0.0
        self._closed = False
        # the gates of the GPUs that lanes share (card_memory: bytes per card, 0 when unknown)
        self._shares = LaneShares(self.lanes_per_gpu, card_memory)

    # -- what it knows --------------------------------------------------------------------------

    @property
    def pinning(self) -> bool:
        """Whether processes are pinned (mode pin or both, and enough CPUs)."""
        return bool(self.cpus.lanes)

    def lane_cpus(self, lane_index: int) -> Optional[tuple[int, ...]]:
        """The CPUs of lane `lane_index`; None when nothing is pinned (or there is no such lane)."""
        if 0 <= lane_index < len(self.cpus.lanes):
            return self.cpus.lanes[lane_index]
        return None

    @property
    def background_cpus(self) -> Optional[tuple[int, ...]]:
        return self.cpus.background if self.pinning else None

    @property
    def holders(self) -> int:
        """How many holds are active now (over all lanes)."""
        with self._lock:
            return self._holders

    @property
    def held(self) -> bool:
        return self.holders > 0

    @property
    def paused_seconds(self) -> float:
        """Total time background work was paused so far (a hold going on counts up to now)."""
        with self._lock:
            ongoing = time.monotonic() - self._held_since if self._held_since is not None else 0.0
            return self._paused + ongoing

    def lane_clock(self, lane_index: int) -> Callable[[], float]:
        """A clock for the limits of lane `lane_index`'s judge and workers: time.monotonic, less the
        time the lane waited at its GPU's gate for the other lanes (its processes waited on its answer
        meanwhile). It runs on through the lane's own holds, so a call that hangs while it is timed
        still runs out of time."""

        def clock() -> float:
            return time.monotonic() - self._shares.waited_seconds(lane_index)

        return clock

    @property
    def background_pids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._work.processes)

    @property
    def timing_pids(self) -> dict[int, int]:
        """pid -> lane index of the timing processes registered now."""
        with self._lock:
            return dict(self._timing)

    def describe(self) -> str:
        """One line for logs and records, e.g. `pause+pin: lanes on CPUs 14-15, builds on 0-13`."""
        line = QuietMode.OFF if self.quiet_mode == QuietMode.OFF else self.cpus.describe(self.pausing)
        shared = f"{line}; {self.lanes_per_gpu} lanes per GPU through its gate: checks shared, one timing at a time"
        return shared if self.sharing else line

    # -- registering ----------------------------------------------------------------------------

    def register_background(self, proc: Process, stoppable: bool = True) -> None:
        """`proc` (best: the leader of its own process group, start_new_session=True) is background
        work: pinned to the builds' CPUs, and stopped with its group at once if a lane holds, unless
        not `stoppable` (a prestarted memcheck run: compute-sanitizer does not survive being stopped)."""
        if self.quiet_mode == QuietMode.OFF:
            return
        pid = _pid(proc)
        with self._lock:
            if self._closed or _exited(proc):
                return
            if not stoppable:
                if self.pinning:
                    pin(pid, self.cpus.background)
                return
            try:
                group = os.getpgid(pid)
            except OSError:
                return  # already gone
            self._work.processes[pid] = (proc, group == pid and group != os.getpgrp())  # never signal our own group
            if self.pinning:
                pin(pid, self.cpus.background)
            if self._holders and self.pausing:
                self._work.stop(pid)

    def register_timing(self, proc: Process, lane_index: int = 0) -> None:
        """`proc` times for lane `lane_index` (its judge, or the worker handed a job): pinned to the
        lane's CPUs, never stopped. A background process (a spare worker taken for a job) stops being
        background: it is pinned first, then continued if a hold had stopped it."""
        if self.quiet_mode == QuietMode.OFF and not self.sharing:
            return
        pid = _pid(proc)
        with self._lock:
            if self._closed:
                return
            cpus = self.lane_cpus(lane_index)
            if cpus is not None and not _exited(proc):
                pin(pid, cpus)
            self._work.drop(pid)
            if not _exited(proc):
                self._timing[pid] = lane_index

    def unregister(self, proc: Process) -> None:
        """Forget `proc` (it ended, or is no longer background); a process a hold stopped is
        continued first. Unknown processes are ignored."""
        if self.quiet_mode == QuietMode.OFF and not self.sharing:
            return
        pid = _pid(proc)
        with self._lock:
            self._work.drop(pid)
            self._timing.pop(pid, None)

    # -- holding --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, lane_index: Optional[int] = None) -> Iterator["QuietHost"]:
        """While inside, background work is paused (mode pause or both). Holds nest and may come
        from several threads: the first one in stops the background, the last one out resumes it.
        A lane's hold (`lane_index`) on a shared GPU is also that GPU's alone: exclusive on its gate
        (`LaneShares.alone`), taken before the background is paused."""
        alone = self._shares.alone(lane_index) if self.sharing and lane_index is not None else contextlib.nullcontext()
        with alone:
            self._enter()
            try:
                yield self
            finally:
                self._leave()

    @contextlib.contextmanager
    def lane_work(self, lane_index: int) -> Iterator[None]:
        """Lane `lane_index` works on the GPU it shares (a candidate's checks, its memcheck): a shared
        grant on its gate for the block (nothing when the lane has its GPU to itself)."""
        if not self.sharing:
            yield
            return
        with self._shares.work(lane_index):
            yield

    def step(self, lane_index: int) -> None:
        """A step boundary of lane `lane_index` (its worker waits for an answer, its judge is idle):
        a timing queued on its GPU goes first."""
        if self.sharing:
            self._shares.step(lane_index)

    def lane_memory(self, lane_index: int, needs: int) -> None:
        """The device memory lane `lane_index`'s work needs from now on (its shared grants' admission)."""
        if self.sharing:
            self._shares.set_memory(lane_index, needs)

    def gate(self, lane_index: int) -> Optional[GpuGate]:
        """The gate of lane `lane_index`'s GPU; None when it has its GPU to itself."""
        return self._shares.gate(lane_index) if self.sharing else None

    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._holders += 1
            if self._holders == 1 and self.pausing:
                self._held_since = time.monotonic()
                self._work.stop_all()

    def _leave(self) -> None:
        with self._lock:
            if self._closed or self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0:
                self._resume_all()

    def _resume_all(self) -> None:
        if self._held_since is not None:
            self._paused += time.monotonic() - self._held_since
            self._held_since = None
        self._work.resume_all()

    def close(self) -> None:
        """Resume everything this host stopped and forget every process; later holds and
        registrations do nothing. Safe to call twice, and while another thread holds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._holders = 0
            self._resume_all()
            self._work.processes.clear()
            self._timing.clear()

    def __repr__(self) -> str:
        return f"QuietHost({self.describe()!r}, holders={self._holders}, background={len(self._work.processes)})"


class BackgroundWork:
    """The background processes of a quiet host, and those a hold stopped; under the host's lock."""

    def __init__(self) -> None:
        self.processes: dict[int, tuple[Process, bool]] = {}  # pid -> (process, leads its own group)
        self.stopped: set[int] = set()  # pids sent SIGSTOP and not yet SIGCONT

    def stop(self, pid: int) -> None:
        """Stop one (its group)."""
        entry = self.processes.get(pid)
        if entry is not None and pid not in self.stopped and self._signal(pid, entry, signal.SIGSTOP):
            self.stopped.add(pid)

    def stop_all(self) -> None:
        for pid in list(self.processes):
            self.stop(pid)

    def drop(self, pid: int) -> None:
        """Forget one (it ended, or is no longer background), continued first if it was stopped."""
        entry = self.processes.pop(pid, None)
        if entry is not None and pid in self.stopped:
            self.stopped.discard(pid)
            self._signal(pid, entry, signal.SIGCONT)

    def resume_all(self) -> None:
        for pid in list(self.stopped):
            self.stopped.discard(pid)
            entry = self.processes.get(pid)
            if entry is not None:
                self._signal(pid, entry, signal.SIGCONT)

    def _signal(self, pid: int, entry: tuple[Process, bool], signum: int) -> bool:
        """Signal the process (`_send`); one that has exited is dropped silently."""
        if _send(pid, *entry, signum):
            return True
        self.processes.pop(pid, None)
        self.stopped.discard(pid)
        return False


@dataclasses.dataclass
class _LaneGrants:
    """One lane's state on its GPU's gate; changed by the lane's own thread only."""

    working: int = 0  # depth of lane_work blocks
    alone: int = 0  # depth of holds
    work: Optional[Grant] = None  # the grant its work holds: shared, or exclusive for a problem too big to share
    held_alone: Optional[Grant] = None  # the exclusive grant a hold took (None when its work's was exclusive already)
    memory: int = 0  # bytes its shared grants are admitted by
    waited: float = 0.0  # seconds spent waiting at the gate, ended waits
    waiting_since: Optional[float] = None  # a wait going on


class LaneShares:
    """The gates of the GPUs that lanes share (lane `i` on group `i // lanes_per_gpu`), one
    harness.parent.gpugate.GpuGate each with a shared slot per lane and the card's memory, and each
    lane's grants on its gate (see the module docstring).

    Admission counts the memory of the grants held, not what the lanes' processes keep between them
    (a judge keeps its reference's tensors): so a lane whose work needs more than its share of the
    card (the card's memory over the lanes on it) works with the GPU to itself, as if it had it alone."""

    def __init__(self, lanes_per_gpu: int, card_memory: int = 0) -> None:
        self.lanes_per_gpu = max(1, lanes_per_gpu)
        # unknown memory (0): admission by slots alone
        self.card_memory = card_memory if card_memory > 0 else 1 << 62
        self._lock = threading.Lock()
        self._gates: dict[int, GpuGate] = {}
        self._lanes: dict[int, _LaneGrants] = {}

    def gate(self, lane_index: int) -> GpuGate:
        group = lane_index // self.lanes_per_gpu
        with self._lock:
            if group not in self._gates:
                self._gates[group] = GpuGate(self.lanes_per_gpu, self.card_memory)
            return self._gates[group]

    def _lane(self, lane_index: int) -> _LaneGrants:
        with self._lock:
            return self._lanes.setdefault(lane_index, _LaneGrants())

    def set_memory(self, lane_index: int, needs: int) -> None:
        """Its later grants are admitted by `needs` bytes; more than its share of the card, and its work
        is exclusive."""
        self._lane(lane_index).memory = max(0, min(int(needs), self.card_memory))

    def shares(self, lane_index: int) -> bool:
        """Whether the lane's work fits its share of the card (else it works with the GPU to itself)."""
        return self._lane(lane_index).memory <= self.card_memory // self.lanes_per_gpu

    def waited_seconds(self, lane_index: int) -> float:
        with self._lock:
            lane = self._lanes.get(lane_index)
            if lane is None:
                return 0.0
            since = lane.waiting_since
            return lane.waited + (time.monotonic() - since if since is not None else 0.0)

    def _waiting(self, lane: _LaneGrants, take: Callable[[], Grant]) -> Grant:
        with self._lock:
            lane.waiting_since = time.monotonic()
        try:
            return take()
        finally:
            with self._lock:
                assert lane.waiting_since is not None
                lane.waited += time.monotonic() - lane.waiting_since
                lane.waiting_since = None

    def _take_work(self, lane_index: int, lane: _LaneGrants) -> None:
        gate, label = self.gate(lane_index), f"lane {lane_index}"
        if self.shares(lane_index):
            lane.work = self._waiting(lane, lambda: gate.take_shared(lane.memory, label))
        else:
            lane.work = self._waiting(lane, lambda: gate.take_exclusive(f"{label} (too big to share)"))

    def _give_work(self, lane_index: int, lane: _LaneGrants) -> None:
        if lane.work is not None:
            grant, lane.work = lane.work, None
            self.gate(lane_index).release(grant)

    @contextlib.contextmanager
    def work(self, lane_index: int) -> Iterator[None]:
        """A grant for the block: shared, or exclusive when the lane's work is too big to share (nested
        blocks share the outermost one's; inside a hold, it is taken when the hold ends)."""
        lane = self._lane(lane_index)
        lane.working += 1
        try:
            if lane.working == 1 and not lane.alone:
                self._take_work(lane_index, lane)
            yield
        finally:
            lane.working -= 1
            if lane.working == 0:
                self._give_work(lane_index, lane)

    def step(self, lane_index: int) -> None:
        """At a step boundary: give the work's grant up and take it again when a timing is queued (it
        goes first), or when the lane's memory changed."""
        lane = self._lane(lane_index)
        if lane.work is None:
            return
        if self.gate(lane_index).exclusive_waiting() or lane.work.memory != lane.memory:
            self._give_work(lane_index, lane)
            self._take_work(lane_index, lane)

    @contextlib.contextmanager
    def alone(self, lane_index: int) -> Iterator[None]:
        """The GPU alone for the block: the lane's shared grant is given up, the exclusive one waited
        for, and the work's grant taken again after when the lane is still at work (work that holds the
        GPU alone already keeps it). Nested holds share the outermost one's."""
        lane = self._lane(lane_index)
        lane.alone += 1
        try:
            if lane.alone == 1 and not (lane.work is not None and lane.work.kind == EXCLUSIVE):
                self._give_work(lane_index, lane)
                gate = self.gate(lane_index)
                lane.held_alone = self._waiting(lane, lambda: gate.take_exclusive(f"lane {lane_index}"))
                time.sleep(DRAIN_S)  # what a lane left in flight at its step boundary is done first
            yield
        finally:
            lane.alone -= 1
            if lane.alone == 0:
                if lane.held_alone is not None:
                    grant, lane.held_alone = lane.held_alone, None
                    self.gate(lane_index).release(grant)
                if lane.working and lane.work is None:
                    self._take_work(lane_index, lane)


@dataclasses.dataclass(frozen=True)
class LaneQuiet:
    """A run's quiet host as one lane holds it: `hold()` is `host.hold(lane)`."""

    host: QuietHost
    lane_index: int

    def hold(self) -> Any:
        return self.host.hold(self.lane_index)


def communicate_unpaused(proc: "subprocess.Popen[Any]", host: QuietHost, limit: float) -> Optional[tuple[Any, Any]]:
    """`proc`'s output once it has ended; None once it has run past `limit` seconds, not counting the time `host`
    kept it stopped (the caller ends it then). Background work a hold stops is not charged for the stop."""
    started, paused_before = time.perf_counter(), host.paused_seconds

    def left() -> float:
        return limit + host.paused_seconds - paused_before - (time.perf_counter() - started)

    while True:
        try:
            return proc.communicate(timeout=max(0.0, left()))
        except subprocess.TimeoutExpired:
            if left() <= 0:
                return None
