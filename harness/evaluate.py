"""Evaluate the candidates of one problem: the reference once, then each candidate in its own worker.

The parent plans secret seeds, runs the reference worker (its outputs are loaded into this process
and their files removed before any candidate starts), then runs every candidate worker on the same
inputs, compares each output as it arrives, and writes one record per candidate at once.
"""
from __future__ import annotations

import dataclasses
import datetime
import secrets
import shutil
import stat
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness.candidate import Candidate, needs_cuda_statically
from harness.compare import compare_outputs
from harness.config import Config
from harness.problem import Problem
from harness.records import CandidateRecord, CheckResult, ExtensionBuild, ReferenceRecord, TimingStats, from_dict
from harness.status import Status
from harness.store import RunStore
from harness.supervise import Failure, WorkerOutcome, default_memory_limit, run_worker


@dataclasses.dataclass(frozen=True)
class Call:
    input: int  # index of the input set
    mode: str  # "train" or "eval"

    @property
    def label(self) -> str:
        return f"trial {self.input + 1} ({self.mode})"


@dataclasses.dataclass(frozen=True)
class Plan:
    """Secret seeds and the ordered forward calls that reference and candidate both make."""

    construct_seed: int  # manual_seed before constructing Model and ModelNew
    input_seeds: tuple[int, ...]  # one per trial; never shown to candidates (only the tensors are)
    calls: tuple[Call, ...]  # after the same-seed call, in this order

    @classmethod
    def fresh(cls, cfg: Config) -> "Plan":
        seeds = tuple(secrets.randbits(62) for _ in range(cfg.check.trials))
        calls = tuple(Call(i, mode) for i in range(cfg.check.trials) for mode in cfg.check.modes)
        return cls(construct_seed=secrets.randbits(62), input_seeds=seeds, calls=calls)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class ProblemEvaluation:
    def __init__(
        self,
        problem: Problem,
        candidates: list[Candidate],
        cfg: Config,
        device: str,
        store: RunStore,
        on_record: Callable[[CandidateRecord], None] = lambda r: None,
        on_start: Callable[[Candidate], None] = lambda c: None,
    ) -> None:
        self.problem = problem
        self.candidates = candidates
        self.cfg = cfg
        self.device = device
        self.store = store
        self.on_record = on_record
        self.on_start = on_start
        self.problem_hash = problem.hash
        self.memory_limit = cfg.limits.memory_mb << 20 if cfg.limits.memory_mb else default_memory_limit()

    def run(self) -> list[CandidateRecord]:
        records: list[CandidateRecord] = []
        runnable: list[Candidate] = []
        for candidate in self.candidates:
            skip = self._prescreen(candidate)
            if skip is None:
                runnable.append(candidate)
            else:
                self.on_start(candidate)
                records.append(self._finish(self._record(candidate, *skip)))
        if not runnable:
            return records
        scratch = Path(tempfile.mkdtemp(prefix=f"harness-{self.problem.name[:20]}-"))
        try:
            plan = Plan.fresh(self.cfg)
            reference = self._run_reference(plan, scratch)
            for candidate in runnable:
                self.on_start(candidate)
                if reference.ok:
                    try:
                        record = self._run_candidate(candidate, plan, scratch, reference)
                    except Exception as exc:  # a harness bug on one candidate must not end the run
                        traceback.print_exc()
                        record = self._record(candidate, Status.HARNESS_ERROR, f"{type(exc).__name__}: {exc}")
                else:
                    record = self._record(candidate, Status.REFERENCE_FAILED, f"reference failed: {reference.record.reason}")
                records.append(self._finish(record))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return records

    # -- steps ---------------------------------------------------------------------------------

    def _prescreen(self, candidate: Candidate) -> Optional[Failure]:
        if candidate.extraction_failure is not None:
            return Status.EXTRACT_FAILED, candidate.extraction_failure
        if self.device == "cpu":
            why = needs_cuda_statically(candidate.path)
            if why:
                return Status.NEEDS_CUDA, f"{why}; this run is on the CPU"
        return None

    def _job(self, role: str, source: Path, plan: Plan, exchange: Path, outputs: Path) -> dict[str, Any]:
        timing = dataclasses.asdict(self.cfg.timing)
        enabled = timing.pop("enabled")
        cpu_threads = timing.pop("cpu_threads")
        return {
            "role": role,
            "source": str(source.resolve()),
            "class_name": "Model" if role == "reference" else "ModelNew",
            "device": self.device,
            "build_cache": str(self.cfg.path(self.cfg.build_cache_dir)),
            "exchange": str(exchange),
            "outputs": str(outputs),
            "construct_seed": plan.construct_seed,
            "input_seeds": list(plan.input_seeds) if role == "reference" else [],
            "n_inputs": len(plan.input_seeds),
            "same_seed_input": 0,
            "calls": [dataclasses.asdict(c) for c in plan.calls],
            "timing": timing if enabled else None,
            "allow_tf32": self.cfg.check.allow_tf32,
            "cpu_threads": cpu_threads,
        }

    def _worker(self, job: dict[str, Any], log_name: str, cwd: Path, on_message: Callable[[dict[str, Any]], Optional[Failure]] = lambda m: None) -> WorkerOutcome:
        return run_worker(
            job,
            timeouts=self.cfg.timeouts,
            memory_limit=self.memory_limit,
            log_path=self.store.log_path(self.problem.name, log_name),
            log_limit=self.cfg.limits.log_kib << 10,
            cwd=cwd,
            on_message=on_message,
        )

    def _run_reference(self, plan: Plan, scratch: Path) -> "ReferenceResult":
        exchange = scratch / "exchange"
        outputs = scratch / "reference-outputs"
        exchange.mkdir()
        outputs.mkdir()
        outcome = self._worker(self._job("reference", self.problem.path, plan, exchange, outputs), "_reference", outputs)
        expected: dict[str, Any] = {}
        timing = _timing(outcome)
        if outcome.failure is None:
            for label in ["same_seed"] + [f"call_{i}" for i in range(len(plan.calls))]:
                expected[label] = torch.load(outputs / f"{label}.pt", weights_only=True)
        shutil.rmtree(outputs, ignore_errors=True)  # expected outputs live only in this process now
        for path in exchange.iterdir():
            path.chmod(stat.S_IRUSR)
        reason = "ok" if outcome.failure is None else f"{outcome.failure[0].value}: {outcome.failure[1]}"
        record = ReferenceRecord(
            run_id=self.store.run_id,
            problem=self.problem.name,
            problem_hash=self.problem_hash,
            problem_path=str(self.problem.path),
            device=self.device,
            device_name=(outcome.done or {}).get("device_name", ""),
            ok=outcome.failure is None,
            reason=reason,
            timing=timing,
            wall_seconds=round(outcome.wall_seconds, 3),
            finished_at=_now(),
        )
        self.store.append(record)
        return ReferenceResult(record, expected, exchange)

    def _run_candidate(self, candidate: Candidate, plan: Plan, scratch: Path, reference: "ReferenceResult") -> CandidateRecord:
        outputs = Path(tempfile.mkdtemp(prefix=f"{candidate.name[:20]}-", dir=scratch))
        checks: list[CheckResult] = []
        tolerances = self.cfg.check.tolerances

        def on_message(message: dict[str, Any]) -> Optional[Failure]:
            if message.get("type") != "call":
                return None
            index = int(message["index"])
            path = outputs / f"call_{index}.pt"
            if not path.is_file():
                return Status.RUNTIME_ERROR, f"the worker reported call {index} but wrote no outputs"
            try:
                actual = torch.load(path, weights_only=True)  # weights_only: no code runs in the parent
            except Exception as exc:
                return Status.FORGED_RESULT, f"outputs of call {index} are not the file the worker wrote ({type(exc).__name__})"
            path.unlink()
            check = compare_outputs(plan.calls[index].label, reference.expected[f"call_{index}"], actual, tolerances)
            checks.append(check)
            if not check.passed:
                return Status.INCORRECT, f"{check.name}: {check.reason}"
            return None

        job = self._job("candidate", candidate.path, plan, reference.exchange, outputs)
        outcome = self._worker(job, candidate.name, outputs, on_message)
        same_seed = None
        same_seed_file = outputs / "same_seed.pt"
        if same_seed_file.is_file():
            try:
                same_seed_outputs = torch.load(same_seed_file, weights_only=True)
                same_seed = compare_outputs("same-seed construction (eval)", reference.expected["same_seed"], same_seed_outputs, tolerances)
            except Exception as exc:
                same_seed = CheckResult("same-seed construction (eval)", False, f"outputs unreadable ({type(exc).__name__})")
        shutil.rmtree(outputs, ignore_errors=True)

        builds = tuple(ExtensionBuild(**b) for m in outcome.messages if m.get("type") == "builds" for b in m["builds"])
        timing = _timing(outcome)
        warnings: list[str] = []
        if outcome.failure is not None:
            status, reason = outcome.failure
        elif len(checks) != len(plan.calls):
            status, reason = Status.HARNESS_ERROR, f"{len(checks)} of {len(plan.calls)} checks arrived"
        elif same_seed is not None and not same_seed.passed and self.cfg.check.require_same_seed:
            status, reason = Status.INCORRECT, f"{same_seed.name}: {same_seed.reason}"
        else:
            worst = max((c.max_abs_error or 0.0) for c in checks)
            status, reason = Status.CORRECT, f"matched {len(checks)} calls ({', '.join(self.cfg.check.modes)}); max abs error {worst:.2g}"
        if same_seed is not None and not same_seed.passed and not self.cfg.check.require_same_seed:
            warnings.append(f"same-seed construction differs from the reference ({same_seed.reason}); weights are created differently")
        speedup = None
        if status is Status.CORRECT and timing is not None and reference.timing is not None and timing.median_ms > 0:
            speedup = reference.timing.median_ms / timing.median_ms
        if timing is not None and timing.rse > self.cfg.timing.target_rse:
            warnings.append(
                f"timing did not settle: relative standard error {timing.rse:.1%} after {timing.n} calls "
                f"(stopped by {timing.stopped_by}); raise timing.budget_s or quiet the machine"
            )
        if outcome.log_bytes > self.cfg.limits.log_kib << 10:
            warnings.append(f"printed {outcome.log_bytes} bytes; the log keeps the first and last {self.cfg.limits.log_kib // 2} KiB")
        return self._record(
            candidate,
            status,
            reason,
            checks=tuple(checks),
            same_seed=same_seed,
            timing=timing,
            reference_ms=reference.timing.median_ms if reference.timing else None,
            speedup=speedup,
            builds=builds,
            phase_seconds=(outcome.done or {}).get("phase_seconds", {}),
            wall_seconds=round(outcome.wall_seconds, 3),
            warnings=tuple(warnings),
        )

    def _record(self, candidate: Candidate, status: Status, reason: str, **fields: Any) -> CandidateRecord:
        log = self.store.log_path(self.problem.name, candidate.name)
        return CandidateRecord(
            run_id=self.store.run_id,
            problem=self.problem.name,
            problem_hash=self.problem_hash,
            candidate=candidate.name,
            candidate_path=str(candidate.path),
            candidate_hash=candidate.hash,
            device=self.device,
            status=status,
            reason=_one_line(reason),
            log_path=str(log.relative_to(self.store.dir)) if log.exists() else "",
            finished_at=_now(),
            **fields,
        )

    def _finish(self, record: CandidateRecord) -> CandidateRecord:
        self.store.append(record)
        self.on_record(record)
        return record


@dataclasses.dataclass
class ReferenceResult:
    record: ReferenceRecord
    expected: dict[str, Any]  # label -> saved outputs, held in the parent only
    exchange: Path  # inputs, init args and state_dict shared with candidate workers

    @property
    def ok(self) -> bool:
        return self.record.ok

    @property
    def timing(self) -> Optional[TimingStats]:
        return self.record.timing


def _timing(outcome: WorkerOutcome) -> Optional[TimingStats]:
    for message in outcome.messages:
        if message.get("type") == "timing":
            return from_dict(TimingStats, message["stats"])
    return None


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:400] if line else "no reason given"
