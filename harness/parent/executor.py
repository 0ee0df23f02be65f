"""What an executor is, and the dispatch both executors share.

An executor takes candidates (`submit`, `submit_all`) and hands each record back in a future.
`Executor` is the protocol the session (harness.api) uses; `QueuedExecutor` is what the local
executor (harness.parent.local) and the Ray executor (harness.parent.ray_executor) have in common: one queue of
jobs shared by every submitting thread, threads that take jobs from it, each problem announced
once, and the futures settled from what the threads return (a harness bug as the exception).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Callable, Optional, Protocol, Sequence, TypeVar, runtime_checkable

from harness.core.records import CandidateRecord
from harness.sources.candidate import Candidate
from harness.sources.problem import Problem

__all__ = ["Executor", "Job", "JobQueue", "QueuedExecutor", "gather", "problem_key"]

Future = concurrent.futures.Future
UNREADY_POLL_S = 0.5  # a lane waiting for any build ahead sees a new job, or a stop, within this
_T = TypeVar("_T")  # what a callback takes


@runtime_checkable
class Executor(Protocol):
    """Evaluates submitted candidates somewhere (this machine's lanes, a Ray cluster)."""

    def describe(self) -> str:
        """One line on where evaluations run ("" when there is nothing to say)."""

    def submit(self, problem: Problem, candidate: Candidate) -> "Future[CandidateRecord]":
        """Queue one candidate; its record arrives in the future (a harness bug as its exception)."""

    def submit_all(
        self, jobs: Sequence[tuple[Problem, Candidate]], last: bool = False
    ) -> "list[Future[CandidateRecord]]":
        """Queue several candidates at once; `last`: and seal (nothing more will be submitted), in the same step."""

    def pending(self) -> int:
        """Candidates queued and not yet taken."""

    def seal(self) -> None:
        """Nothing more will be submitted: what is queued runs on, and no process is started ahead for work that
        will not come."""

    def run_problem(self, problem: Problem, candidates: list[Candidate]) -> list[CandidateRecord]:
        """Every candidate of `problem`; the records in candidate order."""

    def stop(self) -> None:
        """No new evaluations; end the running ones; queued jobs are cancelled."""

    def close(self) -> None:
        """Finish the queued jobs, then end everything the executor started."""


@dataclasses.dataclass(frozen=True)
class Job:
    """One candidate waiting for a lane, and where its record goes."""

    problem: Problem
    candidate: Candidate
    future: "Future[CandidateRecord]"
    queued_at: float  # time.monotonic() at submission

    @property
    def key(self) -> tuple[str, str]:
        return problem_key(self.problem)


def problem_key(problem: Problem) -> tuple[str, str]:
    """What makes two submissions the same problem: its file and its contents."""
    return (str(problem.path), problem.hash)


def gather(futures: Sequence["Future[CandidateRecord]"]) -> list[CandidateRecord]:
    """The records of `futures` in their order, waiting in short steps so Ctrl-C gets through; a
    harness bug in a lane is raised here. Cancelled ones (a stopped executor) are left out."""
    pending = set(futures)
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=0.2)
    return [f.result() for f in futures if not f.cancelled()]


class JobQueue:
    """The candidates an executor's threads have yet to take, shared by every thread that submits.
    `on_first` runs (under the queue's lock) when the first jobs arrive: it starts those threads."""

    def __init__(self, on_first: Callable[[], None]) -> None:
        self._changed = threading.Condition()
        self._jobs: list[Job] = []
        self._on_first: Optional[Callable[[], None]] = on_first
        self.stopping = self.closing = False
        self.sealed = False  # nothing more will be submitted (seal)

    def put(self, jobs: Sequence[tuple[Problem, Candidate]], last: bool = False) -> "list[Future[CandidateRecord]]":
        """Queue several candidates at once (no thread takes one before all are in); `last`: and seal the queue
        in the same step, so no thread ever sees it open."""
        futures: list[Future[CandidateRecord]] = [concurrent.futures.Future() for _ in jobs]
        with self._changed:
            if self.stopping or self.closing:
                raise RuntimeError("the executor is closed")
            if self.sealed:
                raise RuntimeError("the executor was sealed: it takes no more submissions")
            now = time.monotonic()
            self._jobs += [Job(problem, candidate, future, now) for (problem, candidate), future in zip(jobs, futures)]
            self.sealed = self.sealed or last
            if self._on_first is not None:
                self._on_first()
                self._on_first = None
            self._changed.notify_all()
        return futures

    def take(self, choose: Callable[[list[Job]], list[Job]]) -> list[Job]:
        """The jobs `choose` picks from the queue (oldest first), waiting for some; [] once the
        queue is stopped, or closed with nothing left, or when `choose` picks none."""
        with self._changed:
            while not self._jobs and not (self.stopping or self.closing):
                self._changed.wait()
            if self.stopping or not self._jobs:
                return []
            chosen = choose(self._jobs)
            taken = {id(job) for job in chosen}
            self._jobs = [job for job in self._jobs if id(job) not in taken]
            return chosen

    def __len__(self) -> int:
        with self._changed:
            return len(self._jobs)

    def seal(self) -> None:
        """Nothing more will be put; what is queued is taken as before."""
        with self._changed:
            self.sealed = True

    def to_come(self) -> Optional[list[tuple[str, str]]]:
        """The problem keys of the queued jobs, one per job, once nothing more can be put (sealed, closing or
        stopping); None while more may come."""
        with self._changed:
            if not (self.sealed or self.closing or self.stopping):
                return None
            return [job.key for job in self._jobs]

    def stop(self) -> None:
        """Take nothing more; the queued jobs' futures are cancelled."""
        with self._changed:
            self.stopping = True
            for job in self._jobs:
                job.future.cancel()
            self._jobs.clear()
            self._changed.notify_all()

    def close(self) -> None:
        """Take what is queued, then nothing more."""
        with self._changed:
            self.closing = True
            self._changed.notify_all()


class QueuedExecutor:
    """The dispatch both executors share. A subclass names its threads (`_servers`: a name and a
    loop each, started when the first jobs arrive), which take jobs with `queue.take`, keep those
    not cancelled (`_claim`), `_announce` each problem, and `_settle` the futures; it ends what it
    runs in `_interrupt` (stop) and what it holds in `_release` (close, after its threads end)."""

    def __init__(
        self,
        *,
        on_record: Callable[[CandidateRecord], None],
        on_start: Callable[[Candidate], None],
        on_problem: Callable[[Problem], None],
    ) -> None:
        self.queue = JobQueue(self._start)
        self._threads: list[threading.Thread] = []
        self._announced: set[tuple[str, str]] = set()
        self._lock = threading.Lock()  # the callbacks: threads call them one at a time
        self._announcing = threading.Lock()  # the problems announced

        def locked(fn: Callable[[_T], None]) -> Callable[[_T], None]:
            def call(value: _T) -> None:
                with self._lock:
                    fn(value)

            return call

        self.on_record, self.on_start, self.on_problem = locked(on_record), locked(on_start), locked(on_problem)

    def submit(self, problem: Problem, candidate: Candidate) -> "Future[CandidateRecord]":
        """Queue one candidate; its record arrives in the future (a harness bug as its exception)."""
        return self.submit_all([(problem, candidate)])[0]

    def submit_all(
        self, jobs: Sequence[tuple[Problem, Candidate]], last: bool = False
    ) -> "list[Future[CandidateRecord]]":
        """Queue several candidates at once (no thread takes one before all are in); `last`: and seal."""
        return self.queue.put(jobs, last)

    def pending(self) -> int:
        return len(self.queue)

    def seal(self) -> None:
        """Nothing more will be submitted (the command line's run, once it has queued everything)."""
        self.queue.seal()

    def run_problem(self, problem: Problem, candidates: list[Candidate]) -> list[CandidateRecord]:
        """Every candidate of `problem`; the records in candidate order."""
        futures = self.submit_all([(problem, candidate) for candidate in candidates])
        try:
            return gather(futures)
        except KeyboardInterrupt:
            self.stop()
            raise

    def stop(self) -> None:
        """No new evaluations; end the running ones; queued jobs are cancelled."""
        self.queue.stop()
        self._interrupt()

    def close(self) -> None:
        """Finish the queued jobs, then end everything the executor started."""
        self.queue.close()
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes up for Ctrl-C
        self._release()

    # -- for subclasses --------------------------------------------------------------------------

    def _servers(self) -> list[tuple[str, Callable[[], None]]]:
        raise NotImplementedError

    def _interrupt(self) -> None:
        """End what is running now (stop)."""

    def _release(self) -> None:
        """End what the executor holds, once its threads have ended (close)."""

    def _start(self) -> None:
        self._threads = [threading.Thread(target=serve, name=name, daemon=True) for name, serve in self._servers()]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _claim(jobs: list[Job]) -> list[Job]:
        """The jobs still wanted (each one's future now running); cancelled ones are dropped."""
        return [job for job in jobs if job.future.set_running_or_notify_cancel()]

    def _announce(self, problem: Problem) -> None:
        """on_problem, on a problem's first job."""
        with self._announcing:
            first = problem_key(problem) not in self._announced
            self._announced.add(problem_key(problem))
        if first:
            self.on_problem(problem)

    @staticmethod
    def _settle(jobs: list[Job], evaluate: Callable[[], list[CandidateRecord]]) -> None:
        """Each job's future gets its record from `evaluate()` (by candidate name; one without a
        record is cancelled), or, on a harness bug, the exception, raised where it is awaited."""
        try:
            records = {r.identity.candidate: r for r in evaluate()}
        except BaseException as exc:
            for job in jobs:
                job.future.set_exception(exc)
            return
        for job in jobs:
            if job.candidate.name in records:
                job.future.set_result(records[job.candidate.name])
            else:
                job.future.cancel()
