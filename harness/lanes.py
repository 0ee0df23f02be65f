"""Lanes, and the local executor that keeps every lane busy.

A lane is where one evaluation runs at a time: one GPU (its workers see only that GPU, through
CUDA_VISIBLE_DEVICES), or the CPU. Two timings never share a lane. A CUDA run has one lane per
visible GPU (or per index in `workers.gpus`); a CPU run has one lane, because timings on a shared
CPU would disturb each other.

Each lane runs the problem's reference itself, with the run's plan (same secret seeds), and
compares its candidates to that reference: a speedup is always candidate and reference timed on
the same GPU. The candidates of a problem are handed to whichever lane is free next.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
from typing import Any, Callable, Optional

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
        return cls(label, gpu, Launcher(prestart=wants_prestart(cfg, device), env=env, lane_index=index))

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


class LocalExecutor:
    """Evaluates each problem's candidates on this machine's lanes, one thread per busy lane."""

    def __init__(self, cfg: Config, device: str, store: RunStore, *, on_record: Callable[[CandidateRecord], None], on_start: Callable[[Candidate], None], builds: Optional[Any] = None) -> None:
        self.cfg, self.device, self.store, self.builds = cfg, device, store, builds
        self.lanes = local_lanes(cfg, device)
        self._lock = threading.Lock()
        self._stopping = False

        def locked(fn: Callable[[Any], None]) -> Callable[[Any], None]:
            def call(value: Any) -> None:
                with self._lock:
                    fn(value)
            return call

        self.on_record, self.on_start = locked(on_record), locked(on_start)

    def describe(self) -> str:
        if len(self.lanes) == 1:
            return ""
        return f"{len(self.lanes)} lanes ({', '.join(lane.label for lane in self.lanes)}), one evaluation at a time on each"

    def _evaluation(self, problem: Problem, candidates: list[Candidate], lane: Lane) -> Any:
        from harness.evaluate import ProblemEvaluation

        return ProblemEvaluation(problem, candidates, self.cfg, self.device, self.store, on_record=self.on_record, on_start=self.on_start, builds=self.builds, lane=lane)

    def run_problem(self, problem: Problem, candidates: list[Candidate]) -> list[CandidateRecord]:
        from harness.evaluate import Plan

        first = self._evaluation(problem, candidates, self.lanes[0])
        if len(self.lanes) == 1:
            return first.run()
        records, runnable = first.screen()
        if not runnable:
            return records
        plan = Plan.fresh(first.cfg)  # one plan: every lane checks on the same inputs
        pending = collections.deque(runnable)
        finished: dict[Any, CandidateRecord] = {}
        errors: list[BaseException] = []

        def drive(evaluation: Any) -> None:
            evaluation.plan = plan
            try:
                while not self._stopping:
                    with self._lock:
                        if not pending:
                            return
                        candidate = pending.popleft()
                    finished[candidate.path] = evaluation.evaluate(candidate)
            except BaseException as exc:  # a harness bug: re-raised in the main thread
                errors.append(exc)
            finally:
                evaluation.close()

        evaluations = [first] + [self._evaluation(problem, candidates, lane) for lane in self.lanes[1 : len(runnable)]]
        threads = [threading.Thread(target=drive, args=(e,), name=f"lane-{e.lane.label}", daemon=True) for e in evaluations]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)  # wakes up for Ctrl-C
        except BaseException:
            self.stop()
            raise
        if errors:
            raise errors[0]
        return records + [finished[c.path] for c in runnable if c.path in finished]

    def stop(self) -> None:
        """No new evaluations; end the running ones (their processes and children)."""
        self._stopping = True
        for lane in self.lanes:
            lane.launcher.kill_all()

    def close(self) -> None:
        for lane in self.lanes:
            lane.launcher.close()
