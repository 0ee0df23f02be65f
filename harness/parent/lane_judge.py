"""The parent's side of a lane's judge for one problem: its lifetime (`LaneJudge`: started with the
plan, restarted after a failure, ended with the evaluation), and the reference's pass through it (`ReferencePass`:
the judge started through the plan, then, when timing, the torch.compile baselines or their cached
timings, the null candidate and the reference's own timing; a compile baseline's failure never fails
it). A compared worker's pass against the judge is harness.parent.compared_pass's. Only typed messages pass
here, never tensors.
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import threading
import time
from pathlib import Path
from typing import Optional

from harness.core import integrity
from harness.core import protocol as P
from harness.core.config import Device, Switch, TimingMode
from harness.core.errors import flat
from harness.core.pairing import ProblemTiming, resolve_timing_mode
from harness.core.plan import Plan
from harness.core.records import (
    Baseline,
    CallProfile,
    NullFloor,
    Provenance,
    ReferenceOutcome,
    ReferenceProfile,
    ReferenceRecord,
    ReferenceTimes,
    finished_now,
)
from harness.core.status import Status
from harness.parent.compared_pass import ComparedPass, Setting, Subject
from harness.parent.reference_cache import ProfileCache, TimingCache
from harness.parent.supervise import JudgeClient, JudgeFailed, LauncherClosed
from harness.parent.verdict import Compared

GRANT_PEAKS = 3  # a lane's grant on a GPU it shares: this many times its problem's reference peak memory


class LaneJudge:
    """The lane's judge for one problem (harness.judge.service, through supervise.JudgeClient)."""

    def __init__(self, setting: Setting, stopped: Optional[threading.Event] = None) -> None:
        self.setting = setting
        self.stopped = stopped if stopped is not None else threading.Event()  # the evaluation's: its run was stopped
        self.client: Optional[JudgeClient] = None  # the running judge, None between judges
        self._dir: Optional[Path] = None  # its working folder in the run's scratch
        self.failures: list[str] = []  # why earlier judges of this lane ended (each restart is reported)
        self.restart_note = ""  # a warning for the next record: its judge is a restarted one
        self.profile: Optional[CallProfile] = None  # the reference's profiled call, once a judge has it

    def start(self, plan: Plan, measure: bool, profile: Optional[CallProfile] = None) -> P.ReferenceReport:
        """A new judge for this lane, run once through the plan; Stopped once the run was stopped: stop()
        kills the judge it finds, and one started after it would run a whole reference pass that nothing ends."""
        setting = self.setting
        self.end()
        log = setting.store.log_path(setting.problem.name, "_reference")
        try:
            self.client, self._dir = setting.lane.launcher.take_judge(log, setting.scratch.make)
        except LauncherClosed:
            raise Stopped(f"{setting.problem.name}: the run was stopped before its judge started") from None
        # stopped while it started: stop() sets the event before it kills the judge: seen here, or killed there
        if self.stopped.is_set():
            self.end()
            raise Stopped(f"{setting.problem.name}: the run was stopped while its judge started")
        try:
            with setting.gpu_alone():
                report = self.client.request(
                    P.Start(setting.judge_job(plan, measure, profile)), setting.cfg.timeouts.load, setting.cfg.timeouts
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

    def compare(self, plan: Plan, timing: ProblemTiming, subject: Subject) -> Compared:
        """Run one compared worker against this judge (`ComparedPass`), timed under the problem's `timing`."""
        assert self.client is not None
        return ComparedPass(self.setting, self.client, plan, timing, subject).run()

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


# -- the reference's pass ----------------------------------------------------------------------------------


class Stopped(Exception):
    """A stopped run's evaluation ended without a record (ProblemEvaluation.stop)."""


class ReferencePass:
    """Runs the reference once for a lane (`run`), and with it fixes the problem's timing mode."""

    def __init__(self, setting: Setting, judge: LaneJudge, stopped: threading.Event) -> None:
        self.setting, self.judge, self.stopped = setting, judge, stopped
        cfg = setting.cfg
        # resolved once the reference is profiled
        self.problem_timing = ProblemTiming(cfg.timing.mode if cfg.timing.mode != TimingMode.AUTO else TimingMode.EAGER)

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
        known_sol = (cached.profile.speed_of_light if cached is not None else None) or (
            known.speed_of_light if known is not None else None
        )
        started = datetime.datetime.now()
        clock = PhaseClock()
        report = self.judge.start(plan, measure=known_sol is None, profile=known.profile if known is not None else None)
        clock.lap("judge", inner=report.phase_seconds)
        # on a GPU that lanes share, the work of this problem is admitted by its memory from now on: a
        # candidate's holds about GRANT_PEAKS times the reference's peak (the judge's reference, the
        # worker's candidate, the inputs and outputs they share)
        setting.quiet.lane_memory(setting.lane.index, GRANT_PEAKS * report.peak_bytes)
        setting.gpu_step()
        # One timing mode for the problem (timing.mode auto: graph when the reference is launch-bound)
        sol = known_sol or report.speed_of_light
        self.problem_timing = ProblemTiming(
            *resolve_timing_mode(cfg.timing.mode, report.profile),
            floor_ms=integrity.hard_floor_ms(sol, setting.device) * cfg.speed_of_light.impossible_below
            if sol is not None
            else 0.0,
        )
        record = self.record(report, round((datetime.datetime.now() - started).total_seconds(), 3))
        profile, times = record.profile, ReferenceTimes()
        if record.ok and known is not None:
            profile = dataclasses.replace(
                profile,
                speed_of_light=profile.speed_of_light or known.speed_of_light,
                profile_reused_from=known.run_id,
            )
        elif record.ok and learned is not None and profile.profile is not None:
            learned.save(record)
        if cfg.timing.enabled and setting.device == Device.CUDA:
            times = dataclasses.replace(
                times, timing_mode=self.problem_timing.timing_mode, timing_mode_reason=self.problem_timing.reason
            )
        if record.ok and cached is not None:
            # Reused: the torch.compile baselines' paired timings and the speed-of-light (the eager
            # reference itself is timed with every candidate, so nothing of its own is reused).
            times = dataclasses.replace(
                times,
                baselines=cached.timing.baselines,
                timing_reused_from=cached.timing.timing_reused_from or cached.identity.run_id,
            )
            profile = dataclasses.replace(
                profile, speed_of_light=cached.profile.speed_of_light or profile.speed_of_light
            )
        elif record.ok and cfg.timing.enabled:
            times = dataclasses.replace(
                times,
                baselines=tuple(self.baseline(compile_mode, plan) for compile_mode in cfg.baselines.compile_modes),
            )
            clock.lap("baselines")
            if cache is not None and all(b.ok for b in times.baselines):
                cache.save(dataclasses.replace(record, profile=profile, timing=times))
        if record.ok and cfg.timing.enabled and self.wants_null():
            times = dataclasses.replace(times, null_floor=self.null(plan))
            clock.lap("null candidate")
        if record.ok and cfg.timing.enabled:
            # The reference's own timing, for the record: its rounds paired with the null candidate,
            # else with the first baseline (each candidate's speedup uses the rounds paired with it).
            sides = [times.null_floor.paired if times.null_floor else None] + (
                [b.paired for b in times.baselines] if not times.timing_reused_from else []
            )
            times = dataclasses.replace(times, stats=next((p.reference for p in sides if p is not None), None))
        if self.stopped.is_set():
            raise Stopped(f"{setting.problem.name}: the run was stopped during its reference")
        provenance = dataclasses.replace(record.provenance, phase_seconds=clock.seconds)
        record = dataclasses.replace(record, profile=profile, timing=times, provenance=provenance)
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
            setting.reference_identity(report.device_name),
            ReferenceOutcome(
                ok=report.ok,
                reason=report.reason,
                notes=tuple(n for n in notes if n) + report.input_structure + report.degenerate,
                declared=dict(problem.settings),
                other_size=report.other_size,
                other_size_note=report.other_size_note,
                data_plane=report.data_plane,
                peak_bytes=report.peak_bytes,
            ),
            ReferenceProfile(
                profile=report.profile, forward_ops=report.forward_ops, speed_of_light=report.speed_of_light
            ),
            provenance=Provenance(wall_seconds=wall_seconds, finished_at=finished_now()),
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
                self.problem_timing,
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

    def baseline(self, compile_mode: str, plan: Plan) -> Baseline:
        """torch.compile of the reference, in its own worker: checked by the judge like a
        candidate, then timed in turns with the eager reference. Its failure never fails the reference."""
        name = f"torch.compile({compile_mode})"
        try:
            compared = self.judge.compare(
                plan,
                self.problem_timing,
                Subject(
                    P.Role.BASELINE,
                    self.setting.problem.path,
                    f"_compile-{compile_mode}",
                    compile_mode=compile_mode,
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
