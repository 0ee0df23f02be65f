"""This machine's lanes, and the local executor that keeps every lane busy.

A lane (harness.parent.supervise.Lane) is where one evaluation runs at a time: one GPU (its workers see only that
GPU, through CUDA_VISIBLE_DEVICES), or the CPU. Two timings never share a lane. A CUDA run has one lane per
visible GPU (or per index in `workers.gpus`); a CPU run has one lane, because timings on a shared
CPU would disturb each other.

Each lane runs the problem's reference itself, with the run's plan (same secret seeds), and
compares its candidates to that reference: a speedup is always candidate and reference timed on
the same GPU. Candidates wait in one queue and go to whichever lane is free next. A lane takes a candidate
whose build ahead has ended before one whose build still runs (a slow build holds back only itself), then
prefers a candidate whose problem it has warm (its judge running, the reference's work done), so a long-lived
session pays for a problem's reference once per lane, not once per candidate. The queue, the futures
and the announcements are the dispatch both executors share (harness.parent.executor).
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from typing import Callable, Mapping, Optional

from harness.core.config import Config, Device
from harness.core.errors import UserError
from harness.core.plan import Plan
from harness.core.records import CandidateRecord
from harness.parent.evaluate import ProblemEvaluation
from harness.parent.executor import UNREADY_POLL_S, Job, QueuedExecutor, problem_key
from harness.parent.quiet import QuietHost
from harness.parent.resources import RunResources, lane_count, visible_gpus
from harness.parent.supervise import Backlog, Lane
from harness.sources.problem import Problem

__all__ = ["FAIR_WAIT_S", "LocalExecutor", "choose_job", "lane_count", "local_lanes", "visible_gpus"]


def local_lanes(
    cfg: Config, device: str, quiet: Optional[QuietHost] = None, worker_env: Optional[Mapping[str, str]] = None
) -> list[Lane]:
    """The lanes of this machine (lane_count of them), their processes on the run's quiet host `quiet`,
    their workers given `worker_env` (the run's boundary)."""
    if device != Device.CUDA:
        return [Lane.single(cfg, device, quiet=quiet, worker_env=worker_env)]
    visible = visible_gpus()
    chosen = list(cfg.workers.gpus) or list(range(len(visible)))
    wrong = [g for g in chosen if g >= len(visible)]
    if wrong:
        raise UserError(
            f"workers.gpus names GPU {wrong[0]}, but {len(visible)} GPU(s) are visible (indices 0-{len(visible) - 1})"
        )
    per_gpu = cfg.workers.lanes_per_gpu
    return [
        Lane.single(
            cfg,
            device,
            gpu=visible[g],
            label=f"cuda:{visible[g]}" if per_gpu == 1 else f"cuda:{visible[g]}/{k}",
            index=i * per_gpu + k,
            quiet=quiet,
            worker_env=worker_env,
        )
        for i, g in enumerate(chosen)
        for k in range(per_gpu)
    ]


FAIR_WAIT_S = 30.0  # a candidate queued this long goes next, warm problem or not


def choose_job(
    jobs: list[Job],
    mine: set[tuple[str, str]],
    elsewhere: set[tuple[str, str]],
    now: float,
    ready: Callable[[Job], bool] = lambda job: True,
) -> Job:
    """A lane's next job of `jobs` (oldest first). Jobs that are `ready` (their build ahead ended, or they have
    none) go before those whose build still runs: a lane waits for a build only when no other job can start.
    Among them: the oldest of a problem it has warm (`mine`), else the oldest of a problem no other lane has warm
    (`elsewhere`: lanes spread over problems before they share one, each sharing lane paying a reference pass),
    else the oldest; the oldest whenever it has waited FAIR_WAIT_S by `now`."""
    pool = [job for job in jobs if ready(job)] or jobs
    if now - pool[0].queued_at >= FAIR_WAIT_S:
        return pool[0]
    return next((job for job in pool if job.key in mine), None) or next(
        (job for job in pool if job.key not in elsewhere), pool[0]
    )


class LocalExecutor(QueuedExecutor):
    """Evaluates submitted candidates on this machine's lanes, with the run's `resources` (its
    progress to their observer): one thread per lane takes the next job from a shared queue. Each
    lane keeps the evaluations of its last `warm` problems open (their judges running), and every
    lane checks a problem on the same plan (the same secret inputs)."""

    def __init__(self, resources: RunResources, *, warm: int = 1) -> None:
        observer = resources.observer
        super().__init__(on_record=observer.on_record, on_start=observer.on_start, on_problem=observer.on_problem)
        self.resources = resources
        self.cfg, self.device, self.store = resources.cfg, resources.device, resources.store
        self.lanes = local_lanes(self.cfg, self.device, resources.quiet, resources.boundary.env)
        self.warm = max(1, warm)
        self._plans: dict[tuple[str, str], Plan] = {}
        # per lane (from its first job): problem -> its evaluation, oldest first
        self._warm: dict[int, collections.OrderedDict[tuple[str, str], ProblemEvaluation]] = {}
        # the warm evaluations (a lane changes its own; stop() reads them all) and the plans
        self._state = threading.Lock()
        for lane in self.lanes:  # once sealed, no lane starts a judge or a worker for work that will not come
            lane.launcher.backlog = self._backlog
            lane.launcher.start_zygote(self.store.dir / "logs")  # its imports overlap the first builds

    def describe(self) -> str:
        if len(self.lanes) == 1:
            return ""
        shared = (
            f", {self.cfg.workers.lanes_per_gpu} per GPU taking turns to time"
            if self.cfg.workers.lanes_per_gpu > 1
            else ""
        )
        return (
            f"{len(self.lanes)} lanes ({', '.join(lane.label for lane in self.lanes)}), one evaluation at a time on "
            f"each{shared}"
        )

    def _servers(self) -> list[tuple[str, Callable[[], None]]]:
        self._warm = {i: collections.OrderedDict() for i in range(len(self.lanes))}
        return [
            (f"lane-{lane.label or 'cpu'}", functools.partial(self._serve_lane, lane, self._warm[i]))
            for i, lane in enumerate(self.lanes)
        ]

    def _interrupt(self) -> None:
        """End the running evaluations (their processes and children). Every evaluation is marked
        stopped before anything is killed: a worker the kill ends is seen by its lane at once, and
        that lane must write no record of it (it read SIGKILL as "out of memory")."""
        with self._state:
            evaluations = [e for warm in self._warm.values() for e in warm.values()]
        for evaluation in evaluations:
            evaluation.stopped.set()
        for lane in self.lanes:
            lane.launcher.kill_all()
        for evaluation in evaluations:
            evaluation.stop()  # its judge too: a lane waiting on a hung reference wakes up now

    def _release(self) -> None:
        for lane in self.lanes:
            lane.launcher.close()

    def _backlog(self) -> Optional[Backlog]:
        """What the lanes may still be given, once the executor was sealed: the queued jobs, and the problems among
        them no lane has warm (each needs a judge); None while more may be submitted."""
        keys = self.queue.to_come()
        if keys is None:
            return None
        with self._state:
            warm = {key for lane_warm in self._warm.values() for key in lane_warm}
        return Backlog(problems=len(set(keys) - warm), jobs=len(keys))

    # -- a lane's thread -------------------------------------------------------------------------

    def _serve_lane(self, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]") -> None:
        try:
            while True:
                job = self._next_job(lane, warm)
                if job is None:
                    return
                if self._claim([job]):

                    def evaluate(job: Job = job) -> list[CandidateRecord]:
                        return [self._evaluate(job, lane, warm)]

                    self._settle([job], evaluate)
        finally:
            with self._state:
                ending = list(warm.values())
                warm.clear()
            for evaluation in ending:
                evaluation.close()

    def _ready(self, job: Job) -> bool:
        """Whether `job` can start without waiting for its build ahead (it ended, or there is none)."""
        builds = self.resources.builds
        return builds is None or builds.done(job.candidate.path)

    def _next_job(
        self, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]"
    ) -> Optional[Job]:
        """The job `choose_job` picks for this lane, from its warm problems and the other lanes'. While no queued
        job's build ahead has ended, the lane takes none: it runs the reference pass of the one it would choose,
        waits until any of those builds ends, and chooses again, so it never waits on one build while another
        candidate is built. None once the executor stops, or closes with nothing queued."""
        builds = self.resources.builds
        prepared: set[tuple[str, str]] = set()  # problems whose reference pass this wait ran (or tried)
        while True:
            unready: list[Job] = []  # filled when no queued job is ready: the one to prepare, then all of them
            taken = self.queue.take(functools.partial(self._choose, warm, unready))
            if taken or not unready or builds is None:
                return taken[0] if taken else None
            if unready[0].key not in prepared:
                prepared.add(unready[0].key)
                self._prepare(unready[0], lane, warm)
            builds.wait_any([job.candidate.path for job in unready[1:]], timeout=UNREADY_POLL_S)

    def _choose(
        self, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]", unready: list[Job], jobs: list[Job]
    ) -> list[Job]:
        """`choose_job`'s pick of `jobs` for the lane whose warm problems are `warm`; none when the run builds ahead
        and no job is ready (`unready` then holds the job it would choose, then every job)."""
        with self._state:
            elsewhere = {key for other in self._warm.values() if other is not warm for key in other}
        now = time.monotonic()
        ready = {id(job) for job in jobs if self._ready(job)}  # each build asked once per choice
        if self.resources.builds is not None and not ready:
            unready[:] = [choose_job(jobs, set(warm), elsewhere, now), *jobs]
            return []
        return [choose_job(jobs, set(warm), elsewhere, now, lambda job: id(job) in ready)]

    def _prepare(
        self, job: Job, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]"
    ) -> None:
        """The reference pass of `job`'s problem on this lane, ahead of the job (still queued): its evaluation is
        then warm when the lane takes it. A failure here is met again, and recorded, when the job is evaluated."""
        if self.queue.stopping:
            return
        evaluation = self._warm_evaluation(job, lane, warm)
        self._announce(job.problem)
        try:
            evaluation.prepare()
        except Exception:  # noqa: BLE001 - Stopped, or a harness bug that the job's evaluation raises again
            pass

    def _warm_evaluation(
        self, job: Job, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]"
    ) -> ProblemEvaluation:
        """`job`'s problem's evaluation on this lane, now its most recently used: the warm one, else a new one (the
        least recently used problem's judge ending first when the lane holds too many)."""
        with self._state:
            evaluation = warm.pop(job.key, None)
            evicted = (
                [warm.popitem(last=False)[1] for _ in range(len(warm) - self.warm + 1)] if evaluation is None else []
            )
        for old in evicted:
            old.close()
        if evaluation is None:
            evaluation = self._evaluation(job.problem, lane)
        with self._state:
            warm[job.key] = evaluation
        if self.queue.stopping:
            evaluation.stop()
        return evaluation

    def _evaluate(
        self, job: Job, lane: Lane, warm: "collections.OrderedDict[tuple[str, str], ProblemEvaluation]"
    ) -> CandidateRecord:
        evaluation = self._warm_evaluation(job, lane, warm)
        self._announce(job.problem)
        skipped = evaluation.prescreened(job.candidate)
        return skipped if skipped is not None else evaluation.evaluate(job.candidate)

    def _evaluation(self, problem: Problem, lane: Lane) -> ProblemEvaluation:
        """A problem's evaluation on `lane`, on the problem's one plan: every lane checks on the same inputs."""
        evaluation = ProblemEvaluation(
            problem,
            [],
            self.cfg,
            self.device,
            self.store,
            on_record=self.on_record,
            on_start=self.on_start,
            lane=lane,
            resources=self.resources,
        )
        with self._state:  # drawn under the problem's settings, which the evaluation resolved
            evaluation.plan = self._plans.setdefault(problem_key(problem), Plan.fresh(evaluation.cfg))
        return evaluation
