"""A candidate's verdict, as a pure function of what its run came to: no workers, no files, no store.

`harness.parent.compared_pass` runs the compared worker, reads its messages and scans its source,
then hands the results here. The decision has two stages, because the sanitizer runs only on a
candidate that is still correct after its integrity findings:

- `decide(case)`: the checks (a worker failure, the same-seed check, else correct), the integrity
  findings under their policies (harness.core.flags), and the warnings that need no timing;
- `settle(case, first, unsafe)`: the sanitizer's findings, then, for a candidate still
  correct, its timing compared (`compare_times`: speedups, speed-of-light and the warnings a reader
  needs to trust them) and its findings, the log-size warning, and which of our checks failed it
  where KernelBench's would not have (`stricter_than_kernelbench`, below).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from harness.core import integrity
from harness.core.config import Device, Distribution, ModuleMode, Policy, TimingMode, WeightSource
from harness.core.flags import decide as decide_flags
from harness.core.protocol import Call, CheckKind, ExtensionCalls, Threads, WorkerOutcome, check_kind
from harness.core.records import (
    CallProfile,
    CheckResult,
    Flag,
    Integrity,
    PairedSpeedup,
    ReferenceRecord,
    Stricter,
    Timing,
    TimingStats,
)
from harness.core.status import SECOND_DRAW, Code, Finding, Gradients, Status, Vocabulary

__all__ = [
    "PRECISION_FLOOR",
    "Case",
    "StricterCheck",
    "Compared",
    "Comparison",
    "Reported",
    "VerdictRules",
    "Verdict",
    "decide",
    "findings",
    "compare_times",
    "settle",
    "stricter_than_kernelbench",
    "timing_warnings",
]

PRECISION_FLOOR = integrity.PRECISION_FLOOR  # relative errors below this are never called imprecise

# compare_times' result: the speeds, notes, warnings, implausible-time findings
Comparison = tuple[Timing, tuple[str, ...], list[str], list[Finding]]


@dataclasses.dataclass(frozen=True)
class Compared:
    """What one compared worker (a candidate or a baseline) came to."""

    outcome: WorkerOutcome
    checks: list[CheckResult]  # the calls, then the buffers and the timed output when made
    same_seed: Optional[CheckResult]  # the same-seed construction check, when made
    precision: dict[str, float]  # relative errors against float64 of the precision call ({} when none)
    gradients: Optional[tuple[str, str]]  # (match | mismatch | forward only, why); None when not made
    timing: Optional[TimingStats] = None  # the compared model's rounds, pooled
    paired: Optional[PairedSpeedup] = None  # its speedup over the reference from the paired rounds
    profile: Optional[CallProfile] = None  # the worker's one profiled call (CUDA)
    profile_error: str = ""  # why the worker's profiled call failed, when it did
    # the first write past an input's end (guard bands), as the judge (or, on device copies, the worker) found it
    unsafe: str = ""
    # the worker kept its same-seed weights (check.weights seed, or no pairing by name or position)
    own_weights: bool = False
    # the first output it returned with no values of its own (a tensor subclass, meta, a short storage), with its step
    lazy: str = ""


@dataclasses.dataclass(frozen=True)
class VerdictRules:
    """The settings a verdict depends on (a problem's config, its declarations applied)."""

    require_same_seed: bool  # check.require_same_seed: a same-seed mismatch fails the candidate (else a warning)
    modes: tuple[str, ...]  # check.modes, named in a correct verdict's reason
    repeats: int  # check.repeats; "repeats" is named in the reason when there are any
    precision_ratio: float  # check.precision_ratio: less-precise above this times the reference's own error
    own_share_floor: float  # check.own_share_floor: own-share-low below this share of the GPU time
    weights: str  # check.weights: transplant flags a candidate that kept its own weights, seed does not
    # flag key -> fail | flag | ignore (flags.policies, the gradient flags' from check.gradients)
    policies: Mapping[str, str]
    log_kib: int  # limits.log_kib: a worker printing more gets a warning
    target_rse: float  # timing.target_rse: a timing that did not settle below it gets a warning
    unstable_iqr: float  # timing.unstable_iqr: an interquartile range over this share of the median gets a warning
    max_plausible_speedup: float  # check.max_plausible_speedup: a speedup over it is implausible-time
    impossible_below: float  # speed_of_light.impossible_below: a time under this share of the bytes floor is too
    allow_tf32: bool = False  # check.allow_tf32 (or the problem's HARNESS_ALLOW_TF32): lifts the below-float32 rule
    fixed_seed: int = 0  # check.seed: when not 0, the run's draws were known beforehand (every record warns)

    @classmethod
    def of(cls, cfg: Any) -> "VerdictRules":
        """The rules of a config (harness.core.config.Config)."""
        check = cfg.check
        return cls(
            check.require_same_seed,
            tuple(check.modes),
            check.repeats,
            check.precision_ratio,
            check.own_share_floor,
            check.weights,
            cfg.flags.policies(check.gradients),
            cfg.limits.log_kib,
            cfg.timing.target_rse,
            cfg.timing.unstable_iqr,
            check.max_plausible_speedup,
            cfg.speed_of_light.impossible_below,
            check.allow_tf32,
            check.seed,
        )


@dataclasses.dataclass(frozen=True)
class Reported:
    """What the candidate's worker reported beyond its checks, and what its source declares: read
    and scanned by the caller (the messages and the file are its business)."""

    # renamed weights paired by position or shape: (ModelNew's name, the reference's)
    mapping: tuple[tuple[str, str], ...] = ()
    counted: Optional[ExtensionCalls] = None  # the worker's extension call counts, None when none came
    threads: Optional[Threads] = None  # the worker's report of threads left running, None when none came
    weights_why: str = ""  # the weights_by_seed message's reason ("" when none came)
    scanned: tuple[Finding, ...] = ()  # the findings of the scan of its source (harness.core.scan.scan_source)
    declared: frozenset[str] = frozenset()  # the kernels its source declares (harness.core.scan.declared_kernels)
    # how `mapping` paired them: position (registration order and shape) or shape (each unique)
    mapped_by: str = "position"


@dataclasses.dataclass(frozen=True)
class Case:
    """Everything one candidate's verdict is decided from."""

    compared: Compared  # what its compared worker came to
    calls: tuple[Call, ...]  # the plan's calls, in order
    randomize_weights: bool  # the plan redrew the reference's weights
    reference: ReferenceRecord  # the lane's reference
    rules: VerdictRules  # the problem's settings
    device: str  # cpu | cuda: on the CPU, counted extension calls stand in for the profile
    reported: Reported = Reported()  # its messages and its source, read beforehand
    restart_note: str = ""  # a warning that its judge is a restarted one ("" when not)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a candidate's record says about it, beyond what it ran and how long it took."""

    status: Status  # the verdict
    reason: str  # why, in one line (before the record trims it)
    flags: tuple[Flag, ...] = ()  # the integrity flags raised, in the order found
    warnings: tuple[str, ...] = ()  # what a reader must know, in the record's order
    # a correct candidate's own timing, and its speeds when it was timed in paired rounds; empty otherwise
    timing: Timing = Timing()
    stricter: Optional[Stricter] = None  # the check of ours that failed it where KernelBench's would not have
    # the evidence the findings were read from (its flags and sanitizer runs are the record's)
    evidence: Integrity = Integrity()
    # what its checks noted without failing it (an inert buffer, an output that is rounding noise)
    notes: tuple[str, ...] = ()


def checked(case: Case) -> tuple[Status, str]:
    """The verdict of the checks alone: the worker's failure, a same-seed mismatch when it fails
    the candidate, else correct with what was matched."""
    compared, rules = case.compared, case.rules
    same_seed = compared.same_seed
    failure = compared.outcome.failure
    if failure is not None:
        return failure.status, failure.reason
    if same_seed is not None and not same_seed.passed and rules.require_same_seed:
        return Status.INCORRECT, f"{same_seed.name}: {same_seed.reason}"
    worst = max((c.max_abs_error or 0.0) for c in compared.checks)
    state = " and the buffers after them" if len(compared.checks) > len(case.calls) else ""
    return (
        Status.CORRECT,
        f"matched {len(case.calls)} calls "
        f"({', '.join(rules.modes + (('repeats',) if rules.repeats else ()))}){state}; max abs error {worst:.2g}",
    )


def first_warnings(case: Case) -> list[str]:
    """The warnings that need no timing: a tolerated same-seed mismatch, a restarted judge, an
    other-size trial at the problem's own size, weights paired by position, gradients a second draw
    settled, a failed profile."""
    same_seed, mapping = case.compared.same_seed, case.reported.mapping
    warnings: list[str] = []
    if same_seed is not None and not same_seed.passed and not case.rules.require_same_seed:
        warnings.append(
            f"same-seed construction differs from the reference ({same_seed.reason}){_same_seed_cause(case.compared)}"
        )
    if case.rules.fixed_seed:
        warnings.append(
            f"the checks' draws were fixed by check.seed={case.rules.fixed_seed}, not secret: a candidate fitted to "
            "them would pass"
        )
    if case.restart_note:
        warnings.append(case.restart_note)
    if case.reference.outcome.other_size_note:
        warnings.append(f"the other-size trial ran at the problem's own size: {case.reference.outcome.other_size_note}")
    if mapping:
        shown = ", ".join(f"{a} <- {b}" for a, b in mapping[:6]) + (
            f", and {len(mapping) - 6} more" if len(mapping) > 6 else ""
        )
        warnings.append(f"weights mapped by {case.reported.mapped_by} (ModelNew renames them): {shown}")
    gradients = case.compared.gradients
    if gradients is not None and gradients[0] == Gradients.MATCH and SECOND_DRAW in gradients[1]:
        warnings.append(f"gradients: {gradients[1]}")
    if case.compared.profile_error:
        warnings.append(f"profiling the candidate failed: {case.compared.profile_error}")
    observed = case.reported.counted.forward_ops if case.reported.counted is not None else None
    if observed is not None and observed.error:
        warnings.append(f"observing the candidate's ATen operators failed: {observed.error}")
    return warnings


def _same_seed_cause(compared: Compared) -> str:
    """Why a same-seed construction differs, said only when the checks show it: every call on the
    reference's weights (transplanted) matched, so the model computes the same thing from the same
    state, and what differs is the state it builds. A wrong kernel differs for its own reason."""
    transplanted = not compared.own_weights and compared.outcome.failure is None
    if transplanted and compared.checks and all(c.passed for c in compared.checks):
        return "; its calls on the reference's weights match, so it builds other weights or buffers under the same seed"
    return ""


def findings(case: Case, status: Status) -> tuple[list[Finding], Integrity]:
    """The integrity findings on a candidate's evaluation (before the sanitizer and the timing
    comparison add theirs), and the evidence they were read from."""
    compared, rules, reported = case.compared, case.rules, case.reported
    gradients, profile = compared.gradients, compared.profile
    found: list[Finding] = []
    if gradients is not None and gradients[0] != Gradients.MATCH:
        found.append((Code.WRONG_GRADIENTS if gradients[0] == Gradients.MISMATCH else Code.FORWARD_ONLY, gradients[1]))
    found.extend(reported.scanned)
    found.extend(_precision_findings(case, status))
    counted = reported.counted
    extension_calls = dict(counted.checked) if counted is not None else {}
    share, kernels = integrity.own_kernels(
        profile, case.reference.profile.profile, set(reported.declared), rules.own_share_floor
    )
    found.extend(kernels)
    # no profile on the CPU: the extensions' counted calls and the ATen operators are the evidence
    if case.device == Device.CPU and status is Status.CORRECT:
        uncalled = integrity.extension_use(extension_calls if counted is not None else None)
        found.extend(
            uncalled
            or integrity.reference_ops(
                counted.forward_ops if counted is not None else None,
                case.reference.profile.forward_ops,
                extension_calls,
            )
        )
    found.extend(integrity.side_work(profile, reported.threads))
    if compared.unsafe:
        found.append((Code.UNSAFE_MEMORY, compared.unsafe))
    if compared.lazy:
        found.append((Code.LAZY_OUTPUT, compared.lazy))
    if compared.own_weights and rules.weights == WeightSource.TRANSPLANT:
        found.append(
            (
                Code.WEIGHTS_BY_SEED,
                (
                    "the reference's weights load into ModelNew neither by name nor by position "
                    f"({reported.weights_why or 'the worker kept its own'}); "
                    "it was checked with the weights it built under the shared seed, at their default "
                    "initialisation: checked less"
                )[:600],
            )
        )
    evidence = Integrity(
        profile=profile,
        custom_kernel_share=share,
        forward_ops=counted.forward_ops if counted is not None else None,
        extension_calls=extension_calls,
        timed_extension_calls=dict(counted.timed) if counted is not None else {},
    )
    return found, evidence


def _precision_findings(case: Case, status: Status) -> list[Finding]:
    """A failed candidate's tolerance failure that is TF32's error (below-float32); else an error against
    float64 over check.precision_ratio times the reference's on the precision call (less-precise)."""
    compared, rules = case.compared, case.rules
    precision = compared.precision
    if status is Status.INCORRECT:
        failed = next((c for c in compared.checks if not c.passed), None)
        below = integrity.tolerance_below_float32(failed, precision, rules.precision_ratio, rules.allow_tf32)
        if below:
            return below
    if not precision or precision.get("failed"):  # a failed call's figures: its check says what went wrong
        return []
    if precision["candidate"] <= max(rules.precision_ratio * precision["reference"], PRECISION_FLOOR):
        return []
    return [
        (
            Code.LESS_PRECISE,
            (
                f"relative error {precision['candidate']:.2g} against a float64 reference, "
                f"where the float32 reference has {precision['reference']:.2g} (over "
                f"check.precision_ratio={rules.precision_ratio:g}x); "
                "it passes the tolerance, but look for lower-precision arithmetic (TF32, fp16, bf16)"
            ),
        )
    ]


def decide(case: Case) -> Verdict:
    """The first stage: the checks' verdict, then the integrity findings under their policies.
    The sanitizer (when wanted) runs only on a candidate this leaves correct."""
    status, reason = checked(case)
    warnings = first_warnings(case)
    found, evidence = findings(case, status)
    status, reason, flags = decide_flags(status, reason, found, case.rules.policies)
    failing = next((f for f in flags if f.code == Code.BELOW_FLOAT32.value and f.policy == Policy.FAIL), None)
    if status is Status.INCORRECT and failing is not None:  # the float32 tolerance failed it by reduced precision
        status, reason = Status.LESS_PRECISE, f"{failing.code}: {failing.reason}"
    checks = [*case.compared.checks, case.compared.same_seed]
    notes = tuple(dict.fromkeys(c.note for c in checks if c is not None and c.note))
    return Verdict(status, reason, flags, tuple(warnings), Timing(), None, evidence, notes)


def settle(case: Case, first: Verdict, unsafe: list[Finding]) -> Verdict:
    """The second stage: the sanitizer's findings (`unsafe`, [] when it did not run), then, for a
    candidate still correct and timed, its timing compared (`compare_times`) with its findings (its
    speeds and notes are dropped when they fail it), the log-size warning, and `stricter`."""
    compared, policies = case.compared, case.rules.policies
    status, reason, flags = first.status, first.reason, first.flags
    status, reason, unsafe_flags = decide_flags(status, reason, unsafe, policies)
    flags += unsafe_flags
    warnings = list(first.warnings)
    timing, notes = Timing(), first.notes
    if status is Status.CORRECT and compared.timing is not None and compared.paired is not None:
        measured, timing_notes, more, timed = compare_times(
            compared.timing, compared.paired, compared.profile, case.reference, case.rules, case.device
        )
        timed = timed + integrity.below_float32(
            compared.timing.median_ms,
            case.reference.profile.speed_of_light,
            compared.precision,
            case.rules.precision_ratio,
            case.rules.allow_tf32,
        )
        warnings.extend(more)
        status, reason, timed_flags = decide_flags(status, reason, timed, policies)
        flags += timed_flags
        if status is Status.CORRECT:
            timing, notes = measured, notes + timing_notes
    if status is Status.CORRECT:
        timing = dataclasses.replace(timing, stats=compared.timing)
    stricter = stricter_than_kernelbench(
        status,
        compared.checks,
        case.calls,
        compared.same_seed,
        flags,
        case.randomize_weights and not compared.own_weights,
    )
    log_bytes, log_kib = compared.outcome.log_bytes, case.rules.log_kib
    if log_bytes > log_kib << 10:
        warnings.append(f"printed {log_bytes} bytes; the log keeps the first and last {log_kib // 2} KiB")
    return Verdict(status, reason, flags, tuple(warnings), timing, stricter, first.evidence, notes)


# -- the timing compared ------------------------------------------------------------------------------------

CLOCK_TOLERANCE = 0.05  # SM clocks further apart than this between two timings are reported


def compare_times(
    timing: TimingStats,
    paired: PairedSpeedup,
    profile: Optional[CallProfile],
    reference: ReferenceRecord,
    rules: VerdictRules,
    device: str = Device.CUDA,
) -> Comparison:
    """Speedups over the eager reference (from the paired rounds) and over each baseline (the
    candidate's paired speedup over the baseline's, when both were timed under the same protocol),
    % of speed-of-light, the warnings a reader needs to trust (or distrust) those numbers, and the
    implausible-time findings."""
    median = timing.median_ms
    reference_ms = paired.reference.median_ms
    warnings = timing_warnings(timing, rules, profile)
    if paired.reference.hold_ended and not timing.hold_ended:
        warnings.append(hold_ended_warning(paired.reference, "the reference's"))
    usable = [
        (b.name, b.timing, b.paired)
        for b in reference.timing.baselines
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
    called = reference.profile.profile
    bound, share = called.launch_bound() if called is not None else (False, "")
    if timing.timing_mode == TimingMode.EAGER and bound:
        warnings.append(
            f"the reference is launch-bound ({share}): this speedup measures host launch overhead as much as GPU "
            "work; timing.mode=graph times both sides without it"
        )
    sol = reference.profile.speed_of_light
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
        rules.max_plausible_speedup,
        rules.impossible_below,
        device,
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


def hold_ended_warning(timing: TimingStats, whose: str) -> str:
    return (
        f"{whose} hold ended: a batch of timed regions was still late behind the longest spin ({timing.held_ms:.1f} "
        "ms), so the regions after it were timed unheld and may include waits for the host's launches; quiet the "
        "host (builds, other runs) and compare only runs without this warning"
    )


def timing_warnings(timing: TimingStats, rules: VerdictRules, profile: Optional[CallProfile] = None) -> list[str]:
    """What a reader must know about one timing, each with what to do about it."""
    warnings = []
    if timing.rse > rules.target_rse:
        warnings.append(
            f"timing did not settle: relative standard error {timing.rse:.1%} after {timing.n} calls (stopped by "
            f"{timing.stopped_by}); raise timing.budget_s or quiet the machine"
        )
    if timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > rules.unstable_iqr:
        advice = (
            "stop other work on this GPU, check the clocks, or use timing.mode=graph if the call is launch-bound"
            if timing.timer == "cuda_events"
            else "stop other work on this machine (its CPU is the device)"
        )
        spread = timing.iqr_ms / timing.median_ms
        warnings.append(f"unstable timing: the interquartile range is {spread:.0%} of the median; {advice}")
    slowed = slowdown_reasons(timing.clock_event_reasons)
    if slowed:
        warnings.append(
            f"the GPU was slowing its clocks when timing ended ({', '.join(slowed)}): timings vary with power and "
            "temperature; compare only runs taken under the same conditions, and repeat to see the spread"
        )
    if timing.hold_ended:
        warnings.append(hold_ended_warning(timing, "the"))
    if timing.fallback:
        warnings.append(timing.fallback)
    if timing.sync_reason:
        warnings.append(f"timed with a device-wide synchronise because {timing.sync_reason}")
    if profile is not None and timing.timing_mode == TimingMode.EAGER and profile.launch_bound()[0]:
        warnings.append(
            f"launch-bound: its kernels keep the GPU busy for {profile.kernel_ms / profile.span_ms:.0%} of its "
            "call's GPU span; the rest is host overhead between launches; timing.mode=graph times it without the "
            "launch gaps"
        )
    return warnings


# -- stricter than KernelBench ---------------------------------------------------------------------------------
# Which of our checks failed a candidate that KernelBench's own check would have passed.
#
# KernelBench (its v0 and v0.1 eval) builds both models under one seed, calls each in train mode on
# `get_inputs()` under a few seeds, and compares the outputs with allclose(atol = rtol = 1e-2). Our
# default checks more: a tighter tolerance, redrawn inputs, eval mode, repeats, another size, redrawn
# weights, buffers, the timed output, integrity flags, guard bands. A failed record names the first
# of those that made the difference, with a stable code and the figures, so a verdict read beside
# KernelBench's says "stricter: tolerance, max abs error 4.7e-4" rather than a bare `incorrect`.
#
# A pure function of the record's evidence and the plan's calls; `verdict` calls it.


class StricterCheck(Vocabulary):
    """The stable codes: one per check of ours that KernelBench does not make."""

    TOLERANCE = "tolerance"  # the output is within allclose(1e-2) but outside our float tolerance
    REDRAWN_INPUTS = "redrawn-inputs"  # a trial whose floating inputs were redrawn (normal, signed, shifted)
    EVAL_MODE = "eval-mode"  # a call in eval mode: KernelBench calls both models as built, in train mode
    REPEAT = "repeat"  # the same inputs again after every trial
    OTHER_SIZE = "other-size"  # the trial at another input size
    REDRAWN_WEIGHTS = "redrawn-weights"  # right with the initial weights (same-seed check), wrong with redrawn ones
    BUFFERS = "buffers"  # module state after the calls (BatchNorm running statistics)
    TIMED_OUTPUT = "timed-output"  # the output of the last timed call
    MUTATED_INPUT = "mutated-input"  # an input changed by the call
    FLAG = "flag"  # an integrity flag with policy fail (its code follows: "flag:no-custom-kernel")


# The checks of ours that are not planned calls, by kind (protocol.CHECK_NAMES): their code, and what KernelBench does
# instead.
NOT_CALLS: dict[CheckKind, tuple[StricterCheck, str]] = {
    CheckKind.BUFFERS: (StricterCheck.BUFFERS, "KernelBench compares outputs only"),
    CheckKind.TIMED: (StricterCheck.TIMED_OUTPUT, "KernelBench does not check what its timed calls return"),
}


def stricter_than_kernelbench(
    status: Status,
    checks: Sequence[CheckResult],
    calls: Sequence[Call],
    same_seed: Optional[CheckResult],
    flags: Sequence[Flag],
    redrawn_weights: bool,
) -> Optional[Stricter]:
    """The check of ours that failed this record where KernelBench's would not have, or None: the
    record is correct, or KernelBench's check fails it too (or cannot be told from the evidence)."""
    if status is Status.CORRECT:
        return None
    failed_check = bool(checks) and not checks[-1].passed
    failing = next((f for f in flags if f.policy == Policy.FAIL), None)
    # below-float32 on a failed check names that check's error: KernelBench's tolerance decides as it does for it
    if failing is not None and not (failing.code == Code.BELOW_FLOAT32.value and failed_check):
        return Stricter(f"{StricterCheck.FLAG.value}:{failing.code}", failing.reason[:200])
    if status is Status.MUTATED_INPUT:
        return Stricter(StricterCheck.MUTATED_INPUT.value, "KernelBench does not look at the inputs after a call")
    if status not in (Status.INCORRECT, Status.LESS_PRECISE) or not failed_check:
        return None
    check = checks[-1]  # a failing check ends the worker: it is the last one made
    within = "within KernelBench's atol = rtol = 1e-2"  # compare.KERNELBENCH_TOLERANCE, which set within_kernelbench
    loose = f"; max abs error {check.max_abs_error:.2e}, {within}" if check.within_kernelbench else ""
    kind = check_kind(check)
    if kind in NOT_CALLS:
        code, why = NOT_CALLS[kind]
        return Stricter(code.value, why + loose)
    if kind is not CheckKind.CALL or len(checks) > len(calls):
        return None
    call = calls[len(checks) - 1]
    if call.distribution != Distribution.GIVEN:
        return Stricter(StricterCheck.REDRAWN_INPUTS.value, f"{check.name}: KernelBench runs get_inputs() only" + loose)
    if call.other_size:
        return Stricter(StricterCheck.OTHER_SIZE.value, f"{check.name}: KernelBench runs one size" + loose)
    if call.repeat:
        return Stricter(StricterCheck.REPEAT.value, f"{check.name}: KernelBench calls once per trial" + loose)
    if call.module_mode == ModuleMode.EVAL:
        return Stricter(
            StricterCheck.EVAL_MODE.value, f"{check.name}: KernelBench calls both models in train mode" + loose
        )
    if check.within_kernelbench:
        return Stricter(
            StricterCheck.TOLERANCE.value,
            f"{check.name}: max abs error {check.max_abs_error:.2e}, max rel error {check.max_rel_error:.2e}; {within}",
        )
    if redrawn_weights and same_seed is not None and (same_seed.passed or same_seed.within_kernelbench):
        return Stricter(
            StricterCheck.REDRAWN_WEIGHTS.value,
            f"{check.name}: right with the weights both models were built with, wrong with redrawn ones",
        )
    return None
