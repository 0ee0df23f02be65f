"""Layered, validated configuration: configs/default.yaml < --config FILE < --set key=value.

The schema is the dataclasses below; a key they do not name is an error that lists the valid keys.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import Any, Optional

import yaml

from harness.core.errors import UserError
from harness.core.status import Vocabulary

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # harness/
# shipped with the package; configs/default.yaml in a checkout links to it
DEFAULT_CONFIG = PACKAGE_DIR / "default.yaml"
# The project root, which relative config paths (problems, solutions, results, caches) start from:
# the checkout the package sits in, or, for an installed package, the folder it was started in.
ROOT = (
    PACKAGE_DIR.parent
    if (PACKAGE_DIR.parent / "run.py").is_file() and (PACKAGE_DIR.parent / "configs").is_dir()
    else Path.cwd()
)


class Policy(Vocabulary):
    """flags.*: what an integrity flag does."""

    FAIL = "fail"
    FLAG = "flag"
    IGNORE = "ignore"


class ModuleMode(Vocabulary):
    """check.modes: the module mode of a planned call."""

    TRAIN = "train"
    EVAL = "eval"


class Distribution(Vocabulary):
    """check.input_distributions: how a trial's floating inputs are drawn."""

    GIVEN = "given"
    NORMAL = "normal"
    SIGNED = "signed"
    SHIFTED = "shifted"


class TimingMode(Vocabulary):
    """timing.mode."""

    EAGER = "eager"
    GRAPH = "graph"
    AUTO = "auto"


class SyncMode(Vocabulary):
    """timing.sync."""

    AUTO = "auto"
    STREAM = "stream"
    DEVICE = "device"


class QuietMode(Vocabulary):
    """timing.quiet (harness.parent.quiet)."""

    PAUSE = "pause"
    PIN = "pin"
    BOTH = "both"
    OFF = "off"


class CompileMode(Vocabulary):
    """baselines.compile_modes: torch.compile's modes."""

    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE = "max-autotune"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"


class Device(Vocabulary):
    """device (and the commands' --device)."""

    AUTO = "auto"
    CUDA = "cuda"
    CPU = "cpu"


class ExecutorKind(Vocabulary):
    """executor."""

    LOCAL = "local"
    RAY = "ray"


class Switch(Vocabulary):
    """sanitizer.enabled, timing.null_candidate."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class Ahead(Vocabulary):
    """builds.ahead, workers.prestart: do work ahead of its use."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class GradientPolicy(Vocabulary):
    """check.gradients."""

    FLAG = "flag"
    FAIL = "fail"
    OFF = "off"


class WeightSource(Vocabulary):
    """check.weights."""

    TRANSPLANT = "transplant"
    SEED = "seed"


class Boundary(Vocabulary):
    """sandbox.layer: what keeps a candidate's processes from writing outside their scratch (docs/integrity.md)."""

    AUTO = "auto"  # the strongest this machine offers: landlock, else mount, else hash
    LANDLOCK = "landlock"  # Landlock: writes only beneath the run's scratch, the build cache and /dev
    MOUNT = "mount"  # a private mount namespace with the trees bound read-only
    # no kernel boundary: the trees are fingerprinted around each candidate, a change restored and reported
    HASH = "hash"
    OFF = "off"  # nothing: a candidate can write wherever the user can


class SanitizerTool(Vocabulary):
    """sanitizer.tools: compute-sanitizer's tools."""

    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    INITCHECK = "initcheck"
    SYNCCHECK = "synccheck"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    atol: float  # absolute tolerance
    rtol: float  # relative tolerance
    norm: float = 0.0  # plus norm x rms(reference output): float32 rounding in another summation order grows with the
    # output's scale, so an element that cancels to near zero is judged against the output, not itself


DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)  # for a dtype check.tolerances does not name


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    trials: int  # fresh input sets per candidate
    modes: tuple[str, ...]  # module modes run on every trial, in order
    require_same_seed: bool  # same-seed construction mismatch fails the candidate
    allow_tf32: bool  # TF32 allowed in worker processes
    tolerances: dict[str, Tolerance]  # per output dtype name (e.g. "float32")
    input_distributions: tuple[str, ...]  # cycled over the trials: given | normal | signed | shifted
    repeats: int  # extra eval calls on trial 1's inputs after all trials (races, uninitialised reads)
    other_size: bool  # one more trial at another input size (HARNESS_EXTRA_SIZES, or batch_size // 2 + 1)
    randomize_weights: bool  # move the reference's parameters and buffers away from their default init
    max_plausible_speedup: float  # warn when a speedup over eager is above this
    precision_ratio: float  # warn when the error against float64 exceeds the reference's own by this factor
    # own-share-low: the candidate's own kernels take less than this share of the profiled GPU time
    own_share_floor: float
    # poisoned bytes around every input handed to a worker, checked after each call (writes past an input)
    guard_bands: bool
    gradients: str  # flag | fail | off: backward of the same loss must give the reference's gradients
    gradient_tolerance_factor: float  # gradients sum over the batch: their atol and rtol are the output's times this
    # transplant: ModelNew gets the reference's (redrawn) weights, by name, else by position, else
    # keeps its own same-seed ones (flag weights-by-seed); seed: always its own (KernelBench's way)
    weights: str = WeightSource.TRANSPLANT
    # the candidate's module starts with the problem file's globals (KernelBench's eval shares one namespace)
    problem_globals: bool = False
    # 0: every run draws its seeds in secret; another integer fixes them (the same draws in every run that sets it:
    # runs compared like with like; a candidate that knows them could be fitted to them, so each record warns)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError("check.trials must be at least 1")
        bad = [d for d in self.input_distributions if d not in Distribution.words()]
        if bad or not self.input_distributions:
            raise ValueError(
                f"check.input_distributions must be a non-empty list of {list(Distribution.words())}, got "
                f"{list(self.input_distributions)}"
            )
        if not 0 <= self.own_share_floor < 1:
            raise ValueError("check.own_share_floor must be in [0, 1)")
        if self.gradients not in GradientPolicy.words():
            raise ValueError(f"check.gradients must be flag, fail or off, got {self.gradients!r}")
        if self.weights not in WeightSource.words():
            raise ValueError(f"check.weights must be transplant or seed, got {self.weights!r}")
        if self.gradient_tolerance_factor < 1:
            raise ValueError("check.gradient_tolerance_factor must be 1 or more")
        if self.repeats < 0:
            raise ValueError("check.repeats must be 0 or more")
        if self.max_plausible_speedup <= 1:
            raise ValueError("check.max_plausible_speedup must be above 1")
        bad = [m for m in self.modes if m not in ModuleMode.words()]
        if bad or not self.modes:
            raise ValueError(
                f"check.modes must be a non-empty list of {list(ModuleMode.words())}, got {list(self.modes)}"
            )


@dataclasses.dataclass(frozen=True)
class FlagPolicies:
    """What each integrity flag does (harness/core/flags.py): fail | flag | ignore. The gradient flags
    (wrong-gradients, forward-only) take check.gradients."""

    no_custom_kernel: str  # none of its own kernels ran: a torch pass-through
    # every kernel (CPU: ATen compute operator) of the reference's call ran too; its own kernels only add to it
    wraps_reference: str
    own_share_low: str  # its own kernels are under check.own_share_floor of the GPU time
    side_stream: str  # work on other streams or threads, or still running when forward returned
    tamper_suspect: str  # source that reaches into the process or device settings; a persisting-L2 limit found set
    fallback: str  # forward catches exceptions
    less_precise: str  # more error against float64 than the reference's own, within the tolerance
    implausible_time: str  # below the bytes floor, also when re-timed eagerly with device sync
    suspect_time: str  # below the call's own profiled GPU time, or over max_plausible_speedup
    unsafe_memory: str  # a write into an input's guard bands, or a compute-sanitizer finding
    # the reference's weights pair with ModelNew's neither by name nor by position: checked with its own same-seed
    # weights
    weights_by_seed: str = Policy.FLAG
    # an output with no values of its own (a tensor subclass, the meta device, a storage smaller than its shape): its
    # check fails whatever the policy; fail keeps it out of every ranking and names it as the stricter check
    lazy_output: str = Policy.FAIL
    # faster than the float32 compute floor and less precise than check.precision_ratio allows, on a float32 problem
    # that does not allow TF32 (check.allow_tf32, HARNESS_ALLOW_TF32): the status 'less precise'
    below_float32: str = Policy.FAIL

    def __post_init__(self) -> None:
        for name, value in dataclasses.asdict(self).items():
            if value not in Policy.words():
                raise ValueError(f"flags.{name} must be fail, flag or ignore, got {value!r}")

    def policies(self, gradients: str) -> dict[str, str]:
        """Policy by flag key (flags.Code.key), the gradient flags' from check.gradients."""
        gradient = Policy.FAIL if gradients == GradientPolicy.FAIL else Policy.FLAG
        return {**dataclasses.asdict(self), "wrong_gradients": gradient, "forward_only": gradient}


@dataclasses.dataclass(frozen=True)
class SanitizerConfig:
    # auto | on | off: one small checked call of each correct candidate under compute-sanitizer (auto: CUDA runs, when
    # the tool is found)
    enabled: str
    tools: tuple[str, ...]  # compute-sanitizer tools, each its own run: memcheck | racecheck | initcheck | synccheck
    path: str  # the compute-sanitizer executable; "" = PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin
    timeout: float  # seconds for each tool's run (start-up under the tool is slow)
    prestart: bool  # with workers.prestart: the first tool's next run is started while a candidate is checked
    # seconds the forward under a tool may be expected to take (its timed call x sanitize.SLOWDOWN); past it the
    # run's batch_size is cut to fit, and the result says so. 0: never cut
    max_forward_s: float

    def __post_init__(self) -> None:
        if self.enabled not in Switch.words():
            raise ValueError(f"sanitizer.enabled must be auto, on or off, got {self.enabled!r}")
        bad = [t for t in self.tools if t not in SanitizerTool.words()]
        if bad:
            raise ValueError(
                f"sanitizer.tools: unknown tool {bad[0]!r} (valid: memcheck, racecheck, initcheck, synccheck)"
            )
        if self.timeout <= 0:
            raise ValueError("sanitizer.timeout must be positive")
        if self.max_forward_s < 0:
            raise ValueError("sanitizer.max_forward_s must be 0 (never cut) or positive")


@dataclasses.dataclass(frozen=True)
class Timeouts:
    load: float  # seconds to import the candidate, builds included
    construct: float  # seconds to construct ModelNew and load weights
    check: float  # seconds for all correctness calls
    time: float  # seconds for timing (and the one profiled call)
    compile: float  # seconds for each torch.compile baseline: compile, check and timing

    def __post_init__(self) -> None:
        for name, value in dataclasses.asdict(self).items():
            if value <= 0:
                raise ValueError(f"timeouts.{name} must be positive")


@dataclasses.dataclass(frozen=True)
class TimerSettings:
    """The timer's own settings (harness.device.timing.Timer), as the judge and the workers take them: the
    part of the timing config that says how one side samples, without the run's policies."""

    warmup_ms: float  # untimed warm-up, by time
    min_reps: int  # at least this many timed calls
    max_reps: int  # at most this many timed calls
    budget_s: float  # stop sampling after this long
    target_rse: float  # stop when the relative standard error of the median is below this
    flush_l2: bool  # flush L2 before each timed CUDA call
    # eager | graph | auto (CUDA: capture each input set's call in a CUDA graph, time replays; auto: graph when the
    # reference is launch-bound); a worker's job carries the problem's resolved mode
    mode: str
    subtract_overhead: bool  # subtract the median time of an empty timed region from every sample

    @classmethod
    def from_config(cls, timing: "TimerSettings", mode: Optional[str] = None) -> "TimerSettings":
        """The timer settings of a TimingConfig, with `mode` in place of its own when given."""
        settings = cls(**{f.name: getattr(timing, f.name) for f in dataclasses.fields(cls)})
        return settings if mode is None else dataclasses.replace(settings, mode=mode)


@dataclasses.dataclass(frozen=True)
class TimingConfig(TimerSettings):
    """The timer's settings, and how the run uses them: paired rounds, sync, reuse, the null floor."""

    enabled: bool  # time correct candidates and the reference
    cpu_threads: int  # torch intra-op threads in CPU workers (0 = torch's default)
    sync: str  # auto | stream | device: where the end of a timed CUDA call is taken
    unstable_iqr: float  # warn when the interquartile range exceeds this fraction of the median
    reuse_reference: bool  # reuse cached baseline timings (paired with the reference) and speed-of-light
    # reuse the reference's profiled call and speed-of-light from the reference cache (same problem file, GPU model,
    # driver, torch)
    reuse_profile: bool
    rounds: int  # paired rounds per side: reference and compared model timed in turns, this many each
    max_rounds: int  # more rounds, two at a time, up to this many while the speedup's interval is wider than `interval`
    interval: float  # the half-width (relative) of the speedup's 95% interval that ends the rounds early
    null_candidate: str  # auto | on | off: time the reference through the candidate path (the run's fairness floor)
    quiet: str  # pause | pin | both | off: keep builds and prestarts off the timing processes' CPUs
    null_tolerance: float  # a null floor further than this from 1.00 is a run warning, and the gate's "not comparable"
    hold: bool  # queue batches of timed regions behind a GPU spin where the host's launch is not what is timed

    def __post_init__(self) -> None:
        if self.rounds < 2:
            raise ValueError("timing.rounds must be at least 2 (the speedup comes from paired rounds)")
        if self.max_rounds < self.rounds:
            raise ValueError("timing.max_rounds must be at least timing.rounds")
        if not 0 < self.interval < 1:
            raise ValueError("timing.interval must be in (0, 1)")
        if self.null_candidate not in Switch.words():
            raise ValueError(f"timing.null_candidate must be auto, on or off, got {self.null_candidate!r}")
        if not 0 < self.null_tolerance < 1:
            raise ValueError("timing.null_tolerance must be in (0, 1)")
        if self.quiet not in QuietMode.words():
            raise ValueError(f"timing.quiet must be one of {list(QuietMode.words())}, got {self.quiet!r}")
        if not 1 <= self.min_reps <= self.max_reps:
            raise ValueError("timing needs 1 <= min_reps <= max_reps")
        if self.budget_s <= 0 or self.target_rse <= 0 or self.warmup_ms < 0:
            raise ValueError("timing.budget_s and timing.target_rse must be positive, warmup_ms >= 0")
        if self.mode not in TimingMode.words():
            raise ValueError(f"timing.mode must be one of {list(TimingMode.words())}, got {self.mode!r}")
        if self.sync not in SyncMode.words():
            raise ValueError(f"timing.sync must be one of {list(SyncMode.words())}, got {self.sync!r}")
        if self.unstable_iqr <= 0:
            raise ValueError("timing.unstable_iqr must be positive")


# The timing settings that define the timing protocol: they change what a median means, so timings
# taken under other values are not comparable. (Budgets and repetition counts change only how sure a
# median is.) With TF32 on or off the same kernels compute other things, so the protocol also holds
# check.allow_tf32. In the order the gate names the first that differs.
TIMING_PROTOCOL_FIELDS = ("mode", "sync", "flush_l2", "subtract_overhead", "hold", "cpu_threads")
# dotted config keys, as in a run header's config
PROTOCOL_SETTINGS = (*(f"timing.{name}" for name in TIMING_PROTOCOL_FIELDS), "check.allow_tf32")


@dataclasses.dataclass(frozen=True)
class BaselinesConfig:
    compile_modes: tuple[str, ...]  # torch.compile modes timed next to the eager reference ([] = none)

    def __post_init__(self) -> None:
        bad = [m for m in self.compile_modes if m not in CompileMode.words()]
        if bad:
            raise ValueError(
                f"baselines.compile_modes: unknown mode {bad[0]!r} (valid: {', '.join(CompileMode.words())})"
            )


@dataclasses.dataclass(frozen=True)
class SpeedOfLightConfig:
    enabled: bool  # count FLOPs and bytes per problem, measure device peaks once, report % of roofline
    impossible_below: float  # flag a time below this fraction of the roofline floor as impossible

    def __post_init__(self) -> None:
        if not 0 < self.impossible_below <= 1:
            raise ValueError("speed_of_light.impossible_below must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class BuildsConfig:
    # auto | always | never: build candidates' extensions in a CPU pool ahead of evaluation (auto: on CUDA runs)
    ahead: str
    parallel: int  # concurrent builds (0: three per four cores, one per 4 GiB of memory, at most 32)
    jobs_per_build: int  # MAX_JOBS for each build's ninja (0: 2, or 1 on one core)
    # a build also constructs a candidate that builds in its constructor (from its problem's init inputs)
    construct: bool
    # nice levels a build process lowers its CPU priority by (0-19): the lane's work gets the CPUs first
    nice: int
    # builds find torch/extension.h precompiled (harness.parent.pch), where candidates cannot write the cache
    precompiled_header: bool

    def __post_init__(self) -> None:
        if not 0 <= self.nice <= 19:
            raise ValueError(f"builds.nice must be 0 to 19, got {self.nice}")
        if self.ahead not in Ahead.words():
            raise ValueError(f"builds.ahead must be auto, always or never, got {self.ahead!r}")
        if self.parallel < 0 or self.jobs_per_build < 0:
            raise ValueError("builds.parallel and builds.jobs_per_build must be 0 (auto) or more")


@dataclasses.dataclass(frozen=True)
class WorkersConfig:
    # auto | always | never: start each worker's interpreter and torch import ahead of its job (auto: on CUDA runs)
    prestart: str
    # CUDA runs: indices of the visible GPUs to evaluate on, one evaluation at a time on each; [] = all
    gpus: tuple[int, ...]
    warm_problems: int  # problems whose judge each lane keeps running between candidates (a session serving several)
    spares: int  # prestarted workers each lane keeps ready (more when candidates come faster than one readies)
    prestart_judge: bool  # with prestart: the next problem's judge is started while this problem runs
    judges_ahead: int  # with prestart_judge: judges each lane keeps started ahead (more when problems come fast)
    lanes_per_gpu: int  # CUDA runs: lanes sharing each GPU; their checks overlap, their timings take turns alone on it
    judge_zygote: bool = False  # judges forked from a process per lane that imported torch (harness.parent.zygote)

    def __post_init__(self) -> None:
        if self.lanes_per_gpu < 1:
            raise ValueError(f"workers.lanes_per_gpu must be 1 or more, got {self.lanes_per_gpu}")
        if self.prestart not in Ahead.words():
            raise ValueError(f"workers.prestart must be auto, always or never, got {self.prestart!r}")
        if self.warm_problems < 1 or self.spares < 1 or self.judges_ahead < 1:
            raise ValueError(
                "workers.warm_problems, workers.spares and workers.judges_ahead must be 1 or more, got "
                f"{self.warm_problems}, {self.spares} and {self.judges_ahead}"
            )
        if any(g < 0 for g in self.gpus) or len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"workers.gpus must list distinct GPU indices (0 or more), got {list(self.gpus)}")


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    layer: str  # auto | landlock | mount | hash | off (Boundary)
    reads: str = "confined"  # confined | open: under landlock, whether reads are limited to an allow-list

    def __post_init__(self) -> None:
        if self.layer not in Boundary.words():
            raise ValueError(f"sandbox.layer must be one of {', '.join(Boundary.words())}, got {self.layer!r}")
        if self.reads not in ("confined", "open"):
            raise ValueError(f"sandbox.reads must be confined or open, got {self.reads!r}")


@dataclasses.dataclass(frozen=True)
class RayConfig:
    address: str  # "" = start a Ray instance on this machine; "auto" = join the running cluster; "ray://HOST:10001"
    lanes: int  # evaluation actors, one GPU each (CPU runs: one CPU each); 0 = one per GPU in the cluster (CPU runs: 1)
    build_cpus: int  # CPUs each build task asks for (its MAX_JOBS)

    def __post_init__(self) -> None:
        if self.lanes < 0 or self.build_cpus < 1:
            raise ValueError("ray.lanes must be 0 (auto) or more and ray.build_cpus 1 or more")


@dataclasses.dataclass(frozen=True)
class LintConfig:
    memory_gb: float  # a problem's reference must fit in this much device memory
    time_ms: tuple[float, ...]  # [low, high]: the eager reference's time the suite aims for on the GPU
    timeout_s: float  # per problem

    def __post_init__(self) -> None:
        if len(self.time_ms) != 2 or not 0 < self.time_ms[0] < self.time_ms[1]:
            raise ValueError("lint.time_ms must be [low, high] with 0 < low < high")


@dataclasses.dataclass(frozen=True)
class GateConfig:
    threshold: float  # a candidate slower than (1 + threshold) x its baseline median, significantly, regresses
    alpha: float  # significance: two-sided Mann-Whitney U p-value below this
    fail_on: str  # default --fail-on rules ("default" = status and median at threshold)

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 10 or not 0 < self.alpha < 1:
            raise ValueError("gate.threshold must be in (0, 10) and gate.alpha in (0, 1)")


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_mb: int  # host RSS limit per worker, 0 = 80% of RAM
    log_kib: int  # captured output kept per worker
    min_free_disk_mb: int  # a run refuses to start with less free disk at its scratch and results folders; 0 = no check

    def __post_init__(self) -> None:
        if self.min_free_disk_mb < 0:
            raise ValueError("limits.min_free_disk_mb must be 0 (no check) or more")


@dataclasses.dataclass(frozen=True)
class LeaderboardConfig:
    fast_p: tuple[float, ...]  # thresholds for the fast_p columns


@dataclasses.dataclass(frozen=True)
class Config:
    device: str  # auto | cuda | cpu
    problems_dir: str  # where problems are found (relative to the project root or absolute)
    solutions_dir: str  # where candidates are found, one folder per problem
    results_dir: str  # where runs are written
    build_cache_dir: str  # content-addressed extension builds
    measurement_cache_dir: str  # measured device peaks and (when reused) reference timings
    check: CheckConfig
    flags: FlagPolicies
    sanitizer: SanitizerConfig
    timeouts: Timeouts
    timing: TimingConfig
    baselines: BaselinesConfig
    speed_of_light: SpeedOfLightConfig
    builds: BuildsConfig
    workers: WorkersConfig
    sandbox: SandboxConfig
    executor: str  # local | ray: where evaluations run (ray: needs the optional extra, pip install .[ray])
    ray: RayConfig
    limits: Limits
    leaderboard: LeaderboardConfig
    gate: GateConfig
    lint: LintConfig

    def __post_init__(self) -> None:
        if self.device not in Device.words():
            raise ValueError(f"device must be auto, cuda or cpu, got {self.device!r}")
        if self.executor not in ExecutorKind.words():
            raise ValueError(f"executor must be local or ray, got {self.executor!r}")

    def for_problem(self, declared: dict[str, Any]) -> "Config":
        """This config with a problem's HARNESS_* declarations layered on top (the one place they
        apply): HARNESS_INPUT_DISTRIBUTIONS and HARNESS_RANDOMIZE_WEIGHTS replace their check keys;
        HARNESS_TOLERANCES replaces the tolerance of each dtype it names; HARNESS_ALLOW_TF32 replaces
        check.allow_tf32 (the problem's float32 may be TF32); HARNESS_BACKWARD makes the
        gradient check fail (True) or turns it off (False); HARNESS_FLAGS sets flag policies.
        HARNESS_EXTRA_SIZES is the worker's."""
        check = self.check
        if "HARNESS_INPUT_DISTRIBUTIONS" in declared:
            check = dataclasses.replace(check, input_distributions=tuple(declared["HARNESS_INPUT_DISTRIBUTIONS"]))
        if "HARNESS_RANDOMIZE_WEIGHTS" in declared:
            check = dataclasses.replace(check, randomize_weights=bool(declared["HARNESS_RANDOMIZE_WEIGHTS"]))
        if "HARNESS_TOLERANCES" in declared:
            named = {
                dtype: Tolerance(atol=float(t["atol"]), rtol=float(t["rtol"]), norm=float(t.get("norm", 0.0)))
                for dtype, t in declared["HARNESS_TOLERANCES"].items()
            }
            check = dataclasses.replace(check, tolerances={**check.tolerances, **named})
        if "HARNESS_ALLOW_TF32" in declared:
            check = dataclasses.replace(check, allow_tf32=bool(declared["HARNESS_ALLOW_TF32"]))
        if "HARNESS_BACKWARD" in declared:
            check = dataclasses.replace(check, gradients="fail" if declared["HARNESS_BACKWARD"] else "off")
        flags = self.flags
        if "HARNESS_FLAGS" in declared:
            flags = dataclasses.replace(
                flags, **{str(code).replace("-", "_"): policy for code, policy in declared["HARNESS_FLAGS"].items()}
            )
        if check is self.check and flags is self.flags:
            return self
        return dataclasses.replace(self, check=check, flags=flags)

    def path(self, value: str) -> Path:
        """A configured path, relative ones taken from the project root."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else ROOT / p

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_config(config_file: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The default config, then `config_file`, then `key.sub=value` overrides, validated."""
    data = _read_yaml(DEFAULT_CONFIG)
    if config_file is not None:
        _merge(data, _read_yaml(Path(config_file)), Config, prefix="")
    return _overridden(data, overrides or [])


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """`cfg` with `key.sub=value` overrides on top, validated as load_config's are."""
    return _overridden(cfg.to_dict(), overrides)


def _overridden(data: dict[str, Any], overrides: list[str]) -> Config:
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key=value, got {item!r} (for example --set check.trials=3)")
        nested: dict[str, Any] = {}
        cursor = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = yaml.safe_load(raw)
        _merge(data, nested, Config, prefix="")
    return build(Config, data, prefix="")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise UserError(_yaml_error(path, exc)) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"config file {path} must hold a mapping at the top level")
    return loaded


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line, with the file, line and column (1-based) where it was found and,
    when PyYAML says one, what it was reading and where that started."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}"
    context, started = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and started is not None and (started.line, started.column) != (mark.line, mark.column):
        problem = f"{problem} ({context} started at line {started.line + 1}, column {started.column + 1})"
    elif context:
        problem = f"{problem} ({context})"
    return f"config file {path} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _fields(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _merge(base: dict[str, Any], extra: dict[str, Any], cls: type, prefix: str) -> None:
    """Merge `extra` into `base`, rejecting keys the schema `cls` does not have."""
    hints = _fields(cls)
    for key, value in extra.items():
        if key not in hints:
            raise UserError(f"unknown config key {prefix + str(key)!r} (valid keys here: {', '.join(sorted(hints))})")
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            _merge(base.setdefault(key, {}), value, hints[key], prefix=f"{prefix}{key}.")
        elif typing.get_origin(hints[key]) is dict and isinstance(value, dict) and isinstance(base.get(key), dict):
            merged = copy.deepcopy(base[key])
            for k, v in value.items():
                merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
            base[key] = merged
        else:
            base[key] = value


def build(cls: type, data: Any, prefix: str) -> Any:
    """Construct the dataclass `cls` from plain data, checking every type."""
    where = prefix.rstrip(".") or "config"
    if not isinstance(data, dict):
        raise UserError(f"{where} must be a mapping, got {type(data).__name__}")
    hints = _fields(cls)
    optional = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    missing = [k for k in hints if k not in data and k not in optional]
    if missing:
        raise UserError(f"{where} is missing keys: {', '.join(missing)}")
    unknown = [k for k in data if k not in hints]
    if unknown:
        raise UserError(f"unknown config key {prefix + unknown[0]!r} (valid keys here: {', '.join(sorted(hints))})")
    values = {k: _typed(hints[k], data[k], prefix + k) for k in hints if k in data}
    try:
        return cls(**values)
    except ValueError as exc:
        raise UserError(f"invalid config: {exc}") from None


def _typed(tp: Any, value: Any, key: str) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a dataclass type, never an instance
        return build(tp, value, key + ".")
    origin = typing.get_origin(tp)
    if origin is tuple:
        (inner, _) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise UserError(f"config key {key!r} must be a list, got {value!r}")
        return tuple(_typed(inner, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _, inner = typing.get_args(tp)
        if not isinstance(value, dict):
            raise UserError(f"config key {key!r} must be a mapping, got {value!r}")
        return {str(k): _typed(inner, v, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise UserError(f"config key {key!r} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"config key {key!r} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"config key {key!r} must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, bool):  # YAML 1.1 reads unquoted on/off/yes/no as booleans
            value = "on" if value else "off"
        if not isinstance(value, str):
            raise UserError(f"config key {key!r} must be a string, got {value!r}")
        return value
    return value
