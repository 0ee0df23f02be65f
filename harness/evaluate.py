"""Evaluate the candidates of one problem on one lane: its judge once, then each candidate in its own worker.

The parent plans secret seeds and starts the lane's judge (harness.judge), which runs the reference
through the plan on the device. Each candidate's worker then gets its inputs from the judge (a
region of its own), reports each step, and the judge compares the step's outputs in place; this
process only relays steps and verdicts, never tensors, and writes one record per candidate at once.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import secrets
import shutil
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness import protocol as P
from harness.candidate import Candidate, needs_cuda_statically
from harness.protocol import Call
from harness import integrity
from harness.flags import Finding
from harness.sanitize import find_tool, sanitize
from harness.scan import declared_kernels, scan_source
from harness.config import Config
from harness.lane import Lane
from harness.problem import Problem
from harness.pairing import LAUNCH_BOUND_MS, Pairing, resolve_mode
from harness.records import Baseline, CallProfile, CandidateRecord, CheckResult, NullFloor, PairedSpeedup, ReferenceRecord, SanitizerRun, TimingStats, from_dict, to_dict
from harness.scratch import current as current_scratch
from harness.status import Status
from harness.store import RunStore
from harness.supervise import Failure, JudgeClient, JudgeFailed, Reply, WorkerOutcome, default_memory_limit, run_worker
from harness import verdict
from harness.verdict import Case, Compared, Reported, Rules

__all__ = ["Call", "Plan", "ProblemEvaluation", "compare_times", "timing_warnings"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Secret seeds and the ordered forward calls that reference and candidate both make."""

    construct_seed: int  # manual_seed before constructing Model and ModelNew
    input_seeds: tuple[int, ...]  # one per trial; never shown to candidates (only the tensors are)
    distributions: tuple[str, ...]  # one per trial: how its floating inputs are drawn
    calls: tuple[Call, ...]  # after the same-seed call, in this order
    other_size_trial: Optional[int] = None  # index of the trial at another input size (after the regular ones)
    randomize_weights: bool = True  # the reference's weights are redrawn before candidates load them
    gradient_seed: int = 0  # the random projection of the outputs whose backward both sides take
    rng_seed: int = 0  # torch's generators are seeded with this plus the call's index before each checked call, on
                       # both sides: a reference that draws random numbers (train-mode dropout) draws the same ones
                       # for a candidate that draws as it does. Not derived from the input seeds, which stay secret

    @property
    def precision_call(self) -> Optional[int]:
        """The call the reference also makes in float64: the first regular eval call."""
        return next((i for i, c in enumerate(self.calls) if c.mode == "eval" and not c.repeat and not c.other_size), None)

    @property
    def timed_inputs(self) -> int:
        """Input sets the timer rotates over: the regular trials only."""
        return len(self.input_seeds) - (self.other_size_trial is not None)

    @classmethod
    def fresh(cls, cfg: Config) -> "Plan":
        """A plan from a problem's config (`Config.for_problem`: its declarations already applied)."""
        trials = cfg.check.trials + (1 if cfg.check.other_size else 0)
        other = cfg.check.trials if cfg.check.other_size else None
        seeds = tuple(secrets.randbits(62) for _ in range(trials))
        kinds = cfg.check.input_distributions
        distributions = tuple(kinds[i % len(kinds)] if i != other else "given" for i in range(trials))
        calls = tuple(Call(i, mode, distributions[i]) for i in range(cfg.check.trials) for mode in cfg.check.modes)
        if other is not None:
            calls += tuple(Call(other, mode, "given", other_size=True) for mode in cfg.check.modes)
        # Repeats come last: the module's state is final, as it is when the timed calls run.
        calls += tuple(Call(0, "eval", distributions[0], repeat=k) for k in range(1, cfg.check.repeats + 1))
        return cls(construct_seed=secrets.randbits(62), input_seeds=seeds, distributions=distributions, calls=calls, other_size_trial=other, randomize_weights=cfg.check.randomize_weights, gradient_seed=secrets.randbits(62), rng_seed=secrets.randbits(62))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class ProblemEvaluation:
    """One problem on one lane: the reference once (on the first candidate), then candidates one
    at a time. `run()` evaluates every candidate; an executor spreading candidates over several
    lanes gives each lane its own ProblemEvaluation with the same `plan` and calls `evaluate`."""

    def __init__(
        self,
        problem: Problem,
        candidates: list[Candidate],
        cfg: Config,
        device: str,
        store: RunStore,
        on_record: Callable[[CandidateRecord], None] = lambda r: None,
        on_start: Callable[[Candidate], None] = lambda c: None,
        builds: Optional[Any] = None,
        lane: Optional[Lane] = None,
        plan: Optional[Plan] = None,
    ) -> None:
        self.problem = problem
        self.candidates = candidates
        self.cfg = cfg.for_problem(problem.settings)  # the problem's tolerances and backward contract
        self.device = device
        self.store = store
        self.on_record = on_record
        self.on_start = on_start
        self.builds = builds  # a harness.prebuild.BuildAhead already building these candidates, or None
        self.lane: Lane = lane if lane is not None else Lane.single(cfg, device)
        self._owns_lane = lane is None  # then its prestarted worker is ours to end
        self.problem_hash = problem.hash
        self.memory_limit = cfg.limits.memory_mb << 20 if cfg.limits.memory_mb else default_memory_limit()
        self.plan: Optional[Plan] = plan  # the secret seeds and calls; None: a fresh one is drawn for the first candidate
        self._reference: Optional[ReferenceResult] = None
        self._judge: Optional[JudgeClient] = None
        self._judge_dir: Optional[Path] = None
        self._judge_failures: list[str] = []  # why earlier judges of this lane ended (each restart is reported)
        self._restart_note = ""  # a warning for the next record: its judge is a restarted one
        self._stopped = False  # stop() was called: nothing more is written
        self._sanitized: dict[tuple[Any, ...], tuple[tuple[SanitizerRun, ...], list[Finding]]] = {}  # a source's sanitizer runs, for a resubmission
        self._timing_mode: tuple[str, str] = (cfg.timing.mode if cfg.timing.mode != "auto" else "eager", "")  # (mode, why), once the reference is profiled

    def screen(self) -> tuple[list[CandidateRecord], list[Candidate]]:
        """Records for candidates that cannot run here (written now), and the runnable rest."""
        records: list[CandidateRecord] = []
        runnable: list[Candidate] = []
        for candidate in self.candidates:
            skipped = self.prescreened(candidate)
            if skipped is None:
                runnable.append(candidate)
            else:
                records.append(skipped)
        return records, runnable

    def prescreened(self, candidate: Candidate) -> Optional[CandidateRecord]:
        """The record of a candidate that cannot run here (written now), else None."""
        skip = self._prescreen(candidate)
        if skip is None:
            return None
        self.on_start(candidate)
        return self._finish(self._record(candidate, *skip))

    def failed(self, candidate: Candidate, status: Status, reason: str) -> CandidateRecord:
        """The record of a candidate whose evaluation failed outside this one (an executor lost
        its lane), written now."""
        return self._finish(self._record(candidate, status, reason))

    def run(self) -> list[CandidateRecord]:
        records, runnable = self.screen()
        try:
            records.extend(self.evaluate(candidate) for candidate in runnable)
        finally:
            self.close()
        return records

    def evaluate(self, candidate: Candidate) -> CandidateRecord:
        """Evaluate one runnable candidate on this lane (its judge first, once) and write its record."""
        if self._reference is None:
            self.plan = self.plan or Plan.fresh(self.cfg)
            self._reference = self._run_reference(self.plan)
        self.on_start(candidate)
        if self.builds is not None:
            self.builds.wait(candidate.path)  # the worker then loads the finished build
        reference = self._reference
        if self._judge is not None and not self._judge.running():
            self._judge_failures.append(f"it ended ({self._judge.describe_exit()})")
            self._end_judge()
        if reference.ok and self._judge is None:
            reference = self._restart_judge()
        if not reference.ok:
            return self._finish(self._record(candidate, Status.REFERENCE_FAILED, f"reference failed: {reference.record.reason}"))
        try:
            record = self._run_candidate(candidate, self.plan, reference)
        except JudgeFailed as exc:  # the judge, not the candidate, failed: the next candidate gets a new one
            self._judge_failures.append(str(exc))
            self._end_judge()
            record = self._record(candidate, Status.HARNESS_ERROR, f"the lane's judge failed during this candidate: {exc}")
        except Exception as exc:  # a harness bug on one candidate must not end the run
            traceback.print_exc()
            record = self._record(candidate, Status.HARNESS_ERROR, f"{type(exc).__name__}: {exc}")
        return self._finish(record)

    def close(self) -> None:
        self._end_judge()
        self._reference = None
        if self._owns_lane:
            self.lane.launcher.close()

    # -- steps ---------------------------------------------------------------------------------

    def _prescreen(self, candidate: Candidate) -> Optional[Failure]:
        if candidate.extraction_failure is not None:
            return Status.EXTRACT_FAILED, candidate.extraction_failure
        if self.device == "cpu":
            why = needs_cuda_statically(candidate.path)
            if why:
                return Status.NEEDS_CUDA, f"{why}; this run is on the CPU"
        return None

    def _timing_settings(self, mode: Optional[str] = None) -> P.TimerSettings:
        """The timer's settings as workers and the judge take them (no policy keys); `mode` in place of the config's when given."""
        return P.TimerSettings.from_config(self.cfg.timing, mode)

    def _judge_job(self, plan: Plan, measure: bool) -> P.JudgeJob:
        """The judge's job; with `measure`, it also measures the problem's speed-of-light at start."""
        cfg = self.cfg
        return P.JudgeJob(
            source=str(self.problem.path.resolve()),
            device=self.device,
            build_cache=str(cfg.path(cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            input_seeds=plan.input_seeds,
            distributions=plan.distributions,
            calls=plan.calls,
            other_size_trial=plan.other_size_trial,
            randomize_weights=plan.randomize_weights,
            precision_call=plan.precision_call,
            timed_inputs=plan.timed_inputs,
            gradients=cfg.check.gradients != "off",
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            allow_tf32=cfg.check.allow_tf32,
            cpu_threads=cfg.timing.cpu_threads,
            tolerances={k: dataclasses.asdict(v) for k, v in cfg.check.tolerances.items()},
            gradient_tolerance_factor=cfg.check.gradient_tolerance_factor,
            timing=self._timing_settings() if cfg.timing.enabled else None,
            speed_of_light_cache=str(cfg.path(cfg.measurement_cache_dir)) if measure and cfg.timing.enabled and cfg.speed_of_light.enabled else "",
            guard_bands=cfg.check.guard_bands,
        )

    def _job(self, role: P.Role, source: Path, plan: Plan, session: P.Session, *, compile_mode: Optional[str] = None, class_name: Optional[str] = None) -> P.WorkerJob:
        return P.WorkerJob(
            role=role,
            source=str(source.resolve()),
            class_name=class_name or ("ModelNew" if role is P.Role.CANDIDATE else "Model"),
            compile_mode=compile_mode,
            device=self.device,
            build_cache=str(self.cfg.path(self.cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            calls=self._calls(role, plan),
            timing=self._timing_settings(self._timing_mode[0]) if self.cfg.timing.enabled else None,
            allow_tf32=self.cfg.check.allow_tf32,
            gradients=self.cfg.check.gradients != "off",
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            cpu_threads=self.cfg.timing.cpu_threads,
            guard_bands=self.cfg.check.guard_bands,
            weights=self.cfg.check.weights,
            session=session,
        )

    def _calls(self, role: P.Role, plan: Plan) -> tuple[Call, ...]:
        """A candidate makes every planned call; a compile baseline (the reference itself, compiled)
        only the first trial's, once per mode: its check is that compiling kept the function."""
        return plan.calls if role is P.Role.CANDIDATE else plan.calls[: len(self.cfg.check.modes)]

    def _worker(self, job: P.WorkerJob, log_name: str, cwd: Path, on_message: Callable[[Any], Optional[Failure | Reply]] = lambda m: None) -> WorkerOutcome:
        return run_worker(
            job,
            timeouts=self.cfg.timeouts,
            memory_limit=self.memory_limit,
            log_path=self.store.log_path(self.problem.name, log_name),
            log_limit=self.cfg.limits.log_kib << 10,
            cwd=cwd,
            on_message=on_message,
            launcher=self.lane.launcher,
        )

    def _start_judge(self, plan: Plan, measure: bool) -> P.ReferenceReport:
        """A new judge for this lane, run once through the plan."""
        self._end_judge()
        self._judge_dir = current_scratch().make(f"judge-{self.problem.name[:20]}-")
        self._judge = JudgeClient(log_path=self.store.log_path(self.problem.name, "_reference"), cwd=self._judge_dir, env=self.lane.launcher.env, lane_index=self.lane.index)
        try:
            report = self._judge.request(P.Start(self._judge_job(plan, measure)), self.cfg.timeouts.load, self.cfg.timeouts)
        except JudgeFailed as exc:
            self._end_judge()
            return P.ReferenceReport(False, f"{Status.CRASHED.value}: {exc}")
        if not report.ok:
            self._end_judge()
        return report

    def _end_judge(self) -> None:
        if self._judge is not None:
            self._judge.close()
            self._judge = None
        if self._judge_dir is not None:
            shutil.rmtree(self._judge_dir, ignore_errors=True)
            self._judge_dir = None

    def _restart_judge(self) -> "ReferenceResult":
        """After a judge failed, the next candidate gets a new one (its speed-of-light is not
        measured again: the record keeps the first judge's)."""
        assert self._reference is not None and self.plan is not None
        report = self._start_judge(self.plan, measure=False)
        self._restart_note = f"the lane's judge was restarted before this candidate (the one before: {self._judge_failures[-1] if self._judge_failures else 'ended'})"
        if not report.ok:
            record = dataclasses.replace(self._reference.record, ok=False, reason=f"the restarted judge failed: {report.reason}")
            self._reference = ReferenceResult(record)
        return self._reference

    def _run_reference(self, plan: Plan) -> "ReferenceResult":
        cache = TimingCache(self.cfg, self.problem_hash, self.device, self.lane.gpu)
        cached = cache.load() if self.cfg.timing.reuse_reference and self.cfg.timing.enabled else None
        started = datetime.datetime.now()
        report = self._start_judge(plan, measure=cached is None or cached.speed_of_light is None)
        # One timing mode for the problem (timing.mode auto: graph when the reference is launch-bound)
        self._timing_mode = resolve_mode(self.cfg.timing.mode, report.profile)
        record = ReferenceRecord(
            run_id=self.store.run_id,
            problem=self.problem.name,
            problem_hash=self.problem_hash,
            problem_path=str(self.problem.path),
            device=self.device,
            device_name=report.device_name,
            ok=report.ok,
            reason=report.reason,
            speed_of_light=report.speed_of_light,
            profile=report.profile,
            other_size=report.other_size,
            other_size_note=report.other_size_note,
            wall_seconds=round((datetime.datetime.now() - started).total_seconds(), 3),
            finished_at=_now(),
            lane=self.lane.label,
            declared=dict(self.problem.settings),
            data_plane=report.data_plane,
            peak_bytes=report.peak_bytes,
            notes=tuple(n for n in (report.float64_note, f"profiling the reference failed: {report.profile_error}" if report.profile_error else "", f"speed-of-light not measured: {report.speed_of_light_error}" if report.speed_of_light_error else "") if n) + report.input_structure,
        )
        result = ReferenceResult(record)
        if record.ok and cached is not None:
            # Reused: the torch.compile baselines' paired timings and the speed-of-light (the eager
            # reference itself is timed with every candidate, so nothing of its own is reused).
            record = dataclasses.replace(record, baselines=cached.baselines, speed_of_light=cached.speed_of_light or record.speed_of_light, timing_reused_from=cached.timing_reused_from or cached.run_id)
        elif record.ok and self.cfg.timing.enabled:
            result.record = record
            baselines = tuple(self._run_baseline(mode, plan, result) for mode in self.cfg.baselines.compile_modes)
            record = dataclasses.replace(record, baselines=baselines)
            if self.cfg.timing.reuse_reference and all(b.ok for b in baselines):
                cache.save(record)
        if record.ok and self.cfg.timing.enabled and self._wants_null():
            result.record = record
            record = dataclasses.replace(record, null_floor=self._run_null(plan))
        if record.ok and self.cfg.timing.enabled:
            # The reference's own timing, for the record: its rounds paired with the null candidate,
            # else with the first baseline (each candidate's speedup uses the rounds paired with it).
            sides = [record.null_floor.paired if record.null_floor else None] + ([b.paired for b in record.baselines] if not record.timing_reused_from else [])
            reference_timing = next((p.reference for p in sides if p is not None), None)
            record = dataclasses.replace(record, timing=reference_timing)
        result.record = record
        if self._stopped:
            raise Stopped(f"{self.problem.name}: the run was stopped during its reference")
        self.store.append(record)
        return result

    def _wants_null(self) -> bool:
        setting = self.cfg.timing.null_candidate
        return setting == "on" or (setting == "auto" and self.device == "cuda")

    def _run_null(self, plan: Plan) -> NullFloor:
        """The null candidate: the problem's own Model through the candidate path (every check, then
        timed in turns with the reference). Identical code: its speedup is this run's 1.00x."""
        try:
            compared = self._run_compared(P.Role.CANDIDATE, self.problem.path, plan, "_null", class_name="Model", compared_name="the null candidate")
        except JudgeFailed as exc:
            self._judge_failures.append(str(exc))
            self._end_judge()
            return NullFloor(Status.HARNESS_ERROR.value, _one_line(f"the lane's judge failed: {exc}"))
        if compared.outcome.failure is not None:
            status, reason = compared.outcome.failure
            return NullFloor(status.value, _one_line(reason))
        worst = max((c.max_abs_error or 0.0 for c in compared.checks), default=0.0)
        return NullFloor(Status.CORRECT.value, f"matched {len(plan.calls)} calls; max abs error {worst:.2g}", compared.paired)

    def _run_baseline(self, mode: str, plan: Plan, reference: "ReferenceResult") -> Baseline:
        """torch.compile of the reference, in its own worker: checked by the judge like a
        candidate, then timed in turns with the eager reference. Its failure never fails the reference."""
        name = f"torch.compile({mode})"
        try:
            compared = self._run_compared(P.Role.BASELINE, self.problem.path, plan, f"_compile-{mode}", compile_mode=mode, compared_name=name)
        except JudgeFailed as exc:
            self._judge_failures.append(str(exc))
            self._end_judge()
            return Baseline(name, False, _one_line(f"the lane's judge failed: {exc}"))
        outcome, checks = compared.outcome, compared.checks
        compiled = outcome.first(P.Compiled)
        seconds = compiled.seconds if compiled is not None else None
        worst = max((c.max_abs_error or 0.0 for c in checks), default=None)
        if outcome.failure is not None:
            return Baseline(name, False, _one_line(f"{outcome.failure[0].value}: {outcome.failure[1]}"), compile_seconds=seconds, max_abs_error=worst)
        if compared.timing is None:
            return Baseline(name, False, "compiled and matched, but no timing arrived", compile_seconds=seconds, max_abs_error=worst)
        return Baseline(name, True, "ok", timing=compared.timing, compile_seconds=seconds, max_abs_error=worst, paired=compared.paired)

    def _run_compared(self, role: P.Role, source: Path, plan: Plan, log_name: str, compile_mode: Optional[str] = None, class_name: Optional[str] = None, compared_name: str = "the candidate") -> "Compared":
        """Run a worker against the judge: each step it reports is judged before it may go on (a
        wrong output stops it); then it is timed in turns with the reference (harness.pairing)."""
        from harness import quiet

        judge = self._judge
        assert judge is not None
        session: P.Session = judge.request(P.Open(role), self.cfg.timeouts.construct)
        calls: list[CheckResult] = []
        found: dict[str, Any] = {}
        precision: dict[str, float] = {}
        unsafe: list[str] = []  # writes past an input's end, as the judge found them (the first is kept)
        pairing = Pairing(judge, session.session, self.cfg.timing, self.cfg.timeouts.time, compared_name, quiet.current(), self._timing_mode) if self.cfg.timing.enabled else None

        def on_step(step: P.Step) -> Optional[Failure | Reply]:
            verdict: P.Verdict = judge.request(P.Check(session.session, step), self.cfg.timeouts.check)
            if verdict.failure is not None:
                return Status(verdict.failure[0]), verdict.failure[1]
            if verdict.unsafe and not unsafe:
                unsafe.append(verdict.unsafe)
            if step.step == "call":
                calls.append(verdict.check)
                precision.update(verdict.precision)
            elif step.step == "grads":
                found["grads"] = verdict.gradients
            else:
                found[step.step] = verdict.check
            if step.step == "same_seed" and step.own_weights:
                found["own_weights"] = True
            if verdict.check is not None and not verdict.check.passed and step.step != "same_seed":
                return Status.INCORRECT, f"{verdict.check.name}: {verdict.check.reason}"
            return Reply({"staged": to_dict(verdict.staged)})

        def on_timing(message: P.Ready | P.RoundTimed) -> Optional[Failure | Reply]:
            if pairing is None:
                return Status.FORGED_RESULT, "the worker sent a timing message in a run that times nothing"
            try:
                if isinstance(message, P.Ready):
                    assert pairing.ready is None
                    return Reply(pairing.on_ready(message))
                return Reply(pairing.on_round(message))
            except JudgeFailed:
                raise
            except Exception as exc:
                return Status.FORGED_RESULT, f"the worker's timing messages are not the harness's ({type(exc).__name__}: {exc})"[:300]

        def on_message(message: Any) -> Optional[Failure | Reply]:
            if isinstance(message, P.Step):
                return on_step(message)
            if isinstance(message, (P.Ready, P.RoundTimed)):
                return on_timing(message)
            return None

        job = self._job(role, source, plan, session, compile_mode=compile_mode, class_name=class_name)
        cwd = current_scratch().make(f"{log_name[:20]}-")
        try:
            outcome = self._worker(job, log_name, cwd, on_message)
        finally:
            if pairing is not None:
                pairing.close()
            shutil.rmtree(cwd, ignore_errors=True)
            if judge.alive:
                judge.request(P.Close(session.session), self.cfg.timeouts.check)
        checks: list[CheckResult] = list(calls)
        planned = len(self._calls(role, plan))
        if outcome.failure is None and len(calls) != planned:
            outcome = dataclasses.replace(outcome, failure=(Status.HARNESS_ERROR, f"{len(calls)} of {planned} checks arrived"))
        else:
            checks.extend(c for c in (found.get("buffers"), found.get("timed")) if c is not None)
        timed = pairing.result() if pairing is not None and outcome.failure is None else None
        if outcome.failure is None and pairing is not None and timed is None:
            outcome = dataclasses.replace(outcome, failure=(Status.HARNESS_ERROR, "the worker finished before every timing round arrived"))
        ready = pairing.ready if pairing is not None else None
        return Compared(
            outcome, checks, found.get("same_seed"), precision, found.get("grads"), own_weights=bool(found.get("own_weights")),
            timing=timed[0] if timed else None,
            paired=timed[1] if timed else None,
            profile=ready.profile if ready is not None else None,
            profile_error=ready.profile_error if ready is not None else "",
            unsafe=unsafe[0] if unsafe else next((m.reason[:300] for m in outcome.every(P.Unsafe)), ""),
        )

    def _run_candidate(self, candidate: Candidate, plan: Plan, reference: "ReferenceResult") -> CandidateRecord:
        compared = self._run_compared(P.Role.CANDIDATE, candidate.path, plan, candidate.name)
        outcome, checks, same_seed, gradients = compared.outcome, compared.checks, compared.same_seed, compared.gradients
        builds = tuple(m.build for m in outcome.every(P.Built))
        timing = compared.timing
        case = Case(compared, plan.calls, plan.randomize_weights, reference.record, Rules.of(self.cfg), self.device, self._reported(candidate, outcome), self._restart_note)
        self._restart_note = ""
        first = verdict.decide(case)
        sanitized: tuple[SanitizerRun, ...] = ()
        unsafe: list[Finding] = []
        if first.status is Status.CORRECT and self._wants_sanitizer():
            sanitized, unsafe = self._sanitize(candidate, plan, reference.record)
        decided = verdict.settle(case, first, unsafe, lambda timed, paired: compare_times(timed, paired, compared.profile, reference.record, self.cfg))
        status, mapping = decided.status, case.reported.mapping
        return self._record(
            candidate,
            status,
            decided.reason,
            checks=tuple(checks),
            same_seed=same_seed,
            timing=timing if status is Status.CORRECT else None,
            builds=builds,
            profile=compared.profile,
            flags=decided.flags,
            sanitizer=sanitized,
            weight_mapping=mapping,
            weights="seed" if compared.own_weights else "position" if mapping else "name",
            stricter=decided.stricter,
            **decided.evidence,
            gradients=gradients[0] if gradients is not None else "",
            phase_seconds=outcome.done.phase_seconds if outcome.done is not None else {},
            wall_seconds=round(outcome.wall_seconds, 3),
            warnings=decided.warnings,
            **decided.measures,
        )

    def _reported(self, candidate: Candidate, outcome: WorkerOutcome) -> Reported:
        """What the candidate's worker reported beyond its checks (its messages), and what its
        source declares (a scan of its file), for harness.verdict."""
        mapping = tuple(pair for m in outcome.every(P.WeightsMapped) for pair in m.pairs)
        by_seed = outcome.first(P.WeightsBySeed)
        why = by_seed.reason if by_seed is not None else ""
        return Reported(mapping, outcome.first(P.ExtensionCalls), outcome.first(P.Threads), why, tuple(scan_source(candidate.path)), frozenset(declared_kernels(candidate.path)))

    def _wants_sanitizer(self) -> bool:
        setting = self.cfg.sanitizer.enabled
        return setting == "on" or (setting == "auto" and self.device == "cuda")

    def _sanitize(self, candidate: Candidate, plan: Plan, reference: ReferenceRecord) -> tuple[tuple[SanitizerRun, ...], list[Finding]]:
        """One eval forward of the candidate under each compute-sanitizer tool, at the other-size
        trial's sizes (harness.sanitize)."""
        cfg = self.cfg.sanitizer
        if self.device != "cuda":
            return tuple(SanitizerRun(t, "skipped", "compute-sanitizer checks CUDA runs only") for t in cfg.tools), []
        job = {
            "source": str(candidate.path.resolve()),
            "problem": str(self.problem.path.resolve()),
            "class_name": "ModelNew",
            "sizes": dict(reference.other_size),
            "seed": plan.construct_seed,
            "build_cache": str(self.cfg.path(self.cfg.build_cache_dir)),
        }
        key = (candidate.hash, json.dumps(job["sizes"], sort_keys=True), job["seed"], tuple(cfg.tools))
        if key in self._sanitized:  # the same source, on the same inputs: the tools would say the same
            runs, found = self._sanitized[key]
            return tuple(dataclasses.replace(r, detail=f"{r.detail} (the same source's run earlier on this lane)", seconds=0.0) for r in runs), found
        cwd = current_scratch().make(f"sanitize-{candidate.name[:20]}-")
        try:
            result = sanitize(find_tool(cfg.path), cfg.tools, cfg.timeout, job, self.lane.launcher.env, cwd)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
        if all(r.outcome in ("clean", "errors") for r in result[0]):  # a timeout or a failed run is tried again
            self._sanitized[key] = result
        return result

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
            lane=self.lane.label,
            **fields,
        )

    def stop(self) -> None:
        """From another thread (a stopped run): end this lane's judge and workers now. Whatever
        they were doing writes no record: the candidate in flight raises Stopped instead."""
        self._stopped = True
        if self._judge is not None:
            self._judge.kill()
        self.lane.launcher.kill_all()

    def _finish(self, record: CandidateRecord) -> CandidateRecord:
        if self._stopped:
            raise Stopped(f"{record.candidate}: the run was stopped during its evaluation")
        self.store.append(record)
        self.on_record(record)
        return record


class Stopped(Exception):
    """A stopped run's evaluation ended without a record (ProblemEvaluation.stop)."""


@dataclasses.dataclass
class ReferenceResult:
    record: ReferenceRecord  # what the judge's run of the reference came to (and the baselines)

    @property
    def ok(self) -> bool:
        return self.record.ok

    @property
    def timing(self) -> Optional[TimingStats]:
        return self.record.timing


CLOCK_TOLERANCE = 0.05  # SM clocks further apart than this between two timings are reported


def compare_times(timing: TimingStats, paired: PairedSpeedup, profile: Optional[CallProfile], reference: ReferenceRecord, cfg: Config) -> tuple[dict[str, Any], list[str], list[Finding]]:
    """Speedups over the eager reference (from the paired rounds) and over each baseline (the
    candidate's paired speedup over the baseline's, when both were timed under the same protocol),
    % of speed-of-light, the warnings a reader needs to trust (or distrust) those numbers, and the
    implausible-time findings."""
    median = timing.median_ms
    reference_ms = paired.reference.median_ms
    measures: dict[str, Any] = {"speedup": paired.speedup, "paired": paired, "reference_ms": reference_ms}
    warnings = timing_warnings(timing, cfg.timing, profile)
    usable = [b for b in reference.baselines if b.ok and b.timing is not None and b.paired is not None]
    measures["baseline_ms"] = {b.name: b.timing.median_ms for b in usable}
    measures["speedups"] = {b.name: paired.speedup / b.paired.speedup for b in usable if b.paired.protocol == paired.protocol}
    for b in usable:
        if b.paired.protocol != paired.protocol:
            warnings.append(f"no speedup over {b.name}: it was timed with {b.paired.protocol}, this candidate needs {paired.protocol}")
    if paired.reference.median_ms > 0 and paired.reference.median_ms < LAUNCH_BOUND_MS and timing.mode == "eager" and reference.profile is not None and reference.profile.kernel_ms < 0.8 * paired.reference.median_ms:
        warnings.append(
            f"the reference is launch-bound (GPU work {reference.profile.kernel_ms:.4g} ms of a {paired.reference.median_ms:.4g} ms call): "
            "this speedup measures host launch overhead as much as GPU work; timing.mode=graph times both sides without it"
        )
    sol = reference.speed_of_light
    if sol is not None and sol.floor_ms > 0:
        measures.update(sol_measures(sol, median))
    if timing.sm_clock_mhz and paired.reference.sm_clock_mhz:
        ratio = timing.sm_clock_mhz / paired.reference.sm_clock_mhz
        if abs(ratio - 1) > CLOCK_TOLERANCE:
            warnings.append(
                f"SM clock {timing.sm_clock_mhz:.0f} MHz after this timing vs {paired.reference.sm_clock_mhz:.0f} MHz after the reference's: "
                "the GPU changed speed during the rounds; the paired rounds cancel most of it, but repeat the run to see the spread"
            )
    found = integrity.implausible_time(timing, paired.speedup, reference_ms, profile, sol, cfg.check.max_plausible_speedup, cfg.speed_of_light.impossible_below)
    return measures, warnings, found + integrity.persisting_l2(timing)


SLOWDOWN_BITS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown", 0x80: "power brake"}


def sol_measures(sol: Any, median: float) -> dict[str, Any]:
    """The speed-of-light fields of a candidate timed at `median` ms: against the reference
    algorithm's roofline, or, when it runs below that, against the bytes floor alone, with a note
    (its algorithm needs fewer FLOPs than the reference's: information, not a warning)."""
    if median <= 0 or median >= sol.floor_ms or sol.bytes_ms <= 0:
        return {"sol_ms": sol.floor_ms, "sol_fraction": sol.floor_ms / median if median > 0 else None, "sol_floor": "roofline"}
    note = (f"faster than the reference's algorithm: {median:.4g} ms is below its roofline {sol.floor_ms:.4g} ms "
            f"({sol.flops:.3g} FLOP at {sol.peak_tflops:.3g} TFLOP/s); against the fewest bytes ({sol.min_bytes:.3g} B at "
            f"{sol.peak_gbps:.4g} GB/s, {sol.bytes_ms:.4g} ms) it is at {sol.bytes_ms / median:.0%} of the speed of light")
    return {"sol_ms": sol.bytes_ms, "sol_fraction": sol.bytes_ms / median, "sol_floor": "bytes", "notes": (note,)}


def slowdown_reasons(reasons: str) -> list[str]:
    """Names of the clock-event reasons (nvidia-smi clocks_event_reasons.active) that slow the GPU."""
    try:
        bits = int(reasons, 16)
    except ValueError:
        return []
    return [name for bit, name in SLOWDOWN_BITS.items() if bits & bit]


def timing_warnings(timing: TimingStats, cfg: Any, profile: Optional[CallProfile] = None) -> list[str]:
    """What a reader must know about one timing, each with what to do about it."""
    warnings = []
    if timing.rse > cfg.target_rse:
        warnings.append(
            f"timing did not settle: relative standard error {timing.rse:.1%} after {timing.n} calls "
            f"(stopped by {timing.stopped_by}); raise timing.budget_s or quiet the machine"
        )
    if timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > cfg.unstable_iqr:
        warnings.append(
            f"unstable timing: the interquartile range is {timing.iqr_ms / timing.median_ms:.0%} of the median; "
            "stop other work on this GPU, check the clocks, or use timing.mode=graph if the call is launch-bound"
        )
    slowed = slowdown_reasons(timing.clock_event_reasons)
    if slowed:
        warnings.append(
            f"the GPU was slowing its clocks when timing ended ({', '.join(slowed)}): timings vary with power and temperature; "
            "compare only runs taken under the same conditions, and repeat to see the spread"
        )
    if timing.fallback:
        warnings.append(timing.fallback)
    if timing.sync_reason:
        warnings.append(f"timed with a device-wide synchronise because {timing.sync_reason}")
    if profile is not None and timing.mode == "eager" and timing.median_ms > 0 and profile.kernel_ms < 0.8 * timing.median_ms and timing.median_ms < LAUNCH_BOUND_MS:
        warnings.append(
            f"launch-bound: GPU work is {profile.kernel_ms:.4g} ms of a {timing.median_ms:.4g} ms call; "
            "the rest is host overhead between launches; timing.mode=graph times it without the launch gaps"
        )
    return warnings


class TimingCache:
    """The torch.compile baselines (each timed in turns with the eager reference) and the
    speed-of-light, per (problem hash, device, torch version, timing config), reused across runs
    when timing.reuse_reference is set."""

    def __init__(self, cfg: Config, problem_hash: str, device: str, gpu: str = "") -> None:
        from harness.environment import device_identity

        timing = dataclasses.asdict(cfg.timing)
        for key in ("reuse_reference", "unstable_iqr", "null_candidate", "quiet", "null_tolerance"):
            timing.pop(key)
        key = {
            "problem": problem_hash,
            "device": device_identity(device, cfg.timing.cpu_threads, gpu),
            "torch": torch.__version__,
            "timing": timing,
            "allow_tf32": cfg.check.allow_tf32,
            "compile_modes": list(cfg.baselines.compile_modes),
            "speed_of_light": cfg.speed_of_light.enabled,
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        self.path = cfg.path(cfg.measurement_cache_dir) / "reference-timing" / f"{digest}.json"

    def load(self) -> Optional[ReferenceRecord]:
        try:
            return from_dict(ReferenceRecord, json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def save(self, record: ReferenceRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(to_dict(record)))
        tmp.replace(self.path)



def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:400] if line else "no reason given"
