"""The reference's pass for one problem on one lane, in the parent: the lane's judge started
through the plan, then, when timing, the torch.compile baselines (or their cached timings), the
null candidate, and the reference's own timing. Its record is what the candidates are measured
against; a compile baseline's failure never fails it."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Config
from harness.core.errors import flat
from harness.core.pairing import ProblemTiming, resolve_mode
from harness.core.plan import Plan
from harness.core.records import Baseline, CallProfile, NullFloor, ReferenceRecord, SpeedOfLight, from_dict, to_dict
from harness.core.status import Status
from harness.device.environment import device_identity, query_gpu
from harness.parent.lane_judge import LaneJudge, Setting, Subject
from harness.parent.supervise import JudgeFailed


class Stopped(Exception):
    """A stopped run's evaluation ended without a record (ProblemEvaluation.stop)."""


class ReferenceRun:
    """Runs the reference once for a lane (`run`), and with it fixes the problem's timing mode."""

    def __init__(self, setting: Setting, judge: LaneJudge, stopped: Callable[[], bool]) -> None:
        self.setting, self.judge, self.stopped = setting, judge, stopped
        cfg = setting.cfg
        self.timing_mode = ProblemTiming(cfg.timing.mode if cfg.timing.mode != "auto" else "eager")  # resolved once the reference is profiled

    def run(self, plan: Plan) -> ReferenceRecord:
        """The reference's record, written to the store (a stopped run raises Stopped instead)."""
        setting, cfg = self.setting, self.setting.cfg
        cache = TimingCache(cfg, setting.problem_hash, setting.device, setting.lane.gpu) if cfg.timing.reuse_reference and cfg.timing.enabled else None
        cached = cache.load() if cache is not None else None
        learned = ProfileCache(cfg, setting.problem_hash, setting.lane.gpu) if cfg.timing.reuse_profile and cfg.timing.enabled and setting.device == "cuda" else None
        known = learned.load() if learned is not None else None
        known_sol = (cached.speed_of_light if cached is not None else None) or (known.speed_of_light if known is not None else None)
        started = datetime.datetime.now()
        clock = PhaseClock()
        report = self.judge.start(plan, measure=known_sol is None, profile=known.profile if known is not None else None)
        clock.lap("judge", inner=report.phase_seconds)
        # One timing mode for the problem (timing.mode auto: graph when the reference is launch-bound)
        sol = known_sol or report.speed_of_light
        self.timing_mode = ProblemTiming(*resolve_mode(cfg.timing.mode, report.profile), floor_ms=sol.bytes_ms * cfg.speed_of_light.impossible_below if sol is not None else 0.0)
        record = self.record(report, round((datetime.datetime.now() - started).total_seconds(), 3))
        if record.ok and known is not None:
            record = dataclasses.replace(record, speed_of_light=record.speed_of_light or known.speed_of_light, profile_reused_from=known.run_id)
        elif record.ok and learned is not None and record.profile is not None:
            learned.save(record)
        if cfg.timing.enabled and setting.device == "cuda":
            record = dataclasses.replace(record, timing_mode=self.timing_mode.mode, timing_mode_reason=self.timing_mode.reason)
        if record.ok and cached is not None:
            # Reused: the torch.compile baselines' paired timings and the speed-of-light (the eager
            # reference itself is timed with every candidate, so nothing of its own is reused).
            record = dataclasses.replace(record, baselines=cached.baselines, speed_of_light=cached.speed_of_light or record.speed_of_light, timing_reused_from=cached.timing_reused_from or cached.run_id)
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
            sides = [record.null_floor.paired if record.null_floor else None] + ([b.paired for b in record.baselines] if not record.timing_reused_from else [])
            record = dataclasses.replace(record, timing=next((p.reference for p in sides if p is not None), None))
        if self.stopped():
            raise Stopped(f"{setting.problem.name}: the run was stopped during its reference")
        record = dataclasses.replace(record, phase_seconds=clock.seconds)
        setting.store.append(record)
        return record

    def record(self, report: P.ReferenceReport, wall_seconds: float) -> ReferenceRecord:
        """The record of the judge's run of the reference (before baselines and the null candidate)."""
        setting = self.setting
        problem = setting.problem
        notes = (
            report.float64_note,
            f"profiling the reference failed: {report.profile_error}" if report.profile_error else "",
            f"speed-of-light not measured: {report.speed_of_light_error}" if report.speed_of_light_error else "",
            f"its ATen operators were not observed: {report.forward_ops.error}" if report.forward_ops is not None and report.forward_ops.error else "",
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
        return setting == "on" or (setting == "auto" and self.setting.device == "cuda")

    def null(self, plan: Plan) -> NullFloor:
        """The null candidate: the problem's own Model through the candidate path (every check, then
        timed in turns with the reference). Identical code: its speedup is this run's 1.00x."""
        try:
            compared = self.judge.compare(plan, self.timing_mode, Subject(P.Role.CANDIDATE, self.setting.problem.path, "_null", class_name="Model", name="the null candidate"))
        except JudgeFailed as exc:
            self.judge.failed(str(exc))
            return NullFloor(Status.HARNESS_ERROR.value, flat(f"the lane's judge failed: {exc}"))
        if compared.outcome.failure is not None:
            status, reason = compared.outcome.failure
            return NullFloor(status.value, flat(reason))
        worst = max((c.max_abs_error or 0.0 for c in compared.checks), default=0.0)
        return NullFloor(Status.CORRECT.value, f"matched {len(plan.calls)} calls; max abs error {worst:.2g}", compared.paired)

    def baseline(self, mode: str, plan: Plan) -> Baseline:
        """torch.compile of the reference, in its own worker: checked by the judge like a
        candidate, then timed in turns with the eager reference. Its failure never fails the reference."""
        name = f"torch.compile({mode})"
        try:
            compared = self.judge.compare(plan, self.timing_mode, Subject(P.Role.BASELINE, self.setting.problem.path, f"_compile-{mode}", compile_mode=mode, name=name))
        except JudgeFailed as exc:
            self.judge.failed(str(exc))
            return Baseline(name, False, flat(f"the lane's judge failed: {exc}"))
        outcome, checks = compared.outcome, compared.checks
        compiled = outcome.first(P.Compiled)
        seconds = compiled.seconds if compiled is not None else None
        worst = max((c.max_abs_error or 0.0 for c in checks), default=None)
        if outcome.failure is not None:
            return Baseline(name, False, flat(f"{outcome.failure[0].value}: {outcome.failure[1]}"), compile_seconds=seconds, max_abs_error=worst)
        if compared.timing is None:
            return Baseline(name, False, "compiled and matched, but no timing arrived", compile_seconds=seconds, max_abs_error=worst)
        return Baseline(name, True, "ok", timing=compared.timing, compile_seconds=seconds, max_abs_error=worst, paired=compared.paired)


def write_json(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, whole or not at all: a concurrent reader (another lane, another
    run) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


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


@dataclasses.dataclass(frozen=True)
class Learned:
    """What a reference pass measured that a later pass of the same key can reuse."""

    run_id: str  # the run that measured it
    profile: CallProfile  # the reference's profiled call
    speed_of_light: Optional[SpeedOfLight]  # its roofline floor (None: not measured)


class ProfileCache:
    """The reference cache: the reference's profiled call and speed-of-light, per (problem file,
    GPU model, driver, torch, CUDA, the settings that change which kernels run), reused across runs
    and sessions when timing.reuse_profile is set. Tensors and timings are never cached. An entry
    holds its full key and is read only when that key equals this pass's: a miss recomputes."""

    VERSION = 1

    def __init__(self, cfg: Config, problem_hash: str, gpu: str = "") -> None:
        self.key = {
            "version": self.VERSION,
            "problem": problem_hash,
            "gpu": query_gpu(["name", "driver_version"], ["-i", gpu] if gpu else None) or ["unknown GPU"],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "allow_tf32": cfg.check.allow_tf32,
            "flush_l2": cfg.timing.flush_l2,
            "speed_of_light": cfg.speed_of_light.enabled,
        }
        digest = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:24]
        self.path = cfg.path(cfg.measurement_cache_dir) / "reference" / f"{digest}.json"

    def load(self) -> Optional[Learned]:
        try:
            data = json.loads(self.path.read_text())
            if data.get("key") != json.loads(json.dumps(self.key)):
                return None
            return Learned(str(data["run_id"]), from_dict(CallProfile, data["profile"]), from_dict(SpeedOfLight, data["speed_of_light"]) if data.get("speed_of_light") else None)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    def save(self, record: ReferenceRecord) -> None:
        write_json(self.path, {"key": self.key, "run_id": record.run_id, "profile": to_dict(record.profile), "speed_of_light": to_dict(record.speed_of_light) if record.speed_of_light else None})


class TimingCache:
    """The torch.compile baselines (each timed in turns with the eager reference) and the
    speed-of-light, per (problem hash, device, torch version, timing config), reused across runs
    when timing.reuse_reference is set."""

    def __init__(self, cfg: Config, problem_hash: str, device: str, gpu: str = "") -> None:
        timing = dataclasses.asdict(cfg.timing)
        for name in ("reuse_reference", "reuse_profile", "unstable_iqr", "null_candidate", "quiet", "null_tolerance"):
            timing.pop(name)
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
        write_json(self.path, to_dict(record))
