"""Evaluate the candidates of one problem on one lane: its judge once, then each candidate in its own worker.

The parent plans secret seeds and starts the lane's judge (harness.judge.service), which runs the reference
through the plan on the device. Each candidate's worker then gets its inputs from the judge (a
region of its own), reports each step, and the judge compares the step's outputs in place; this
process only relays steps and verdicts, never tensors, and writes one record per candidate at once.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from typing import Any, Callable, Optional

from harness.core import integrity
from harness.core import protocol as P
from harness.core.config import Config, Device, TimingMode
from harness.core.errors import flat
from harness.core.pairing import launch_bound
from harness.core.plan import Plan
from harness.core.protocol import Failure, WorkerOutcome
from harness.core.records import (
    CallProfile,
    CandidateRecord,
    Checks,
    Decision,
    Integrity,
    PairedSpeedup,
    Provenance,
    ReferenceRecord,
    SanitizerResult,
    Timing,
    TimingStats,
    finished_now,
)
from harness.core.scan import declared_kernels, scan_source
from harness.core.status import Finding, Status
from harness.core.store import RunStore
from harness.parent import verdict
from harness.parent.lane_judge import LaneJudge, ReferencePass, Setting, Stopped, Subject
from harness.parent.resources import RunResources
from harness.parent.sanitize import LaneSanitizer
from harness.parent.scratch import RunScratch
from harness.parent.supervise import JudgeFailed, Lane, default_memory_limit
from harness.parent.verdict import Case, Compared, Reported, Verdict, VerdictRules
from harness.sources.candidate import Candidate, needs_cuda_statically
from harness.sources.problem import Problem

__all__ = ["ProblemEvaluation", "compare_times", "timing_warnings"]


class ProblemEvaluation:
    """One problem on one lane: the reference once (on the first candidate), then candidates one
    at a time. `run()` evaluates every candidate; an executor spreading candidates over several
    lanes gives each lane its own ProblemEvaluation with the same `plan` and calls `evaluate`.
    `resources`: the run's (its scratch, quiet host and build pool); without them, the evaluation
    makes a scratch of its own (and no quiet host, no build pool), removed when it closes."""

    def __init__(
        self,
        problem: Problem,
        candidates: list[Candidate],
        cfg: Config,
        device: str,
        store: RunStore,
        on_record: Callable[[CandidateRecord], None] = lambda r: None,
        on_start: Callable[[Candidate], None] = lambda c: None,
        lane: Optional[Lane] = None,
        plan: Optional[Plan] = None,
        resources: Optional[RunResources] = None,
    ) -> None:
        self.problem = problem
        self.candidates = candidates
        self.cfg = cfg.for_problem(problem.settings)  # the problem's tolerances and backward contract
        self.device, self.store = device, store
        self.on_record, self.on_start = on_record, on_start
        self._owns_resources = resources is None  # then its scratch is ours to remove
        self.resources = resources if resources is not None else RunResources(cfg, device, store, RunScratch.create())
        # a harness.parent.prebuild.BuildAhead already building these candidates, or None
        self.builds = self.resources.builds
        self.lane: Lane = (
            lane
            if lane is not None
            else Lane.single(cfg, device, quiet=self.resources.quiet, worker_env=self.resources.boundary.env)
        )
        self._owns_lane = lane is None  # then its prestarted worker is ours to end
        memory_limit = cfg.limits.memory_mb << 20 if cfg.limits.memory_mb else default_memory_limit()
        # the secret seeds and calls; None: a fresh one is drawn for the first candidate
        self.plan: Optional[Plan] = plan
        self._reference: Optional[ReferenceRecord] = None  # the reference's record, once its pass ran on this lane
        self.setting = Setting(
            problem,
            self.cfg,
            device,
            store,
            self.lane,
            memory_limit,
            problem.hash,
            self.resources.scratch,
            self.resources.quiet,
        )
        self.judge = LaneJudge(self.setting)  # the lane's judge for this problem, started with the first candidate
        self.reference_pass = ReferencePass(self.setting, self.judge, lambda: self._stopped)
        self._stopped = False  # stop() was called: nothing more is written
        prestart = self.lane.launcher.prestart and self.cfg.sanitizer.prestart
        self.sanitizer = LaneSanitizer(
            self.cfg,
            problem.path,
            device,
            {**self.lane.launcher.env, **self.lane.launcher.worker_env},
            prestart,
            scratch=self.resources.scratch,
            quiet=self.resources.quiet,
            problem_text=problem.text,
        )

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
        return self._finish(self._failed(candidate, skip.status, skip.reason))

    def failed(self, candidate: Candidate, status: Status, reason: str) -> CandidateRecord:
        """The record of a candidate whose evaluation failed outside this one (an executor lost
        its lane), written now."""
        return self._finish(self._failed(candidate, status, reason))

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
            self._reference = self.reference_pass.run(self.plan)
        self.on_start(candidate)
        self.sanitizer.prestart()  # memcheck's start-up under the tool overlaps this candidate's checks
        if self.builds is not None:
            self.builds.wait(candidate.path)  # the worker then loads the finished build
        reference = self._reference
        if self.judge.ended() and reference.ok:
            reference = self._restart_judge()
        if not reference.ok:
            return self._finish(
                self._failed(candidate, Status.REFERENCE_FAILED, f"reference failed: {reference.reason}")
            )
        assert self.plan is not None  # drawn (or given) before the reference ran, and never dropped
        try:
            record = self._run_candidate(candidate, self.plan, reference)
        except JudgeFailed as exc:  # the judge, not the candidate, failed: the next candidate gets a new one
            self.judge.failed(str(exc))
            record = self._failed(
                candidate, Status.HARNESS_ERROR, f"the lane's judge failed during this candidate: {exc}"
            )
        except Exception as exc:  # a harness bug on one candidate must not end the run
            traceback.print_exc()
            record = self._failed(candidate, Status.HARNESS_ERROR, f"{type(exc).__name__}: {exc}")
        return self._finish(self._bounded(candidate, record))

    def close(self) -> None:
        self.judge.end()
        self.sanitizer.close()
        self._reference = None
        if self._owns_lane:
            self.lane.launcher.close()
        if self._owns_resources:
            self.resources.close()

    # -- steps ---------------------------------------------------------------------------------

    def _prescreen(self, candidate: Candidate) -> Optional[Failure]:
        if candidate.extraction_failure is not None:
            return Failure(Status.EXTRACT_FAILED, candidate.extraction_failure)
        if self.device == Device.CPU:
            why = needs_cuda_statically(candidate.path)
            if why:
                return Failure(Status.NEEDS_CUDA, f"{why}; this run is on the CPU")
        return None

    def _restart_judge(self) -> ReferenceRecord:
        """A new judge after one failed; the reference's record keeps the first judge's measures."""
        assert self._reference is not None and self.plan is not None
        report = self.judge.restart(self.plan)
        if not report.ok:
            self._reference = dataclasses.replace(
                self._reference, ok=False, reason=f"the restarted judge failed: {report.reason}"
            )
        return self._reference

    def _run_candidate(self, candidate: Candidate, plan: Plan, reference: ReferenceRecord) -> CandidateRecord:
        compared = self.judge.compare(
            plan, self.reference_pass.timing_mode, Subject(P.Role.CANDIDATE, candidate.path, candidate.name)
        )
        case = Case(
            compared,
            plan.calls,
            plan.randomize_weights,
            reference,
            VerdictRules.of(self.cfg),
            self.device,
            reported(candidate, compared.outcome),
            self.judge.take_restart_note(),
        )
        first = verdict.decide(case)
        sanitized: tuple[SanitizerResult, ...] = ()
        unsafe: list[Finding] = []
        if first.status is Status.CORRECT and self.sanitizer.wanted():
            sanitized, unsafe = self.sanitizer.run(
                candidate.path, candidate.hash, candidate.name, plan.construct_seed, reference.other_size
            )
        decided = verdict.settle(
            case,
            first,
            unsafe,
            lambda timed, paired: compare_times(timed, paired, compared.profile, reference, self.cfg),
        )
        return self._record(candidate, *decided_parts(compared, case, decided, sanitized))

    def _bounded(self, candidate: Candidate, record: CandidateRecord) -> CandidateRecord:
        """The record once the boundary is checked: with the hash layer, a candidate that wrote into
        a watched tree is `tampered` (what it wrote undone); a problem file changed on disk is a
        warning (the judge loaded the bytes pinned when the problem was found). A NameError of a
        name the problem file defines says so (`problem_global_hint`)."""
        watch = self.resources.boundary.watch
        changes = watch.check() if watch is not None else []
        if changes:
            more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
            return self._failed(
                candidate, Status.TAMPERED, f"wrote outside its scratch: {'; '.join(changes[:3])}{more}"
            )
        hint = problem_global_hint(record.decision.reason, self.problem, self.cfg.check.problem_globals)
        if hint:
            record = dataclasses.replace(
                record, decision=dataclasses.replace(record.decision, reason=flat(f"{record.decision.reason} ({hint})"))
            )
        if self.problem.changed_on_disk():
            note = (
                f"the problem file {self.problem.path} changed on disk during the run; the bytes read when the run "
                "began were judged"
            )
            return dataclasses.replace(
                record, decision=dataclasses.replace(record.decision, warnings=(*record.decision.warnings, note))
            )
        return record

    def _failed(self, candidate: Candidate, status: Status, reason: str) -> CandidateRecord:
        return self._record(candidate, Decision(status, flat(reason)), Checks(), Timing(), Integrity(), Provenance())

    def _record(
        self,
        candidate: Candidate,
        decision: Decision,
        checks: Checks,
        timing: Timing,
        integrity: Integrity,
        provenance: Provenance,
    ) -> CandidateRecord:
        """The record of `candidate` on this lane: its identity, its parts, and where its log is, finished now."""
        log = self.store.log_path(self.problem.name, candidate.name)
        provenance = dataclasses.replace(
            provenance,
            log_path=str(log.relative_to(self.store.dir)) if log.exists() else "",
            finished_at=finished_now(),
        )
        return CandidateRecord(
            self.setting.identity(candidate.name, str(candidate.path), candidate.hash),
            decision,
            checks,
            timing,
            integrity,
            provenance,
        )

    def stop(self) -> None:
        """From another thread (a stopped run): end this lane's judge, workers and sanitizer runs
        now. Whatever they were doing writes no record: the candidate in flight raises Stopped instead."""
        self._stopped = True
        self.judge.kill()
        self.sanitizer.kill()
        self.lane.launcher.kill_all()

    def _finish(self, record: CandidateRecord) -> CandidateRecord:
        if self._stopped:
            raise Stopped(f"{record.identity.candidate}: the run was stopped during its evaluation")
        self.store.append(record)
        self.on_record(record)
        return record


def reported(candidate: Candidate, outcome: WorkerOutcome) -> Reported:
    """What the candidate's worker reported beyond its checks (its messages), and what its
    source declares (a scan of its file), for harness.parent.verdict."""
    mapping = tuple(pair for m in outcome.every(P.WeightsMapped) for pair in m.pairs)
    by_seed = outcome.first(P.WeightsBySeed)
    why = by_seed.reason if by_seed is not None else ""
    mapped = outcome.first(P.WeightsMapped)
    scanned, declared = tuple(scan_source(candidate.path)), frozenset(declared_kernels(candidate.path))
    return Reported(
        mapping,
        outcome.first(P.ExtensionCalls),
        outcome.first(P.Threads),
        why,
        scanned,
        declared,
        mapped.by if mapped is not None else "position",
    )


NAME_ERROR = re.compile(r"NameError: name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")


def problem_global_hint(reason: str, problem: Problem, shared: bool) -> str:
    """Why a candidate's NameError names something the problem file defines: its module does not
    share the problem's globals (check.problem_globals, which configs/kernelbench.yaml sets)."""
    found = NAME_ERROR.search(reason)
    if shared or found is None or found.group(1) not in problem.global_names:
        return ""
    return (
        f"{found.group(1)} is defined only in the problem file; a candidate's module does not see the problem's "
        "globals unless check.problem_globals is set, as configs/kernelbench.yaml does"
    )


def left_running(outcome: WorkerOutcome) -> tuple[str, ...]:
    """A note when the model left processes running that its worker had to end."""
    count = outcome.done.leftover if outcome.done is not None else 0
    return (
        (
            f"the model left {count} process{'es' if count > 1 else ''} running after its run; the worker ended "
            f"{'them' if count > 1 else 'it'}",
        )
        if count
        else ()
    )


def decided_parts(
    compared: Compared, case: Case, decided: Verdict, sanitized: tuple[SanitizerResult, ...]
) -> tuple[Decision, Checks, Timing, Integrity, Provenance]:
    """The parts of the record of a candidate that ran against the judge, from its settled verdict."""
    outcome, gradients = compared.outcome, compared.gradients
    mapping = case.reported.mapping
    return (
        Decision(
            decided.status,
            flat(decided.reason),
            decided.stricter,
            decided.warnings,
            decided.notes + left_running(outcome),
        ),
        Checks(
            results=tuple(compared.checks),
            same_seed=compared.same_seed,
            weights="seed" if compared.own_weights else case.reported.mapped_by if mapping else "name",
            weight_mapping=mapping,
            gradients=gradients[0] if gradients is not None else "",
        ),
        decided.timing,
        dataclasses.replace(decided.evidence, flags=decided.flags, sanitizer=sanitized),
        Provenance(
            builds=tuple(m.build for m in outcome.every(P.Built)),
            phase_seconds=outcome.done.phase_seconds if outcome.done is not None else {},
            wall_seconds=round(outcome.wall_seconds, 3),
        ),
    )


CLOCK_TOLERANCE = 0.05  # SM clocks further apart than this between two timings are reported


def compare_times(
    timing: TimingStats, paired: PairedSpeedup, profile: Optional[CallProfile], reference: ReferenceRecord, cfg: Config
) -> verdict.Comparison:
    """Speedups over the eager reference (from the paired rounds) and over each baseline (the
    candidate's paired speedup over the baseline's, when both were timed under the same protocol),
    % of speed-of-light, the warnings a reader needs to trust (or distrust) those numbers, and the
    implausible-time findings."""
    median = timing.median_ms
    reference_ms = paired.reference.median_ms
    warnings = timing_warnings(timing, cfg.timing, profile)
    usable = [
        (b.name, b.timing, b.paired)
        for b in reference.baselines
        if b.ok and b.timing is not None and b.paired is not None
    ]
    measured = Timing(
        reference_ms=reference_ms,
        speedup=paired.speedup,
        paired=paired,
        baseline_ms={name: stats.median_ms for name, stats, _ in usable},
        speedups={
            name: paired.speedup / theirs.speedup for name, _, theirs in usable if theirs.protocol == paired.protocol
        },
    )
    for name, _, theirs in usable:
        if theirs.protocol != paired.protocol:
            warnings.append(
                f"no speedup over {name}: it was timed with {theirs.protocol}, this candidate needs {paired.protocol}"
            )
    bound, share = launch_bound(reference.profile)
    if timing.mode == TimingMode.EAGER and bound:
        warnings.append(
            f"the reference is launch-bound ({share}): this speedup measures host launch overhead as much as GPU "
            "work; timing.mode=graph times both sides without it"
        )
    sol = reference.speed_of_light
    notes: tuple[str, ...] = ()
    if sol is not None and sol.floor_ms > 0:
        sol_ms, sol_fraction, sol_floor, notes = sol_measures(sol, median)
        measured = dataclasses.replace(measured, sol_ms=sol_ms, sol_fraction=sol_fraction, sol_floor=sol_floor)
    if timing.sm_clock_mhz and paired.reference.sm_clock_mhz:
        ratio = timing.sm_clock_mhz / paired.reference.sm_clock_mhz
        if abs(ratio - 1) > CLOCK_TOLERANCE:
            warnings.append(
                f"SM clock {timing.sm_clock_mhz:.0f} MHz after this timing vs {paired.reference.sm_clock_mhz:.0f} "
                "MHz after the reference's: "
                "the GPU changed speed during the rounds; the paired rounds cancel most of it, but repeat the run to "
                "see the spread"
            )
    found = integrity.implausible_time(
        timing,
        paired.speedup,
        reference_ms,
        profile,
        sol,
        cfg.check.max_plausible_speedup,
        cfg.speed_of_light.impossible_below,
    )
    return measured, notes, warnings, found + integrity.persisting_l2(timing)


SLOWDOWN_BITS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}


def sol_measures(sol: Any, median: float) -> tuple[float, Optional[float], str, tuple[str, ...]]:
    """The speed of light of a candidate timed at `median` ms, as (sol_ms, sol_fraction, sol_floor,
    notes): against the reference algorithm's roofline, or, when it runs below that, against the
    bytes floor alone, with a note (its algorithm needs fewer FLOPs than the reference's:
    information, not a warning)."""
    if median <= 0 or median >= sol.floor_ms or sol.bytes_ms <= 0:
        return sol.floor_ms, sol.floor_ms / median if median > 0 else None, "roofline", ()
    note = (
        f"faster than the reference's algorithm: {median:.4g} ms is below its roofline {sol.floor_ms:.4g} ms "
        f"({sol.flops:.3g} FLOP at {sol.peak_tflops:.3g} TFLOP/s); against the fewest bytes ({sol.min_bytes:.3g} B at "
        f"{sol.peak_gbps:.4g} GB/s, {sol.bytes_ms:.4g} ms) it is at {sol.bytes_ms / median:.0%} of the speed of light"
    )
    return sol.bytes_ms, sol.bytes_ms / median, "bytes", (note,)


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
            f"timing did not settle: relative standard error {timing.rse:.1%} after {timing.n} calls (stopped by "
            f"{timing.stopped_by}); raise timing.budget_s or quiet the machine"
        )
    if timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > cfg.unstable_iqr:
        warnings.append(
            f"unstable timing: the interquartile range is {timing.iqr_ms / timing.median_ms:.0%} of the median; stop "
            "other work on this GPU, check the clocks, or use timing.mode=graph if the call is launch-bound"
        )
    slowed = slowdown_reasons(timing.clock_event_reasons)
    if slowed:
        warnings.append(
            f"the GPU was slowing its clocks when timing ended ({', '.join(slowed)}): timings vary with power and "
            "temperature; compare only runs taken under the same conditions, and repeat to see the spread"
        )
    if timing.fallback:
        warnings.append(timing.fallback)
    if timing.sync_reason:
        warnings.append(f"timed with a device-wide synchronise because {timing.sync_reason}")
    if profile is not None and timing.mode == TimingMode.EAGER and launch_bound(profile)[0]:
        warnings.append(
            f"launch-bound: its kernels keep the GPU busy for {profile.kernel_ms / profile.span_ms:.0%} of its "
            "call's GPU span; the rest is host overhead between launches; timing.mode=graph times it without the "
            "launch gaps"
        )
    return warnings
