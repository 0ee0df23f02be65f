"""Lanes, and the local executor that keeps every lane busy.

A lane is where one evaluation runs at a time: one GPU (its workers see only that GPU, through
CUDA_VISIBLE_DEVICES), or the CPU. Two timings never share a lane. A CUDA run has one lane per
visible GPU (or per index in `workers.gpus`); a CPU run has one lane, because timings on a shared
CPU would disturb each other.

Each lane runs the problem's reference itself, with the run's plan (same secret seeds), and
compares its candidates to that reference: a speedup is always candidate and reference timed on
the same GPU. Candidates wait in one queue and go to whichever lane is free next; a lane prefers a candidate
whose problem it has warm (its judge running, the reference's work done), so a long-lived session
pays for a problem's reference once per lane, not once per candidate.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import threading
import time
from typing import Any, Callable, Optional, Sequence

from harness.candidate import Candidate
from harness.config import Config
from harness.errors import UserError
from harness.problem import Problem
from harness.records import CandidateRecord
from harness.store import RunStore
from harness.supervise import Launcher


@dataclasses.dataclass
class Lane:
    label: str  # "cuda:1" (the GPU's CUDA_VISIBLE_DEVICES value), "" on a CPU run
    gpu: str  # the CUDA_VISIBLE_DEVICES value its workers get ("" = inherit the parent's)
    launcher: Launcher

    @classmethod
    def single(cls, cfg: Config, device: str, gpu: str = "", label: str = "", index: int = 0) -> "Lane":
        """`index`: the lane's place among the run's lanes, which picks its CPUs (harness.quiet)."""
        # nvidia-smi (clocks, identity) numbers GPUs in PCI order; CUDA must number them the same way
        env = {"CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")} if gpu else {}
        return cls(label, gpu, Launcher(prestart=wants_prestart(cfg, device), env=env, lane_index=index, prewarm="cuda" if device == "cuda" else "", spares=cfg.workers.spares))

    @property
    def index(self) -> int:
        return self.launcher.lane_index


def wants_prestart(cfg: Config, device: str) -> bool:
    """Prestarted workers import torch while another worker runs: on by default for CUDA runs only,
    where the GPU is timed; on a CPU run that import would share the CPU with a timing."""
    return cfg.workers.prestart == "always" or (cfg.workers.prestart == "auto" and device == "cuda")


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES values: the variable's own entries
    when it is set, else 0 .. device_count - 1."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and value.strip():
        return [v.strip() for v in value.split(",") if v.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def local_lanes(cfg: Config, device: str) -> list[Lane]:
    if device != "cuda":
        return [Lane.single(cfg, device)]
    visible = visible_gpus()
    chosen = list(cfg.workers.gpus) or list(range(len(visible)))
    wrong = [g for g in chosen if g >= len(visible)]
    if wrong:
        raise UserError(f"workers.gpus names GPU {wrong[0]}, but {len(visible)} GPU(s) are visible (indices 0-{len(visible) - 1})")
    return [Lane.single(cfg, device, gpu=visible[g], label=f"cuda:{visible[g]}", index=i) for i, g in enumerate(chosen)]


def lane_count(cfg: Config, device: str) -> int:
    """How many lanes `local_lanes` makes: one per chosen GPU on a CUDA run, one on the CPU."""
    if device != "cuda":
        return 1
    return max(1, len(cfg.workers.gpus) or len(visible_gpus()))


FAIR_WAIT_S = 30.0  # a candidate queued this long goes next, warm problem or not


@dataclasses.dataclass(frozen=True)
class Job:
    """One candidate waiting for a lane, and where its record goes."""

    problem: Problem
    candidate: Candidate
    future: "concurrent.futures.Future[CandidateRecord]"
    queued_at: float  # time.monotonic() at submission

    @property
    def key(self) -> tuple[str, str]:
        return problem_key(self.problem)


def problem_key(problem: Problem) -> tuple[str, str]:
    """What makes two submissions the same problem: its file and its contents."""
    return (str(problem.path), problem.hash)


def gather(futures: Sequence["concurrent.futures.Future[CandidateRecord]"]) -> list[CandidateRecord]:
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

    def put(self, jobs: Sequence[tuple[Problem, Candidate]]) -> "list[concurrent.futures.Future[CandidateRecord]]":
        """Queue several candidates at once (no thread takes one before all are in)."""
        futures: list[concurrent.futures.Future[CandidateRecord]] = [concurrent.futures.Future() for _ in jobs]
        with self._changed:
            if self.stopping or self.closing:
                raise RuntimeError("the executor is closed")
            now = time.monotonic()
            self._jobs += [Job(problem, candidate, future, now) for (problem, candidate), future in zip(jobs, futures)]
            if self._on_first is not None:
                self._on_first()
                self._on_first = None
            self._changed.notify_all()
        return futures

    def take(self, choose: Callable[[list[Job]], list[Job]]) -> list[Job]:
        """The jobs `choose` picks from the queue (oldest first), waiting for some; [] once the
        queue is stopped, or closed with nothing left."""
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


class LocalExecutor:
    """Evaluates submitted candidates on this machine's lanes: one thread per lane takes the next
    job from a shared queue. Each lane keeps the evaluations of its last `warm` problems open (their
    judges running), and every lane checks a problem on the same plan (the same secret inputs)."""

    def __init__(self, cfg: Config, device: str, store: RunStore, *, on_record: Callable[[CandidateRecord], None], on_start: Callable[[Candidate], None], builds: Optional[Any] = None, on_problem: Callable[[Problem], None] = lambda p: None, warm: int = 1) -> None:
        self.cfg, self.device, self.store, self.builds = cfg, device, store, builds
        self.lanes = local_lanes(cfg, device)
        self.warm = max(1, warm)
        self._lock = threading.Lock()  # the callbacks
        self.queue = JobQueue(self._start_lanes)
        self._plans: dict[tuple[str, str], Any] = {}
        self._announced: set[tuple[str, str]] = set()
        self._threads: list[threading.Thread] = []
        self._warm: dict[int, collections.OrderedDict[tuple[str, str], Any]] = {}  # per lane (from its first job): problem -> ProblemEvaluation, oldest first
        self._state = threading.Lock()  # the warm evaluations (a lane changes its own; stop() reads them all), plans, announced

        def locked(fn: Callable[[Any], None]) -> Callable[[Any], None]:
            def call(value: Any) -> None:
                with self._lock:
                    fn(value)
            return call

        self.on_record, self.on_start, self.on_problem = locked(on_record), locked(on_start), locked(on_problem)

    def describe(self) -> str:
        if len(self.lanes) == 1:
            return ""
        return f"{len(self.lanes)} lanes ({', '.join(lane.label for lane in self.lanes)}), one evaluation at a time on each"

    def submit(self, problem: Problem, candidate: Candidate) -> "concurrent.futures.Future[CandidateRecord]":
        """Queue one candidate; its record arrives in the future (a harness bug as its exception)."""
        return self.submit_all([(problem, candidate)])[0]

    def submit_all(self, jobs: Sequence[tuple[Problem, Candidate]]) -> "list[concurrent.futures.Future[CandidateRecord]]":
        """Queue several candidates at once (no lane starts between them)."""
        return self.queue.put(jobs)

    def _start_lanes(self) -> None:
        self._warm = {i: collections.OrderedDict() for i in range(len(self.lanes))}
        self._threads = [threading.Thread(target=self._serve_lane, args=(lane, self._warm[i]), name=f"lane-{lane.label or 'cpu'}", daemon=True) for i, lane in enumerate(self.lanes)]
        for thread in self._threads:
            thread.start()

    def run_problem(self, problem: Problem, candidates: list[Candidate]) -> list[CandidateRecord]:
        """Every candidate of `problem`, over all lanes; the records in candidate order."""
        futures = self.submit_all([(problem, candidate) for candidate in candidates])
        try:
            return gather(futures)
        except KeyboardInterrupt:
            self.stop()
            raise

    def pending(self) -> int:
        return len(self.queue)

    def stop(self) -> None:
        """No new evaluations; end the running ones (their processes and children); queued jobs
        are cancelled."""
        self.queue.stop()
        for lane in self.lanes:
            lane.launcher.kill_all()
        with self._state:
            evaluations = [e for warm in self._warm.values() for e in warm.values()]
        for evaluation in evaluations:
            evaluation.stop()  # its judge too: a lane waiting on a hung reference wakes up now

    def close(self) -> None:
        """Finish the queued jobs, end every lane's evaluations and workers."""
        self.queue.close()
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes up for Ctrl-C
        for lane in self.lanes:
            lane.launcher.close()

    # -- a lane's thread -------------------------------------------------------------------------

    def _serve_lane(self, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], Any]") -> None:
        try:
            while True:
                job = self._next_job(warm)
                if job is None:
                    return
                if not job.future.set_running_or_notify_cancel():
                    continue
                try:
                    job.future.set_result(self._evaluate(job, lane, warm))
                except BaseException as exc:  # a harness bug: raised where the record is awaited
                    job.future.set_exception(exc)
        finally:
            with self._state:
                ending = list(warm.values())
                warm.clear()
            for evaluation in ending:
                evaluation.close()

    def _next_job(self, warm: "collections.OrderedDict[tuple[str, str], Any]") -> Optional[Job]:
        """The oldest job of a problem this lane has warm, else (or when the oldest has waited
        FAIR_WAIT_S) the oldest job; None once the executor stops, or closes with nothing queued."""
        def choose(jobs: list[Job]) -> list[Job]:
            if time.monotonic() - jobs[0].queued_at >= FAIR_WAIT_S:
                return [jobs[0]]
            return [next((job for job in jobs if job.key in warm), jobs[0])]

        taken = self.queue.take(choose)
        return taken[0] if taken else None

    def _evaluate(self, job: Job, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], Any]") -> CandidateRecord:
        from harness.evaluate import Plan, ProblemEvaluation

        with self._state:
            evaluation = warm.pop(job.key, None)
            evicted = [warm.popitem(last=False)[1] for _ in range(len(warm) - self.warm + 1)] if evaluation is None else []
        for old in evicted:  # the least recently used problem's judge ends first
            old.close()
        if evaluation is None:
            evaluation = ProblemEvaluation(job.problem, [], self.cfg, self.device, self.store, on_record=self.on_record, on_start=self.on_start, builds=self.builds, lane=lane)
            with self._state:
                evaluation.plan = self._plans.setdefault(job.key, Plan.fresh(evaluation.cfg))  # one plan per problem: every lane checks on the same inputs
        with self._state:
            warm[job.key] = evaluation
            first = job.key not in self._announced
            self._announced.add(job.key)
        if self.queue.stopping:
            evaluation.stop()
        if first:
            self.on_problem(job.problem)
        skipped = evaluation.prescreened(job.candidate)
        return skipped if skipped is not None else evaluation.evaluate(job.candidate)
