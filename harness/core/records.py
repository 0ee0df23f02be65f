"""Records are data: frozen dataclasses, validated at construction, stored as JSON lines.

Every summary (leaderboard, CSV, markdown) is a view computed from these records; raw timing
samples are kept so later statistics can be recomputed.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import statistics
import types
import typing
from typing import Any, Iterable, Optional

from harness import __version__
from harness.core.status import Status, Vocabulary

# the start of every failed graph check's reason
OUTSIDE_CAPTURE = "launches outside the capturing stream: timed eagerly"

# 2: timing protocol fields, profiles, baselines, speed-of-light, run end; 3: paired rounds, null floor; 4: flags,
# sanitizer runs; 5: a candidate in parts; 6: a reference in parts, a timing's mode named timing_mode; 7: a
# candidate's build ahead (provenance.ahead), a build found changed (builds[].tampered); 8: the hold graph
# replays are timed behind (held_ms, host_waits); 9: a hold that ended (hold_ended); 10: a build ahead given the
# precompiled header (provenance.ahead.header)
SCHEMA_VERSION = 10


def to_dict(obj: Any) -> Any:
    """Plain JSON-ready data from a record (enums by value, tuples as lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)  # JSON has no inf/nan; "inf", "nan" read back through float()
    return obj


def from_dict(cls: type, data: Any) -> Any:
    """Rebuild a record (and its nested records) from `to_dict` output."""
    return _convert(cls, data)


def _convert(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner, value)
    if origin is tuple:
        (inner, _) = typing.get_args(tp)
        return tuple(_convert(inner, v) for v in value)
    if origin is dict:
        key_type, val_type = typing.get_args(tp)
        return {key_type(k): _convert(val_type, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a dataclass type, never an instance
        hints = typing.get_type_hints(tp)
        fields = dataclasses.fields(tp)
        unknown = set(value) - {f.name for f in fields}
        if unknown:
            raise ValueError(f"{tp.__name__}: unknown fields {sorted(unknown)}")
        # computed by the record itself (a timing's statistics): never read back
        derived = {f.name for f in fields if not f.init}
        return tp(**{name: _convert(hints[name], v) for name, v in value.items() if name not in derived})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float and value is not None:
        return float(value)
    return value


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Summary of one timed callable, with the raw samples it was computed from.

    The statistics are derived: computed from the samples when the record is built or read (a line's
    stored statistics are written for readers of the file, never read back). They are taken over
    the samples minus `overhead_ms` when `overhead_subtracted` (never below zero); `samples_ms`
    stays as measured.
    """

    samples_ms: tuple[float, ...]  # every timed call, in order, milliseconds, as measured
    median_ms: float = dataclasses.field(init=False)  # median (of the corrected samples)
    q1_ms: float = dataclasses.field(init=False)  # 25th percentile
    q3_ms: float = dataclasses.field(init=False)  # 75th percentile
    mean_ms: float = dataclasses.field(init=False)  # arithmetic mean
    std_ms: float = dataclasses.field(init=False)  # sample standard deviation (0 for a single sample)
    min_ms: float = dataclasses.field(init=False)  # fastest
    # relative standard error of the median (approximated as 1.2533*std/sqrt(n)/median)
    rse: float = dataclasses.field(init=False)
    timer: str  # "cuda_events" or "perf_counter"
    warmup_calls: int  # untimed calls made before sampling
    stopped_by: str  # why sampling stopped: "target_rse", "budget" or "max_reps"
    timing_mode: str = "eager"  # "eager" calls or "graph" replays (CUDA graphs)
    sync: str = "stream"  # end taken on the calling stream, or after a device-wide synchronise ("device")
    sync_reason: str = ""  # why "device" was chosen when the config said auto
    fallback: str = ""  # why the configured mode could not be used (e.g. graph capture failed)
    overhead_ms: float = 0.0  # median of an empty timed region under the same protocol
    overhead_subtracted: bool = False  # statistics are over samples minus overhead_ms
    input_sets: int = 1  # distinct input sets the calls rotated over
    flush_bytes: int = 0  # bytes written before every timed call to flush the L2 cache (0: no flush)
    sm_clock_mhz: Optional[float] = None  # SM clock read right after sampling, when readable
    clock_event_reasons: str = ""  # the driver's active clock-event (throttle) reasons then, e.g. "0x0000000000000004"
    l2_reset: bool = False  # CUDA: the persisting-L2 limit was reset to 0 (and read back as 0) before every timed call
    # the largest persisting-L2 limit (bytes) set during the sampling, found before a timed call and reset
    l2_persisting_found: int = 0
    held_ms: float = 0.0  # the longest spin a batch of timed regions was queued behind (0: not held)
    host_waits: int = 0  # held regions dropped: the GPU had reached their start before the host queued their call
    hold_ended: bool = False  # a batch was late behind the longest spin: the regions after it were timed unheld

    def __post_init__(self) -> None:
        if not self.samples_ms:
            raise ValueError("TimingStats needs at least one sample")
        if any(s < 0 or not math.isfinite(s) for s in self.samples_ms):
            raise ValueError("timing samples must be finite and non-negative")
        samples = self.corrected_samples()
        median = statistics.median(samples)
        if len(samples) >= 2:
            q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
            std = statistics.stdev(samples)
        else:
            q1 = q3 = median
            std = 0.0
        derived = {
            "median_ms": median,
            "q1_ms": q1,
            "q3_ms": q3,
            "mean_ms": statistics.fmean(samples),
            "std_ms": std,
            "min_ms": min(samples),
        }
        for name, value in {**derived, "rse": relative_standard_error_of_median(samples)}.items():
            object.__setattr__(self, name, value)

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def corrected_samples(self, overhead_ms: Optional[float] = None) -> list[float]:
        """The samples the statistics are over: less the overhead (this timing's own, or `overhead_ms`,
        one shared with another timing) when it is subtracted, never below zero; else as measured."""
        if not self.overhead_subtracted:
            return list(self.samples_ms)
        return minus_overhead(self.samples_ms, self.overhead_ms if overhead_ms is None else overhead_ms)

    @classmethod
    def from_samples(
        cls,
        samples_ms: list[float],
        *,
        timer: str,
        warmup_calls: int,
        stopped_by: str,
        overhead_ms: float = 0.0,
        subtract: bool = False,
        **protocol: Any,
    ) -> "TimingStats":
        raw = tuple(float(s) for s in samples_ms)
        return cls(
            samples_ms=raw,
            timer=timer,
            warmup_calls=warmup_calls,
            stopped_by=stopped_by,
            overhead_ms=overhead_ms,
            overhead_subtracted=subtract,
            **protocol,
        )


def minus_overhead(samples_ms: Iterable[float], overhead_ms: float) -> list[float]:
    """Each sample less a fixed overhead (an empty timed region's time), never below zero."""
    return [max(s - overhead_ms, 0.0) for s in samples_ms]


def relative_standard_error_of_median(samples: list[float]) -> float:
    """Standard error of the median over the median (normal approximation); inf below 2 samples.
    Plain float arithmetic: the timer calls this between batches and must not keep the GPU waiting."""
    n = len(samples)
    if n < 2:
        return math.inf
    ordered = sorted(samples)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    if median <= 0:
        return math.inf
    mean = math.fsum(samples) / n
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in samples) / (n - 1))
    return 1.2533 * std / math.sqrt(n) / median


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """GPU activity of one kind (kernel name, memcpy or memset) in a profiled call."""

    name: str  # kernel name as the profiler reports it (truncated to 200 characters)
    count: int  # launches in the call
    total_ms: float  # summed durations


# a reference whose kernels keep the GPU busy for less than this share of their span is launch-bound
GPU_BUSY_SHARE = 0.8


@dataclasses.dataclass(frozen=True)
class CallProfile:
    """One call under the profiler (CUPTI): which GPU work ran, on which streams, and when."""

    kernel_ms: float  # sum of the durations of the call's GPU activities (kernels, copies, memsets)
    span_ms: float  # first start to last end of those activities
    launches: int  # GPU activities in the call
    streams: int  # distinct streams they ran on (the calling stream included)
    after_return: int  # GPU activities launched after forward returned
    kernels: tuple[KernelTime, ...] = ()  # by name, longest total first (at most 20)
    busy_after_return: int = 0  # activities of the call still running when the calling stream had drained

    def launch_bound(self) -> tuple[bool, str]:
        """Whether the reference's call is launch-bound, and the measurement that says so (or not).

        Measured on its profiled call, run alone on an idle GPU: the span of its GPU work (first start
        to last end) against the time its kernels keep the GPU busy. The rest of the span is the GPU
        waiting for the host to launch the next kernel. When that idle share is over a fifth, an eager
        timing measures the host's launch overhead as much as the GPU's work, and CUDA graphs time
        the GPU alone. A single kernel, however short, leaves no gap: the timer queues it behind the
        L2 flush, so eager timing sees the kernel itself. (False, "") when nothing was measured."""
        if not self.launches or self.span_ms <= 0:
            return False, ""
        busy = min(self.kernel_ms / self.span_ms, 1.0)
        seen = (
            f"the reference's kernels keep the GPU busy for {busy:.0%} of its profiled call's "
            f"{self.span_ms * 1e3:.0f} us span in {self.launches} launches"
        )
        if self.launches > 1 and busy < GPU_BUSY_SHARE:
            return True, f"{seen} (launch-bound: the host launches slower than the GPU runs)"
        return False, f"{seen} (not launch-bound)"


@dataclasses.dataclass(frozen=True)
class OpCount:
    """One ATen compute operator of an observed forward, by name (harness.device.profile.observe_ops)."""

    name: str  # as the profiler names it, e.g. "aten::addmm"
    count: int  # runs in the call
    inside: int = 0  # of those, dispatched from inside a call of one of the model's extension functions


@dataclasses.dataclass(frozen=True)
class ForwardOps:
    """The ATen operators one forward ran on the CPU (torch's profiler), where CUDA has the kernel
    profile: the compute operators (innermost, not views, copies or allocations: harness.core.integrity.is_compute)."""

    compute: tuple[OpCount, ...] = ()  # by name
    # the other ATen operators it ran: views, copies, allocations, and those that only called compute ones
    other: int = 0
    call: int = -1  # the planned call observed (harness.device.profile.observed_call)
    error: str = ""  # why the forward could not be observed ("" when it was)


@dataclasses.dataclass(frozen=True)
class PairedSpeedup:
    """A speedup from rounds timed in turns under one protocol: the reference (by the lane's judge)
    and a compared model (by its worker), so drift in clocks, power and host load cancels."""

    speedup: float  # median over the rounds of (reference round median / compared round median)
    low: float  # bootstrap 95% interval of that median (resampling rounds)
    high: float
    rounds: int  # paired rounds
    protocol: str  # the timing protocol both sides used, e.g. "eager, stream sync"
    ratios: tuple[float, ...]  # each round's ratio, in order
    reference: TimingStats  # the reference's samples over all its rounds

    def __post_init__(self) -> None:
        if not self.ratios or any(r <= 0 or not math.isfinite(r) for r in self.ratios):
            raise ValueError("a paired speedup needs positive, finite round ratios")
        if not self.low <= self.speedup <= self.high:
            raise ValueError("a paired speedup lies inside its interval")


@dataclasses.dataclass(frozen=True)
class NullFloor:
    """The built-in null candidate: the problem's own Model, run through the candidate path and
    timed against the reference. Identical code: its speedup is what 1.00x reads as in this run."""

    status: str  # the null candidate's status ("correct", or why it failed)
    reason: str
    paired: Optional[PairedSpeedup] = None  # its paired timing, when it was correct and timed

    @property
    def speedup(self) -> Optional[float]:
        return self.paired.speedup if self.paired is not None else None


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A baseline (e.g. torch.compile of the reference), run in a worker of its own and timed in turns
    with the eager reference."""

    name: str  # e.g. "torch.compile(default)"
    ok: bool  # compiled, matched the eager outputs and was timed
    reason: str  # one line: "ok" or why it could not be used
    timing: Optional[TimingStats] = None
    compile_seconds: Optional[float] = None  # wall time of the first (compiling) call
    max_abs_error: Optional[float] = None  # against the eager reference on the same inputs
    paired: Optional[PairedSpeedup] = None  # timed in turns with the eager reference: its speedup over eager


@dataclasses.dataclass(frozen=True)
class SpeedOfLight:
    """The roofline floor of one problem on one device: no implementation can run much faster."""

    flops: int  # floating-point operations of one forward (matmul/conv, torch.utils.flop_counter)
    min_bytes: int  # inputs read once + outputs written once + parameters and buffers read once
    dtype: str  # the dtype the peaks were measured for
    peak_tflops: float  # measured matrix-multiply rate on this device for dtype (TFLOP/s)
    peak_gbps: float  # measured device-to-device copy bandwidth, bytes read + written (GB/s)
    floor_ms: float  # max(flops / peak rate, bytes / peak bandwidth): the roofline of the reference's algorithm
    bound: str  # "compute" or "memory": the larger term
    peaks_source: str = ""  # where the peaks came from: "measured" now or the cache file

    @property
    def compute_ms(self) -> float:
        """The reference algorithm's FLOPs at the measured matrix-multiply rate for its dtype (0 when unknown)."""
        return self.flops / (self.peak_tflops * 1e12) * 1e3 if self.peak_tflops > 0 and self.flops > 0 else 0.0

    @property
    def bytes_ms(self) -> float:
        """The hard floor: the problem's fewest bytes at peak bandwidth, whatever the algorithm."""
        return self.min_bytes / (self.peak_gbps * 1e9) * 1e3 if self.peak_gbps > 0 else 0.0

    @property
    def flops_ms(self) -> float:
        """A soft floor: the reference's FLOP count at peak rate. Another algorithm may need fewer
        (diag(A) @ B as a row scaling), so going below it is faster than the reference's algorithm."""
        return self.flops / (self.peak_tflops * 1e12) * 1e3 if self.peak_tflops > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One comparison of candidate outputs against the reference's for the same inputs."""

    name: str  # what was compared, e.g. "trial 2 (train)" or "same-seed construction (eval)"
    passed: bool  # every output matched: count, type, shape, dtype, NaN/Inf positions, values
    reason: str  # one line: "ok" or what differed first
    max_abs_error: Optional[float] = None  # max |candidate - reference| over finite elements
    max_rel_error: Optional[float] = None  # max |candidate - reference| / |reference| (reference != 0)
    mismatch_fraction: Optional[float] = None  # fraction of elements outside atol + rtol*|reference|
    # a failed value comparison that allclose(atol = rtol = 1e-2), KernelBench's, passes
    within_kernelbench: Optional[bool] = None
    # what a reader should know of a comparison that did not fail on it: an output that is rounding noise, an inert
    # buffer that differs
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Stricter:
    """The check of ours that failed a candidate KernelBench's own check would have passed
    (harness/parent/verdict.py)."""

    # a stable code: tolerance | redrawn-inputs | eval-mode | repeat | other-size | redrawn-weights | buffers |
    # timed-output | mutated-input | flag:<flag code>
    code: str
    detail: str  # one line, with the figures (e.g. the error and KernelBench's tolerance)


@dataclasses.dataclass(frozen=True)
class ExtensionBuild:
    """One load_inline call made by the candidate, as the content-addressed build cache saw it."""

    name: str  # the extension name the candidate asked for
    cache_key: str  # hash of sources, flags, torch version and device arch: the build folder name
    cached: bool  # True when a finished build was found and nothing was compiled
    seconds: float  # wall time of the load_inline call
    # why a finished build was not loaded but made again: its libraries differed from their recorded digest
    tampered: str = ""


class AheadOutcome(Vocabulary):
    """How a candidate's build ahead (harness.parent.prebuild, in a CPU pool before its lane takes it) ended."""

    NONE = "none"  # no build pool in this run (builds.ahead never, a CPU run, or Ray's own build tasks)
    BUILT = "built"  # its extensions were compiled, or found compiled, in the build cache
    NOTHING = "nothing"  # its import (and its constructor, with builds.construct) built no extension
    FAILED = "failed"  # the build process reported a failure (its status and reason in the detail)
    TIMEOUT = "timeout"  # the build ran past timeouts.load and was ended
    SKIPPED = "skipped"  # the pool never built it (the detail says why)


@dataclasses.dataclass(frozen=True)
class AheadBuild:
    """What the build pool did with a candidate before its lane took it."""

    outcome: AheadOutcome = AheadOutcome.NONE  # how it ended
    detail: str = ""  # the build process's one line (its extensions, or its status and reason), or why skipped
    seconds: float = 0.0  # wall time of the build process, time spent stopped by the quiet host aside
    # the build process was given the precompiled torch/extension.h (harness.parent.pch): gcc used it for main.cpp
    # where the candidate's own C++ flags matched the header's
    header: bool = False

    @property
    def went_wrong(self) -> bool:
        """Whether the pool tried and did not finish the build (the lane then builds, if it can)."""
        return self.outcome in (AheadOutcome.FAILED, AheadOutcome.TIMEOUT, AheadOutcome.SKIPPED)


@dataclasses.dataclass(frozen=True)
class Flag:
    """One integrity finding on a candidate (harness/core/flags.py)."""

    code: str  # a stable code, e.g. "no-custom-kernel"
    policy: str  # fail | flag: what it did to the verdict (ignored findings are not kept)
    reason: str  # one line: the evidence


class SanitizerOutcome(Vocabulary):
    """How one compute-sanitizer tool's check of a candidate ended."""

    CLEAN = "clean"  # the forward completed and the tool reported no error
    ERRORS = "errors"  # the tool reported errors: the flag unsafe-memory
    FAILED = "failed"  # the forward did not complete under the tool
    TIMEOUT = "timeout"  # no verdict within sanitizer.timeout
    SKIPPED = "skipped"  # not run: no tool found, or not a CUDA run


@dataclasses.dataclass(frozen=True)
class SanitizerResult:
    """One compute-sanitizer tool's check of one small forward of a candidate."""

    tool: str  # memcheck | racecheck | initcheck | synccheck
    outcome: SanitizerOutcome  # how it ended (a plain string is read as one)
    detail: str  # the first error and its kernel, the error count, or why it failed or was skipped
    seconds: float = 0.0  # wall time under the tool

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", SanitizerOutcome(self.outcome))


@dataclasses.dataclass(frozen=True)
class Identity:
    """What was judged, where and in which run."""

    run_id: str  # the run this record belongs to
    problem: str  # problem name (file stem)
    problem_hash: str  # sha256 of the problem file
    candidate: str  # candidate name (file stem)
    candidate_path: str  # the evaluated file (or the raw completion when extraction failed)
    candidate_hash: str  # sha256 of that file
    device: str  # "cuda" or "cpu"
    lane: str = ""  # where it ran when a run uses several: "cuda:1" (a visible GPU), "host/cuda:0" (Ray)


@dataclasses.dataclass(frozen=True)
class Decision:
    """The verdict, and what a reader must know beside it."""

    status: Status  # the verdict, from one closed set
    reason: str  # one human-readable line explaining the status
    # failed by a check of ours that KernelBench's would have passed: which, and why
    stricter: Optional[Stricter] = None
    warnings: tuple[str, ...] = ()  # things to look at that do not change the status
    # information that is neither a warning nor a flag (a faster algorithm than the reference's)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            raise ValueError(f"status must be a Status, got {self.status!r}")
        if not self.reason or "\n" in self.reason:
            raise ValueError("reason must be one non-empty line")


@dataclasses.dataclass(frozen=True)
class Checks:
    """How its outputs compared with the reference's, and on which weights."""

    results: tuple[CheckResult, ...] = ()  # weight-copied calls, buffers and the timed output, in the order they ran
    same_seed: Optional[CheckResult] = None  # both built after the same manual_seed; reported apart
    # where its checked weights came from: name | position | shape (the reference's, transplanted) | seed (its own,
    # same-seed)
    weights: str = ""
    # (ModelNew's name, the reference's) where the transplant paired renamed weights by position or shape
    weight_mapping: tuple[tuple[str, str], ...] = ()
    gradients: str = ""  # training parity: "match", "mismatch", "forward only"; "" when not checked

    @property
    def max_abs_error(self) -> Optional[float]:
        errors = [c.max_abs_error for c in self.results if c.max_abs_error is not None]
        return max(errors) if errors else None


@dataclasses.dataclass(frozen=True)
class Timing:
    """How fast it ran against the reference, the baselines and the speed of light (correct candidates only)."""

    stats: Optional[TimingStats] = None  # the candidate's forward, when it was timed
    reference_ms: Optional[float] = None  # median of the reference over its rounds paired with this candidate
    speedup: Optional[float] = None  # over the eager reference, from paired rounds (paired.speedup)
    paired: Optional[PairedSpeedup] = None  # the rounds timed in turns with the reference, its interval and protocol
    baseline_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # other baselines' medians, by name
    # over each baseline: speedup / the baseline's paired speedup
    speedups: dict[str, float] = dataclasses.field(default_factory=dict)
    sol_ms: Optional[float] = None  # the floor sol_fraction uses, on this device (sol_floor says which)
    sol_fraction: Optional[float] = None  # sol_ms / stats.median_ms: 1.0 is the speed of light
    # "roofline": the reference algorithm's (FLOPs and bytes); "bytes": the fewest bytes only, for a
    # candidate faster than the reference's algorithm allows
    sol_floor: str = ""


@dataclasses.dataclass(frozen=True)
class Integrity:
    """What it ran, as the harness saw it, and the flags raised on that evidence."""

    flags: tuple[Flag, ...] = ()  # integrity findings with the policy applied to each (harness/core/flags.py)
    # compute-sanitizer checks of one small forward (CUDA, correct candidates)
    sanitizer: tuple[SanitizerResult, ...] = ()
    profile: Optional[CallProfile] = None  # one profiled call (CUDA)
    custom_kernel_share: Optional[float] = None  # share of the profiled GPU time in the candidate's own kernels
    forward_ops: Optional[ForwardOps] = None  # the ATen operators of one checked forward (CPU), against the reference's
    # "extension.function" -> calls during the checked forward calls
    extension_calls: dict[str, int] = dataclasses.field(default_factory=dict)
    # the same during warm-up, profile and timed rounds
    timed_extension_calls: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Provenance:
    """How the record came about: builds, time spent, the log, when."""

    builds: tuple[ExtensionBuild, ...] = ()  # load_inline calls and cache hits
    ahead: AheadBuild = AheadBuild()  # the build pool's work on it before its lane took it
    # wall time per worker phase (timer, profile: parts of time)
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    wall_seconds: float = 0.0  # wall time of the whole evaluation, seen by the parent
    log_path: str = ""  # captured stdout/stderr of the worker, relative to the run folder
    finished_at: str = ""  # ISO-8601 time the record was written


@dataclasses.dataclass(frozen=True)
class CandidateRecord:
    """The verdict on one candidate for one problem in one run, in parts."""

    identity: Identity  # what was judged, where
    decision: Decision  # the verdict and its reason, warnings and notes
    checks: Checks = Checks()  # the output comparisons
    timing: Timing = Timing()  # speed (empty unless correct and timed)
    integrity: Integrity = Integrity()  # flags and the evidence behind them
    provenance: Provenance = Provenance()  # builds, time spent, log, when
    schema_version: int = SCHEMA_VERSION  # record layout version
    tool_version: str = __version__  # harness version that wrote the record

    def __post_init__(self) -> None:
        if self.timing.speedup is not None and self.decision.status is not Status.CORRECT:
            raise ValueError("only a correct candidate has a speedup")

    @property
    def key(self) -> tuple[str, str]:
        """(problem, candidate): what a later record of the same candidate replaces."""
        return self.identity.problem, self.identity.candidate


def finished_now() -> str:
    """The time a record is finished, as records keep it: ISO-8601, UTC, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def latest_per_candidate(records: Iterable[CandidateRecord]) -> dict[tuple[str, str], CandidateRecord]:
    """(problem, candidate) -> its latest record: a later record replaces an earlier one, keeping the
    place the pair was first seen in (the order a dict filled in record order has)."""
    latest: dict[tuple[str, str], CandidateRecord] = {}
    for record in records:
        latest[record.key] = record
    return latest


@dataclasses.dataclass(frozen=True)
class ReferenceIdentity:
    """Which problem a reference record is of, and where its reference ran."""

    run_id: str  # the run this record belongs to
    problem: str  # problem name
    problem_hash: str  # sha256 of the problem file
    problem_path: str  # the problem file
    device: str  # "cuda" or "cpu"
    device_name: str  # e.g. "NVIDIA H100 80GB HBM3" or the CPU model
    lane: str = ""  # the lane (GPU) this reference ran and was timed on; its candidates compare to it


@dataclasses.dataclass(frozen=True)
class ReferenceOutcome:
    """Whether the reference ran through the plan, and what its judge found on the way."""

    ok: bool  # the reference built, ran every call and (if asked) was timed
    reason: str  # one line: "ok" or why the reference failed
    notes: tuple[str, ...] = ()  # what the judge could not do (float64 twin) and judge restarts on this lane
    # the problem's HARNESS_* declarations, which override the config
    declared: dict[str, Any] = dataclasses.field(default_factory=dict)
    other_size: dict[str, Any] = dataclasses.field(default_factory=dict)  # module constants of the other-size trial
    other_size_note: str = ""  # why the other-size trial ran at the problem's own size, when it did
    # where the judge shares inputs and outputs with workers: "cuda" (device memory) or "host" (shared memory)
    data_plane: str = ""
    peak_bytes: int = 0  # the reference's peak device memory (host RSS on the CPU) through the plan


@dataclasses.dataclass(frozen=True)
class ReferenceProfile:
    """What the reference's call does on the device: its profile, its operators, its floor."""

    profile: Optional[CallProfile] = None  # one profiled call (CUDA)
    forward_ops: Optional[ForwardOps] = None  # the ATen operators of its forward on the call workers observe (CPU)
    speed_of_light: Optional[SpeedOfLight] = None  # the problem's roofline floor on this device
    # run id whose profiled call and speed-of-light the reference cache gave (timing.reuse_profile)
    profile_reused_from: str = ""


@dataclasses.dataclass(frozen=True)
class ReferenceTimes:
    """How the reference was timed on its lane, and what it was timed against."""

    # eager reference forward: its rounds paired with the null candidate (else the first baseline)
    stats: Optional[TimingStats] = None
    baselines: tuple[Baseline, ...] = ()  # torch.compile modes, each timed in a worker of its own
    # the built-in null candidate's speedup: this run's 1.00x (timing.null_candidate)
    null_floor: Optional[NullFloor] = None
    timing_mode: str = ""  # the problem's timing mode, eager or graph (timing.mode resolved once per problem)
    # the measurement that chose it under timing.mode auto (the reference's GPU busy share)
    timing_mode_reason: str = ""
    timing_reused_from: str = ""  # run id whose cached timings were reused (timing.reuse_reference)


@dataclasses.dataclass(frozen=True)
class ReferenceRecord:
    """The reference (problem `Model`) as evaluated in this run on one lane, in parts. Its provenance
    has no builds; its wall time is the reference's pass in its judge (start-up included; baselines
    and null candidate not), its phases where the pass's time went (the judge's start-up and phases,
    the baselines, the null candidate)."""

    identity: ReferenceIdentity  # which problem, where
    outcome: ReferenceOutcome  # whether it ran, and what its judge found
    profile: ReferenceProfile = ReferenceProfile()  # its call on the device
    timing: ReferenceTimes = ReferenceTimes()  # its timing and what it was timed against
    provenance: Provenance = Provenance()  # time spent, when
    schema_version: int = SCHEMA_VERSION  # record layout version
    tool_version: str = __version__  # harness version that wrote the record

    @property
    def ok(self) -> bool:
        """The reference ran through the plan (and was timed, when asked)."""
        return self.outcome.ok


@dataclasses.dataclass(frozen=True)
class RunHeader:
    """First line of a run's records file: what was run, where, and with which settings."""

    run_id: str  # folder name under results/
    started_at: str  # ISO-8601
    argv: tuple[str, ...]  # command line
    config: dict[str, Any]  # the validated, fully layered configuration
    environment: dict[str, Any]  # host, versions, GPU, git sha (collected once)
    schema_version: int = SCHEMA_VERSION  # record layout version
    tool_version: str = __version__  # harness version


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """Last line of a run's records file: the GPU's state at the end and what moved during the run."""

    run_id: str
    finished_at: str  # ISO-8601
    gpu_end: dict[str, Any]  # clocks, temperature, power, throttle reasons (empty without a GPU)
    sm_clocks_mhz: tuple[float, ...] = ()  # SM clock read after each timing of the run
    warnings: tuple[str, ...] = ()  # e.g. clocks moved during the run
    schema_version: int = SCHEMA_VERSION
    tool_version: str = __version__


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What a run wrote, as the session that ran it holds it (`api.Session.close()`): nothing
    needs to read its records file back."""

    references: tuple[ReferenceRecord, ...]  # every reference record, in the order written
    records: tuple[CandidateRecord, ...]  # every candidate record, in the order written
    end: RunEnd  # its last record


RECORD_KINDS: dict[str, type] = {
    "run": RunHeader,
    "reference": ReferenceRecord,
    "candidate": CandidateRecord,
    "end": RunEnd,
}
