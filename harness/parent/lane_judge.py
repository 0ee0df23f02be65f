"""The parent's side of a lane's judge for one problem: its lifetime (`LaneJudge`: started with the
plan, restarted after a failure, ended with the evaluation), one compared worker's pass against
it (`ComparedPass`: each step the worker reports is judged before the worker may go on, then the
worker is timed in turns with the reference), and the reference's pass through it (`ReferencePass`:
the judge started through the plan, then, when timing, the torch.compile baselines or their cached
timings, the null candidate and the reference's own timing; a compile baseline's failure never fails
it). Only typed messages pass here, never tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

from harness.core import protocol as P
from harness.core.config import Config, Device, GradientPolicy, Switch, TimerSettings, TimingMode
from harness.core.errors import flat
from harness.core.pairing import Pairing, ProblemTiming, resolve_mode
from harness.core.plan import Plan
from harness.core.protocol import Failure, WorkerOutcome
from harness.core.records import (
    Baseline,
    CallProfile,
    CheckResult,
    Identity,
    NullFloor,
    ReferenceRecord,
    finished_now,
    to_dict,
)
from harness.core.status import Status
from harness.core.store import RunStore
from harness.parent.quiet import LaneQuiet, QuietHost
from harness.parent.reference_cache import ProfileCache, TimingCache
from harness.parent.scratch import RunScratch
from harness.parent.supervise import JudgeClient, JudgeFailed, Lane, Reply, run_worker
from harness.parent.verdict import Compared
from harness.sources.problem import Problem


@dataclasses.dataclass(frozen=True)
class Setting:
    """Where one problem is evaluated: what every run against its judge shares."""

    problem: Problem
    cfg: Config  # the problem's config (its declarations applied)
    device: str  # cuda | cpu
    store: RunStore  # where records and logs go
    lane: Lane  # the GPU (or the CPU) and its worker launcher
    memory_limit: int  # bytes of host memory a worker may hold
    problem_hash: str  # the problem file's hash, read once when the evaluation began
    scratch: RunScratch  # the run's scratch: the judge's and each worker's working folder go there
    quiet: QuietHost  # the run's quiet host: timed rounds hold it

    def gpu_alone(self) -> Any:
        """A hold of the lane's GPU for work whose times are measured (a reference's start: its
        profile and speed of light; a worker's warm-up, profile and rounds): background work and
        the other lanes on this GPU are stopped meanwhile (harness.parent.quiet). Nothing on the CPU."""
        if self.device != Device.CUDA or not self.cfg.timing.enabled or not self.quiet.sharing:
            # one lane on its GPU: the timed rounds hold the host themselves (core.pairing)
            return contextlib.nullcontext()
        return self.quiet.hold(self.lane.index)

    def identity(self, candidate: str, path: str, source_hash: str) -> Identity:
        """What a candidate's record of this problem on this lane was judged as."""
        return Identity(
            self.store.run_id,
            self.problem.name,
            self.problem_hash,
            candidate,
            path,
            source_hash,
            self.device,
            self.lane.label,
        )

    def record_fields(self) -> dict[str, Any]:
        """The fields a reference record of this problem on this lane starts with, finished now."""
        return {
            "run_id": self.store.run_id,
            "problem": self.problem.name,
            "problem_hash": self.problem_hash,
            "device": self.device,
            "lane": self.lane.label,
            "finished_at": finished_now(),
        }


class LaneJudge:
    """The lane's judge for one problem (harness.judge.service, through supervise.JudgeClient)."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.client: Optional[JudgeClient] = None  # the running judge, None between judges
        self._dir: Optional[Path] = None  # its working folder in the run's scratch
        self.failures: list[str] = []  # why earlier judges of this lane ended (each restart is reported)
        self.restart_note = ""  # a warning for the next record: its judge is a restarted one
        self.profile: Optional[CallProfile] = None  # the reference's profiled call, once a judge has it

    def job(self, plan: Plan, measure: bool, profile: Optional[CallProfile] = None) -> P.JudgeJob:
        """The judge's job; with `measure`, it also measures the problem's speed-of-light at start;
        with `profile` (the reference cache's), it does not profile the reference again."""
        cfg = self.setting.cfg
        return P.JudgeJob(
            source=str(self.setting.problem.path.resolve()),
            source_text=self.setting.problem.text,
            device=self.setting.device,
            build_cache=str(cfg.path(cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            input_seeds=plan.input_seeds,
            distributions=plan.distributions,
            calls=plan.calls,
            other_size_trial=plan.other_size_trial,
            randomize_weights=plan.randomize_weights,
            precision_call=plan.precision_call,
            timed_inputs=plan.timed_inputs,
            gradients=cfg.check.gradients != GradientPolicy.OFF,
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            allow_tf32=cfg.check.allow_tf32,
            cpu_threads=cfg.timing.cpu_threads,
            tolerances={k: dataclasses.asdict(v) for k, v in cfg.check.tolerances.items()},
            gradient_tolerance_factor=cfg.check.gradient_tolerance_factor,
            timing=TimerSettings.from_config(cfg.timing) if cfg.timing.enabled else None,
            speed_of_light_cache=str(cfg.path(cfg.measurement_cache_dir))
            if measure and cfg.timing.enabled and cfg.speed_of_light.enabled
            else "",
            guard_bands=cfg.check.guard_bands,
            profile=profile,
        )

    def start(self, plan: Plan, measure: bool, profile: Optional[CallProfile] = None) -> P.ReferenceReport:
        """A new judge for this lane, run once through the plan."""
        setting = self.setting
        self.end()
        log = setting.store.log_path(setting.problem.name, "_reference")
        self.client, self._dir = setting.lane.launcher.take_judge(log, setting.scratch.make)
        try:
            with setting.gpu_alone():
                report = self.client.request(
                    P.Start(self.job(plan, measure, profile)), setting.cfg.timeouts.load, setting.cfg.timeouts
                )
        except JudgeFailed as exc:
            self.end()
            return P.ReferenceReport(False, f"{Status.CRASHED.value}: {exc}")
        if not report.ok:
            self.end()
        elif report.profile is not None:
            self.profile = report.profile  # a restarted judge is handed it
        return report

    def restart(self, plan: Plan) -> P.ReferenceReport:
        """After a judge failed, the next candidate gets a new one (its speed-of-light and profile
        are not measured again: the record keeps the first judge's)."""
        report = self.start(plan, measure=False, profile=self.profile)
        self.restart_note = (
            "the lane's judge was restarted before this candidate (the one before: "
            f"{self.failures[-1] if self.failures else 'ended'})"
        )
        return report

    def failed(self, why: str) -> None:
        """The judge failed (or ended): note why, and end it; the next candidate gets a new one."""
        self.failures.append(why)
        self.end()

    def ended(self) -> bool:
        """Whether the judge has ended on its own since it started (then it is noted and ended)."""
        if self.client is not None and not self.client.running():
            self.failed(f"it ended ({self.client.describe_exit()})")
        return self.client is None

    def take_restart_note(self) -> str:
        note, self.restart_note = self.restart_note, ""
        return note

    def compare(self, plan: Plan, timing_mode: ProblemTiming, subject: "Subject") -> Compared:
        """Run one compared worker against this judge (`ComparedPass`), timed under `timing_mode`."""
        assert self.client is not None
        return ComparedPass(self.setting, self.client, plan, timing_mode, subject).run()

    def end(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill(self) -> None:
        if self.client is not None:
            self.client.kill()


@dataclasses.dataclass(frozen=True)
class Subject:
    """What one compared worker runs: a candidate's ModelNew, the null candidate, or a compile baseline."""

    role: P.Role
    source: Path  # the module file
    log_name: str  # its log's name under the problem's logs
    compile_mode: Optional[str] = None  # a compile baseline: torch.compile's mode
    class_name: Optional[str] = None  # None: ModelNew for a candidate, Model for a baseline
    name: str = "the candidate"  # how timing messages name it
    text: str = ""  # its pinned source (the problem's, for the null candidate and a baseline); "" = read `source`


class ComparedPass:
    """One compared worker's pass against the lane's judge: each step it reports is judged before it
    may go on (a wrong output stops it); then it is timed in turns with the reference
    (harness.core.pairing). `run()` returns what it came to."""

    def __init__(
        self, setting: Setting, judge: JudgeClient, plan: Plan, timing_mode: ProblemTiming, subject: Subject
    ) -> None:
        self.setting, self.judge, self.plan, self.subject = setting, judge, plan, subject
        self.timing_mode = timing_mode
        self.calls: list[CheckResult] = []
        self.found: dict[str, Any] = {}  # the other steps' verdicts, by step
        self.precision: dict[str, float] = {}
        self.unsafe: list[str] = []  # writes past an input's end, as the judge found them (the first is kept)
        self.seen: list[P.StepKind] = []  # the steps the worker reported, in the order protocol.STEPS declares
        self.pairing: Optional[Pairing] = None
        # the GPU held from the go-ahead into timing to the last timed call's check
        self._alone = contextlib.ExitStack()

    def run(self) -> Compared:
        cfg, subject = self.setting.cfg, self.subject
        self.session: P.SessionHandle = self.judge.request(P.Open(subject.role), cfg.timeouts.construct)
        if cfg.timing.enabled:
            self.pairing = Pairing(
                self.judge,
                self.session.session,
                cfg.timing,
                cfg.timeouts.time,
                subject.name,
                LaneQuiet(self.setting.quiet, self.setting.lane.index),
                self.timing_mode,
            )
        cwd = self.setting.scratch.make(f"{subject.log_name[:20]}-")
        try:
            outcome = run_worker(
                self.job(),
                timeouts=cfg.timeouts,
                memory_limit=self.setting.memory_limit,
                log_path=self.setting.store.log_path(self.setting.problem.name, subject.log_name),
                log_limit=cfg.limits.log_kib << 10,
                cwd=cwd,
                on_message=self.on_message,
                launcher=self.setting.lane.launcher,
            )
        finally:
            if self.pairing is not None:
                self.pairing.close()
            self._alone.close()
            shutil.rmtree(cwd, ignore_errors=True)
            if self.judge.alive:
                self.judge.request(P.Close(self.session.session), cfg.timeouts.check)
        return self.result(outcome)

    def job(self) -> P.WorkerJob:
        cfg, plan, subject = self.setting.cfg, self.plan, self.subject
        return P.WorkerJob(
            role=subject.role,
            source=str(subject.source.resolve()),
            source_text=subject.text,
            problem_text=self.setting.problem.text
            if cfg.check.problem_globals and subject.role is P.Role.CANDIDATE and not subject.text
            else "",
            class_name=subject.class_name or ("ModelNew" if subject.role is P.Role.CANDIDATE else "Model"),
            compile_mode=subject.compile_mode,
            device=self.setting.device,
            build_cache=str(cfg.path(cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            calls=P.role_calls(subject.role, plan.calls),
            timing=TimerSettings.from_config(cfg.timing, self.timing_mode.mode) if cfg.timing.enabled else None,
            allow_tf32=cfg.check.allow_tf32,
            gradients=cfg.check.gradients != GradientPolicy.OFF,
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            cpu_threads=cfg.timing.cpu_threads,
            guard_bands=cfg.check.guard_bands,
            weights=cfg.check.weights,
            session=self.session,
        )

    def on_message(self, message: Any) -> Optional[Failure | Reply]:
        if isinstance(message, P.Step):
            return self.on_step(message)
        if isinstance(message, (P.Ready, P.RoundTimed)):
            return self.on_timing(message)
        return None

    def on_step(self, step: P.Step) -> Optional[Failure | Reply]:
        """The judge's verdict on a step the worker reported in its role's declared order; a step
        out of that order is refused before the judge sees it."""
        role = self.subject.role
        order = P.out_of_order(
            role,
            self.seen,
            step,
            len(P.role_calls(role, self.plan.calls)),
            self.setting.cfg.check.gradients != GradientPolicy.OFF,
        )
        if order:
            return Failure(Status.FORGED_RESULT, order)
        self.seen.append(step.step)
        verdict: P.StepAnswer = self.judge.request(P.Check(self.session.session, step), self.setting.cfg.timeouts.check)
        if verdict.failure is not None:
            return verdict.failure
        if verdict.unsafe and not self.unsafe:
            self.unsafe.append(verdict.unsafe)
        if step.step == P.StepKind.CALL:
            # the judge answers a call step with a check, or with the failure handled above
            assert verdict.check is not None
            self.calls.append(verdict.check)
            self.precision.update(verdict.precision)
        elif step.step == P.StepKind.GRADS:
            self.found[P.StepKind.GRADS] = verdict.gradients
        else:
            self.found[step.step] = verdict.check
        if step.step == P.StepKind.SAME_SEED and step.own_weights:
            self.found["own_weights"] = True
        if verdict.check is not None and not verdict.check.passed and step.step != P.StepKind.SAME_SEED:
            return Failure(Status.INCORRECT, f"{verdict.check.name}: {verdict.check.reason}")
        if step.step == P.StepKind.TIMED:
            self._alone.close()
        elif step.want.kind == P.WantKind.TIMING and self.pairing is not None:
            self._alone.enter_context(self.setting.gpu_alone())  # its warm-up, profile and rounds run on a quiet GPU
        return Reply({"staged": to_dict(verdict.staged)})

    def on_timing(self, message: P.Ready | P.RoundTimed) -> Optional[Failure | Reply]:
        pairing = self.pairing
        if pairing is None:
            return Failure(Status.FORGED_RESULT, "the worker sent a timing message in a run that times nothing")
        try:
            if isinstance(message, P.Ready):
                assert pairing.ready is None
                return Reply(pairing.on_ready(message))
            return Reply(pairing.on_round(message))
        except JudgeFailed:
            raise
        except Exception as exc:
            return Failure(
                Status.FORGED_RESULT,
                f"the worker's timing messages are not the harness's ({type(exc).__name__}: {exc})"[:300],
            )

    def result(self, outcome: WorkerOutcome) -> Compared:
        """What the run came to: a worker that finished without every check or timing round it
        owed is a harness error."""
        checks: list[CheckResult] = list(self.calls)
        planned = len(P.role_calls(self.subject.role, self.plan.calls))
        if outcome.failure is None and len(self.calls) != planned:
            outcome = dataclasses.replace(
                outcome, failure=Failure(Status.HARNESS_ERROR, f"{len(self.calls)} of {planned} checks arrived")
            )
        else:
            checks.extend(
                c for c in (self.found.get(P.StepKind.BUFFERS), self.found.get(P.StepKind.TIMED)) if c is not None
            )
        pairing = self.pairing
        timed = pairing.result() if pairing is not None and outcome.failure is None else None
        if outcome.failure is None and pairing is not None and timed is None:
            outcome = dataclasses.replace(
                outcome, failure=Failure(Status.HARNESS_ERROR, "the worker finished before every timing round arrived")
            )
        ready = pairing.ready if pairing is not None else None
        return Compared(
            outcome,
            checks,
            self.found.get(P.StepKind.SAME_SEED),
            self.precision,
            self.found.get(P.StepKind.GRADS),
            own_weights=bool(self.found.get("own_weights")),
            timing=timed[0] if timed else None,
            paired=timed[1] if timed else None,
            profile=ready.profile if ready is not None else None,
            profile_error=ready.profile_error if ready is not None else "",
            unsafe=self.unsafe[0] if self.unsafe else next((m.reason[:300] for m in outcome.every(P.Unsafe)), ""),
        )


# -- the reference's pass ----------------------------------------------------------------------------------


class Stopped(Exception):
    """A stopped run's evaluation ended without a record (ProblemEvaluation.stop)."""


class ReferencePass:
    """Runs the reference once for a lane (`run`), and with it fixes the problem's timing mode."""

    def __init__(self, setting: Setting, judge: LaneJudge, stopped: Callable[[], bool]) -> None:
        self.setting, self.judge, self.stopped = setting, judge, stopped
        cfg = setting.cfg
        # resolved once the reference is profiled
        self.timing_mode = ProblemTiming(cfg.timing.mode if cfg.timing.mode != TimingMode.AUTO else TimingMode.EAGER)

    def run(self, plan: Plan) -> ReferenceRecord:
        """The reference's record, written to the store (a stopped run raises Stopped instead)."""
        setting, cfg = self.setting, self.setting.cfg
        cache = (
            TimingCache(cfg, setting.problem_hash, setting.device, setting.lane.gpu)
            if cfg.timing.reuse_reference and cfg.timing.enabled
            else None
        )
        cached = cache.load() if cache is not None else None
        learned = (
            ProfileCache(cfg, setting.problem_hash, setting.lane.gpu)
            if cfg.timing.reuse_profile and cfg.timing.enabled and setting.device == Device.CUDA
            else None
        )
        known = learned.load() if learned is not None else None
        known_sol = (cached.speed_of_light if cached is not None else None) or (
            known.speed_of_light if known is not None else None
        )
        started = datetime.datetime.now()
        clock = PhaseClock()
        report = self.judge.start(plan, measure=known_sol is None, profile=known.profile if known is not None else None)
        clock.lap("judge", inner=report.phase_seconds)
        # One timing mode for the problem (timing.mode auto: graph when the reference is launch-bound)
        sol = known_sol or report.speed_of_light
        self.timing_mode = ProblemTiming(
            *resolve_mode(cfg.timing.mode, report.profile),
            floor_ms=sol.bytes_ms * cfg.speed_of_light.impossible_below if sol is not None else 0.0,
        )
        record = self.record(report, round((datetime.datetime.now() - started).total_seconds(), 3))
        if record.ok and known is not None:
            record = dataclasses.replace(
                record, speed_of_light=record.speed_of_light or known.speed_of_light, profile_reused_from=known.run_id
            )
        elif record.ok and learned is not None and record.profile is not None:
            learned.save(record)
        if cfg.timing.enabled and setting.device == Device.CUDA:
            record = dataclasses.replace(
                record, timing_mode=self.timing_mode.mode, timing_mode_reason=self.timing_mode.reason
            )
        if record.ok and cached is not None:
            # Reused: the torch.compile baselines' paired timings and the speed-of-light (the eager
            # reference itself is timed with every candidate, so nothing of its own is reused).
            record = dataclasses.replace(
                record,
                baselines=cached.baselines,
                speed_of_light=cached.speed_of_light or record.speed_of_light,
                timing_reused_from=cached.timing_reused_from or cached.run_id,
            )
        elif record.ok and cfg.timing.enabled:
            baselines = tuple(self.baseline(mode, plan) for mode in cfg.baselines.compile_modes)
            clock.lap("baselines")
            record = dataclasses.replace(record, baselines=baselines)
            if cache is not None and all(b.ok for b in baselines):
                cache.save(record)
        if record.ok and cfg.timing.enabled and self.wants_null():
            record = dataclasses.replace(record, null_floor=self.null(plan))
            clock.lap("null candidate")
        if record.ok and cfg.timing.enabled:
            # The reference's own timing, for the record: its rounds paired with the null candidate,
            # else with the first baseline (each candidate's speedup uses the rounds paired with it).
            sides = [record.null_floor.paired if record.null_floor else None] + (
                [b.paired for b in record.baselines] if not record.timing_reused_from else []
            )
            record = dataclasses.replace(record, timing=next((p.reference for p in sides if p is not None), None))
        if self.stopped():
            raise Stopped(f"{setting.problem.name}: the run was stopped during its reference")
        record = dataclasses.replace(record, phase_seconds=clock.seconds)
        setting.store.append(record)
        return record

    def record(self, report: P.ReferenceReport, wall_seconds: float) -> ReferenceRecord:
        """The record of the reference's pass through the judge (before baselines and the null candidate)."""
        setting = self.setting
        problem = setting.problem
        notes = (
            report.float64_note,
            f"profiling the reference failed: {report.profile_error}" if report.profile_error else "",
            f"speed-of-light not measured: {report.speed_of_light_error}" if report.speed_of_light_error else "",
            f"its ATen operators were not observed: {report.forward_ops.error}"
            if report.forward_ops is not None and report.forward_ops.error
            else "",
        )
        return ReferenceRecord(
            **setting.record_fields(),
            problem_path=str(problem.path),
            device_name=report.device_name,
            ok=report.ok,
            reason=report.reason,
            speed_of_light=report.speed_of_light,
            profile=report.profile,
            forward_ops=report.forward_ops,
            other_size=report.other_size,
            other_size_note=report.other_size_note,
            wall_seconds=wall_seconds,
            declared=dict(problem.settings),
            data_plane=report.data_plane,
            peak_bytes=report.peak_bytes,
            notes=tuple(n for n in notes if n) + report.input_structure + report.degenerate,
        )

    def wants_null(self) -> bool:
        setting = self.setting.cfg.timing.null_candidate
        return setting == Switch.ON or (setting == Switch.AUTO and self.setting.device == Device.CUDA)

    def null(self, plan: Plan) -> NullFloor:
        """The null candidate: the problem's own Model through the candidate path (every check, then
        timed in turns with the reference). Identical code: its speedup is this run's 1.00x."""
        try:
            compared = self.judge.compare(
                plan,
                self.timing_mode,
                Subject(
                    P.Role.CANDIDATE,
                    self.setting.problem.path,
                    "_null",
                    class_name="Model",
                    name="the null candidate",
                    text=self.setting.problem.text,
                ),
            )
        except JudgeFailed as exc:
            self.judge.failed(str(exc))
            return NullFloor(Status.HARNESS_ERROR.value, flat(f"the lane's judge failed: {exc}"))
        if compared.outcome.failure is not None:
            failure = compared.outcome.failure
            return NullFloor(failure.status.value, flat(failure.reason))
        worst = max((c.max_abs_error or 0.0 for c in compared.checks), default=0.0)
        return NullFloor(
            Status.CORRECT.value, f"matched {len(plan.calls)} calls; max abs error {worst:.2g}", compared.paired
        )

    def baseline(self, mode: str, plan: Plan) -> Baseline:
        """torch.compile of the reference, in its own worker: checked by the judge like a
        candidate, then timed in turns with the eager reference. Its failure never fails the reference."""
        name = f"torch.compile({mode})"
        try:
            compared = self.judge.compare(
                plan,
                self.timing_mode,
                Subject(
                    P.Role.BASELINE,
                    self.setting.problem.path,
                    f"_compile-{mode}",
                    compile_mode=mode,
                    name=name,
                    text=self.setting.problem.text,
                ),
            )
        except JudgeFailed as exc:
            self.judge.failed(str(exc))
            return Baseline(name, False, flat(f"the lane's judge failed: {exc}"))
        outcome, checks = compared.outcome, compared.checks
        compiled = outcome.first(P.Compiled)
        seconds = compiled.seconds if compiled is not None else None
        worst = max((c.max_abs_error or 0.0 for c in checks), default=None)
        if outcome.failure is not None:
            return Baseline(
                name,
                False,
                flat(f"{outcome.failure.status.value}: {outcome.failure.reason}"),
                compile_seconds=seconds,
                max_abs_error=worst,
            )
        if compared.timing is None:
            return Baseline(
                name, False, "compiled and matched, but no timing arrived", compile_seconds=seconds, max_abs_error=worst
            )
        return Baseline(
            name,
            True,
            "ok",
            timing=compared.timing,
            compile_seconds=seconds,
            max_abs_error=worst,
            paired=compared.paired,
        )


class PhaseClock:
    """Where a reference pass's wall time goes, lap by lap: `seconds` maps each lap's name to its
    seconds; a lap with `inner` phases (the judge's own: load, construct, check, time) is split
    into them, and what they leave over (process start, imports, messages) is "<name> start-up"."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str, inner: Optional[dict[str, float]] = None) -> None:
        now = time.perf_counter()
        spent, self._last = now - self._last, now
        inner = inner or {}
        for phase, seconds in inner.items():
            self.seconds[f"{name} {phase}"] = round(seconds, 3)
        self.seconds[f"{name} start-up" if inner else name] = round(max(spent - sum(inner.values()), 0.0), 3)
