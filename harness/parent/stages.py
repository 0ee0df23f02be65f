"""A staged pipeline for one GPU: built -> checked -> timed -> sanitized -> recorded, each candidate
moving on as soon as its stage is done, with the GPU's use decided by its gate (harness.parent.gpugate)
instead of by stopping processes.

- **built**: a pool of `build_slots` CPU slots; builds start in the order the candidates came, each as
  soon as a slot frees.
- **checked**: shared work on the gate (a slot and the problem's memory): trials, repeats, gradients.
- **timed**: exclusive work on the gate: the paired rounds and the profiled call, nothing beside them.
- **sanitized**: shared work again (memcheck), started as soon as the checks passed, alongside the
  timing; it is never signalled.
- **recorded**: once every stage of the candidate is in, exactly once per candidate, failures included
  (a stage that raised is the candidate's outcome, named by the stage).

The stages are callables (`StageCalls`), so the same scheduler runs against the device or against a
simulated one whose stages sleep for durations replayed from real records (`simulated_calls`): the
scheduler's promises are tested, and its rate predicted, on a machine without a GPU
(benchmarks/pipeline_sim.py). It is not yet what `run.py` runs: today's lanes evaluate one candidate
at a time (harness.parent.evaluate).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

from harness.parent.gpugate import GpuGate


@dataclasses.dataclass(frozen=True)
class InFlight:
    """One candidate as the stages see it."""

    name: str
    memory: int  # device bytes its shared stages hold (the reference's measured peak)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the pipeline came to for one candidate."""

    name: str
    passed_checks: bool
    timed: bool
    sanitized: bool
    failed_at: str = ""  # the stage that raised ("" when none did)
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class StageCalls:
    """The stages' work for one candidate; `check` says whether the candidate may be timed."""

    build: Callable[[InFlight], None]
    check: Callable[[InFlight], bool]
    time: Callable[[InFlight], None]
    sanitize: Callable[[InFlight], None]


class Pipeline:
    """The stages of one GPU. `run` takes every candidate through them and returns one outcome each,
    calling `on_record` once per candidate as its outcome is final."""

    def __init__(self, gate: GpuGate, build_slots: int, sanitize: bool = True) -> None:
        self.gate = gate
        self.build_slots = max(1, build_slots)
        self.sanitize = sanitize

    def run(
        self, works: list[InFlight], calls: StageCalls, on_record: Callable[[Outcome], None] = lambda outcome: None
    ) -> list[Outcome]:
        outcomes: dict[str, Outcome] = {}
        lock = threading.Lock()

        def record(outcome: Outcome) -> None:
            with lock:
                assert outcome.name not in outcomes, f"{outcome.name} recorded twice"
                outcomes[outcome.name] = outcome
            on_record(outcome)

        # a candidate's flow starts when its build ends (in whatever order builds end), on a thread of
        # its own: it waits for the gate, never for a thread
        flows = ThreadPoolExecutor(max_workers=max(1, len(works)), thread_name_prefix="stage")
        sanitizers = ThreadPoolExecutor(max_workers=self.gate.slots, thread_name_prefix="sanitize")
        ready: queue.Queue[tuple[InFlight, Future]] = queue.Queue()
        with ThreadPoolExecutor(max_workers=self.build_slots, thread_name_prefix="build") as builds:
            for work in works:
                builds.submit(calls.build, work).add_done_callback(_handing(ready, work))
            flowing = [flows.submit(self._flow, *ready.get(), calls, sanitizers, record) for _ in works]
            for flow in flowing:
                flow.result()
        flows.shutdown()
        sanitizers.shutdown()
        return [outcomes[work.name] for work in works]

    def _flow(
        self,
        work: InFlight,
        build: Future,
        calls: StageCalls,
        sanitizers: ThreadPoolExecutor,
        record: Callable[[Outcome], None],
    ) -> None:
        """One candidate from its build to its record."""
        stage = "build"
        try:
            build.result()
            stage = "check"
            with self.gate.shared(work.memory, f"{work.name}:check"):
                passed = calls.check(work)
            if not passed:
                record(Outcome(work.name, False, False, False))
                return
            sanitized: Optional[Future] = None
            if self.sanitize:
                sanitized = sanitizers.submit(self._sanitize, work, calls)
            stage = "time"
            with self.gate.exclusive(f"{work.name}:time"):
                calls.time(work)
            stage = "sanitize"
            if sanitized is not None:
                sanitized.result()
            record(Outcome(work.name, True, True, sanitized is not None))
        except Exception as exc:  # the stage's failure is the candidate's outcome (MemoryRefused among them)
            record(Outcome(work.name, stage not in ("build", "check"), stage == "sanitize", False, stage, str(exc)))

    def _sanitize(self, work: InFlight, calls: StageCalls) -> None:
        with self.gate.shared(work.memory, f"{work.name}:sanitize"):
            calls.sanitize(work)


def _handing(ready: "queue.Queue[tuple[InFlight, Future]]", work: InFlight) -> Callable[[Future], None]:
    """A build's done-callback: hand the candidate and its finished build to the flows."""

    def hand(done: Future) -> None:
        ready.put((work, done))

    return hand


@dataclasses.dataclass(frozen=True)
class Durations:
    """One candidate's measured stage durations in seconds (from a real record), and its outcome."""

    build: float
    check: float
    time: float
    sanitize: float
    passes: bool = True


def simulated_calls(durations: dict[str, Durations], scale: float) -> StageCalls:
    """Stages that sleep `scale` times each candidate's durations: a simulated device."""

    def sleeper(field: str) -> Callable[[InFlight], None]:
        return lambda work: time.sleep(getattr(durations[work.name], field) * scale)

    def check(work: InFlight) -> bool:
        time.sleep(durations[work.name].check * scale)
        return durations[work.name].passes

    return StageCalls(sleeper("build"), check, sleeper("time"), sleeper("sanitize"))
