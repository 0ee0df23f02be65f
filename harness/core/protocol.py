"""Typed messages of the data plane: parent <-> judge, and worker -> parent -> judge.

Every message is a frozen dataclass, sent as one JSON line (`encode`) and rebuilt on the other
side (`decode`) with the record machinery, so a field added on one side and not the other is an
error, not a silent drop. Tensors never travel in a message: only `TensorSpec`s into a region.
"""

from __future__ import annotations

import dataclasses
import json
import math
from itertools import takewhile
from typing import Any, Optional, Sequence, TypeVar

from harness.core.config import Distribution, TimerSettings
from harness.core.records import (
    CallProfile,
    CheckResult,
    ExtensionBuild,
    ForwardOps,
    SpeedOfLight,
    TimingStats,
    from_dict,
    to_dict,
)
from harness.core.status import Backward, Status, Vocabulary


class RegionKind(Vocabulary):
    """Where a region the judge shares with a worker lives (`RegionHandle.kind`; a reference's `data_plane`)."""

    CUDA = "cuda"  # device memory, mapped through a CUDA IPC handle
    HOST = "host"  # host shared memory, a memfd mapped through /proc


@dataclasses.dataclass(frozen=True)
class RegionHandle:
    """What a worker needs to map a region: sent to it in its job."""

    kind: str  # a RegionKind: cuda (an IPC handle) or host (a memfd path)
    nbytes: int  # size of the allocation
    handle: str  # cuda: the 64-byte IPC handle in hex; cpu: /proc/<pid>/fd/<fd>


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A contiguous tensor at `offset` bytes into a region."""

    offset: int  # bytes from the region's start; -1: the tensor was not copied in (too large)
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without "torch.", e.g. "float32"
    itemsize: int  # bytes per element

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


class Role(Vocabulary):
    """What a compared worker runs: a candidate's ModelNew (or the null candidate, the problem's own
    Model through the same path), or a torch.compile baseline of the reference."""

    CANDIDATE = "candidate"
    BASELINE = "baseline"


class StepKind(Vocabulary):
    """A step a compared worker reports (`Step.step`), its outputs in the mailbox."""

    SAME_SEED = "same_seed"  # its first call, on the weights it built under the shared seed
    CALL = "call"  # one planned call, once per call the role makes, in the plan's order
    BUFFERS = "buffers"  # its module state after the calls
    GRADS = "grads"  # its gradients (when the job asks for them)
    TIMED = "timed"  # the last timed call's output
    STAGE = "stage"  # inputs asked for, no outputs to judge (a baseline's timing sets)


class WantKind(Vocabulary):
    """What a worker asks the judge to stage next (`Want.kind`)."""

    CALL = "call"  # the inputs of call `index`
    TRIAL = "trial"  # trial `index`'s inputs
    TIMING = "timing"  # the timed input sets
    NONE = "none"  # nothing


# Each role's steps in the order a worker reports them: CALL once per call the role makes, GRADS once or, when
# the judge asks for a second draw (Staged.redraw), twice (index 0, then 1), every other kind at most once;
# SKIPPABLE kinds may be left out (GRADS only when the job does not ask for gradients).
STEPS: dict[Role, tuple[StepKind, ...]] = {
    Role.CANDIDATE: (StepKind.SAME_SEED, StepKind.CALL, StepKind.BUFFERS, StepKind.GRADS, StepKind.TIMED),
    Role.BASELINE: (StepKind.CALL, StepKind.STAGE),
}
SKIPPABLE = frozenset({StepKind.GRADS, StepKind.TIMED, StepKind.STAGE})


@dataclasses.dataclass(frozen=True)
class Call:
    """One planned forward call, made by the reference and every compared model alike."""

    input: int  # index of the input set
    module_mode: str  # "train" or "eval": the mode the module is called in
    distribution: str = Distribution.GIVEN  # how the trial's floating inputs were drawn
    repeat: int = 0  # > 0: a repeat of an earlier call on the same inputs (determinism)
    other_size: bool = False  # the generalisation trial: inputs at another size

    @property
    def label(self) -> str:
        inputs = "" if self.distribution == Distribution.GIVEN else f", {self.distribution} inputs"
        size = ", other size" if self.other_size else ""
        again = f"repeat {self.repeat} of " if self.repeat else ""
        return f"{again}trial {self.input + 1} ({self.module_mode}{inputs}{size})"


def role_calls(role: Role, calls: tuple[Call, ...]) -> tuple[Call, ...]:
    """The planned calls a role's worker makes: a candidate every one; a compile baseline (the
    reference itself, compiled) only the first trial's, once per mode: its check is that compiling
    kept the function."""
    return calls if role is Role.CANDIDATE else tuple(takewhile(lambda c: c.input == 0 and not c.repeat, calls))


class CheckKind(Vocabulary):
    """What a check (a record's CheckResult) compared: its name says it to a reader, its kind to the code."""

    SAME_SEED = "same_seed"  # the first call, on the weights both models built under the shared seed
    CALL = "call"  # one planned call (named by `Call.label`)
    BUFFERS = "buffers"  # module state after every planned call
    TIMED = "timed"  # the last timed call's output


# The names of the checks that are not planned calls, as records store them (a planned call's is its label).
CHECK_NAMES: dict[CheckKind, str] = {
    CheckKind.SAME_SEED: "same-seed construction (eval)",
    CheckKind.BUFFERS: "buffers after the calls",
    CheckKind.TIMED: "last timed call on trial 1 (eval)",
}
SAME_SEED_CHECK, BUFFERS_CHECK, TIMED_CHECK = (
    CHECK_NAMES[k] for k in (CheckKind.SAME_SEED, CheckKind.BUFFERS, CheckKind.TIMED)
)


def check_kind(check: CheckResult) -> CheckKind:
    """The kind of a check, by its stored name (CHECK_NAMES; any other name is a planned call's)."""
    return next((kind for kind, name in CHECK_NAMES.items() if name == check.name), CheckKind.CALL)


@dataclasses.dataclass(frozen=True)
class JudgeJob:
    """What a judge serves: one problem on one device, with the run's secret plan."""

    source: str  # the problem file
    device: str  # "cuda" or "cpu"
    build_cache: str  # the content-addressed build cache (a problem may build extensions too)
    construct_seed: int
    input_seeds: tuple[int, ...]
    distributions: tuple[str, ...]
    calls: tuple[Call, ...]
    other_size_trial: Optional[int]
    randomize_weights: bool
    precision_call: Optional[int]
    timed_inputs: int
    gradients: bool
    gradient_seed: int
    allow_tf32: bool
    cpu_threads: int
    tolerances: dict[str, dict[str, float]]  # dtype -> {atol, rtol}
    gradient_tolerance_factor: float
    timing: Optional[TimerSettings] = None  # the timer's settings; None: the reference is not timed
    speed_of_light_cache: str = ""  # where device peaks are cached; "" = no speed-of-light
    memory_fraction: float = 0.5  # the reference may use at most this fraction of the device's memory
    slot_fraction: float = 0.125  # the timed input sets a worker gets may fill at most this fraction
    guard_bands: bool = True  # check the poisoned bands after the worker's inputs after each call
    rng_seed: int = 0  # torch is seeded with this plus the call's index before each checked reference call
    profile: Optional[CallProfile] = None  # the reference's profiled call, from the reference cache: not profiled again
    source_text: str = ""  # the problem's pinned source, loaded instead of reading `source` ("" = read it)

    @property
    def regular_trials(self) -> int:
        """The trials at the problem's own size (the other-size one, when planned, comes after them)."""
        return len(self.input_seeds) - (self.other_size_trial is not None)


@dataclasses.dataclass(frozen=True)
class Start:
    """parent -> judge: load the problem and run the reference once through the plan."""

    job: JudgeJob


@dataclasses.dataclass(frozen=True)
class Open:
    """parent -> judge: a new compared worker is about to start."""

    role: Role  # what the worker runs


@dataclasses.dataclass(frozen=True)
class Check:
    """parent -> judge: the worker of `session` reported a step."""

    session: int
    step: "Step"


@dataclasses.dataclass(frozen=True)
class Close:
    """parent -> judge: the worker of `session` has ended; free its regions."""

    session: int


@dataclasses.dataclass(frozen=True)
class Phase:
    """judge -> parent: the judge entered a phase of its start (each has its own time limit); and
    worker -> parent on the channel: the worker entered a phase (load, construct, compile, check, time)."""

    phase: str


@dataclasses.dataclass(frozen=True)
class Closed:
    """judge -> parent: a session's regions are freed."""

    session: int


@dataclasses.dataclass(frozen=True)
class Fault:
    """judge -> parent: the judge cannot go on (its device failed); it exits after this."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Arg:
    """One forward (or constructor) argument: a tensor in a region, or a JSON value."""

    tensor: Optional[TensorSpec] = None  # where the tensor lies in the inputs region
    value: Any = None  # the value itself when it is not a tensor (int, float, str, list, None)


@dataclasses.dataclass(frozen=True)
class Staged:
    """Input sets the judge has just written into the worker's inputs region."""

    sets: tuple[tuple[Arg, ...], ...]  # one set for a call; several for timing (rotated over)
    fresh: bool = True  # False: the region already held these values (same trial again), nothing was written
    # the gradients once more, on these inputs (another trial's): the first draw's did not match the reference's
    redraw: bool = False


@dataclasses.dataclass(frozen=True)
class Want:
    """What a worker asks the judge to stage next, along with a step's outputs."""

    kind: WantKind
    index: int = 0


@dataclasses.dataclass(frozen=True)
class Output:
    """One output of a step, as the worker reports it; its values are in the mailbox region."""

    type: str  # Python type name; only "Tensor" outputs are compared
    name: str = ""  # buffers and gradients: the buffer's or gradient's name
    layout: str = "torch.strided"
    device: str = ""
    alias: int = -1  # index of the input whose memory it shares, or -1
    tensor: Optional[TensorSpec] = None  # where its values are in the mailbox (offset -1: did not fit)
    # why it has no values of its own to compare, said after "output" (harness.device.regions.unmaterialised: a tensor
    # subclass, the meta device, a storage smaller than its shape): the judge fails it, the parent flags lazy-output
    lazy: str = ""


@dataclasses.dataclass(frozen=True)
class Step:
    """A worker finished one step and put its outputs in the mailbox (worker -> parent -> judge).
    Steps come in the order STEPS declares for the worker's role (`out_of_order`)."""

    step: StepKind
    index: int = 0  # the call's index for step "call"
    outputs: tuple[Output, ...] = ()
    status: Backward = Backward.RAN  # grads: whether its backward ran
    reason: str = ""  # grads: why there are none
    want: Want = Want(WantKind.NONE)
    own_weights: bool = False  # same_seed: ModelNew keeps the weights it built under the shared seed (no transplant);
    # the judge checks its calls against the reference's initial weights


@dataclasses.dataclass(frozen=True)
class StepAnswer:
    """The judge's answer to one step (judge -> parent); the parent passes only `staged` on."""

    check: Optional[CheckResult] = None  # the comparison of the step's outputs
    failure: Optional[Failure] = None  # when the step fails outright
    # relative errors against float64 on the precision call or a failed value check: candidate, reference, float32
    # (1.0 when the outputs are float32) and, on a failed check, failed (1.0) and, where the reference multiplies
    # matrices or convolves, tf32 (the reference on inputs and weights cut to TF32)
    precision: dict[str, float] = dataclasses.field(default_factory=dict)
    gradients: Optional[tuple[str, str]] = None  # grads: (match | mismatch | forward only, why)
    staged: Optional[Staged] = None  # the inputs the worker asked for, now in its region
    unsafe: str = ""  # a write past the end of an input (its guard band changed), when the call made one


@dataclasses.dataclass(frozen=True)
class Named:
    """A named tensor in a region (a state_dict entry)."""

    name: str
    tensor: TensorSpec


@dataclasses.dataclass(frozen=True)
class SessionHandle:
    """One compared worker's view of the judge (judge -> parent -> worker job)."""

    session: int  # the judge's number for it
    inputs: RegionHandle  # the worker's own copy of the inputs (and the weights it loads)
    mailbox: RegionHandle  # where the worker puts each step's outputs
    init_args: tuple[Arg, ...]  # constructor arguments (tensors in the inputs region)
    weights: tuple[Named, ...]  # the reference's state_dict, in the inputs region
    first: Staged  # the inputs of the worker's first step


@dataclasses.dataclass(frozen=True)
class ReferenceReport:
    """What the judge learned running the reference once through the plan (judge -> parent)."""

    ok: bool
    reason: str  # "ok", or "<status>: <why>"
    device_name: str = ""
    profile: Optional[CallProfile] = None  # one profiled call (CUDA, when timing is on)
    profile_error: str = ""  # why profiling failed, when it did
    forward_ops: Optional[ForwardOps] = None  # the ATen operators of its forward on the call workers observe (CPU)
    speed_of_light: Optional[SpeedOfLight] = None
    speed_of_light_error: str = ""
    other_size: dict[str, Any] = dataclasses.field(default_factory=dict)
    other_size_note: str = ""
    peak_bytes: int = 0  # the reference's peak device (or host) memory through the plan
    float64_note: str = ""  # why the float64 twin is not available, when it is not
    # per input: what its redraws keep ("input 0: upper-triangular, non-negative")
    input_structure: tuple[str, ...] = ()
    # per output that is rounding noise around zero on every call: the note (harness.judge.degenerate)
    degenerate: tuple[str, ...] = ()
    data_plane: str = ""  # where workers' regions live: "cuda" (device memory, IPC) or "host" (shared memory)
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TimingProtocol:
    """How both sides of one paired timing are timed: the same for the reference and the compared model."""

    timing_mode: str  # "eager" calls or "graph" replays
    sync: str  # "stream": end event on the calling stream; "device": a device-wide synchronise first
    sync_reason: str = ""  # why device sync (which side needed it)
    timing_mode_reason: str = ""  # why graphs were chosen for the problem, or (eager) whose capture failed
    # each batch of timed regions queued behind a GPU spin (harness.device.timing): graph replays, and eager calls
    # where the reference and the compared model were both measured not launch-bound; never with device sync, nor for
    # a launch-bound eager call (whose host launch cost is part of what it costs): pairing.choose_protocol
    hold: bool = False

    @property
    def reason(self) -> str:
        return "; ".join(r for r in (self.sync_reason, self.timing_mode_reason) if r)

    def describe(self) -> str:
        return f"{self.timing_mode}, {self.sync} sync"


@dataclasses.dataclass(frozen=True)
class PrepareTiming:
    """parent -> judge: make the reference's timing sets and warm it up for `session`'s paired rounds."""

    session: int
    graph: bool  # also capture CUDA graphs (timing.mode graph)


@dataclasses.dataclass(frozen=True)
class Ready:
    """One side is warmed up and can be timed (judge -> parent, and worker -> parent on the channel)."""

    graph_error: str = ""  # why capturing CUDA graphs failed ("" when it worked or was not asked)
    needs_device: str = ""  # why this side's profiled call needs a device-wide synchronise ("" when not)
    profile: Optional[CallProfile] = None  # the worker's one profiled call (CUDA)
    profile_error: str = ""  # why profiling failed, when it did


@dataclasses.dataclass(frozen=True)
class TimeRound:
    """parent -> judge or worker: time one round now, under `protocol`."""

    session: int
    round: int
    rounds: int  # how many rounds each side gets (a round samples for budget_s / rounds at most)
    protocol: TimingProtocol


@dataclasses.dataclass(frozen=True)
class RoundTimed:
    """One side's round (judge -> parent, and worker -> parent on the channel)."""

    round: int
    stats: TimingStats


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """parent -> worker: what one compared worker runs, as one JSON line on its stdin."""

    role: Role  # which run sequence the worker follows
    source: str  # the module holding the model (a candidate's file, or the problem itself)
    class_name: str  # the nn.Module subclass to construct ("ModelNew", or "Model")
    compile_mode: Optional[str]  # a baseline: the torch.compile mode
    device: str  # "cuda" or "cpu"
    build_cache: str  # the content-addressed build cache of inline extensions
    construct_seed: int  # torch is seeded with this before the model is constructed
    calls: tuple[Call, ...]  # the planned forward calls the worker makes, in order
    timing: Optional[TimerSettings]  # the timer's settings; None: nothing is timed
    allow_tf32: bool  # the TF32 policy of matmul and cuDNN
    gradients: bool  # a candidate also reports its gradients (check.gradients is not off)
    gradient_seed: int  # the random projection of the outputs whose backward both sides take
    rng_seed: int  # torch is seeded with this plus the call's index before each checked call
    cpu_threads: int  # torch's intra-op threads while timing on the CPU (0: torch's default)
    guard_bands: bool  # report a write past the end of an input the worker copied to the device
    weights: str  # check.weights: "transplant" (the reference's weights) or "seed" (its own same-seed ones)
    session: SessionHandle  # the worker's view of the judge: its regions, weights and first inputs
    # the module's pinned source (the problem's, for a baseline), loaded instead of reading `source`
    source_text: str = ""
    problem_text: str = ""  # check.problem_globals: the problem's pinned source, run first in the module's namespace


@dataclasses.dataclass(frozen=True)
class SanitizeJob:
    """parent -> the sanitizer's child (harness.worker.sanitized): one eval forward of a correct
    candidate under compute-sanitizer, as a JSON file or one JSON line on its stdin."""

    source: str  # the candidate's file
    problem: str  # the problem file (its name in tracebacks)
    problem_text: str  # the problem's pinned source, loaded instead of reading `problem`
    class_name: str  # the nn.Module subclass to construct ("ModelNew")
    sizes: dict[str, Any]  # the problem's module constants for this forward (the other-size trial's)
    seed: int  # torch is seeded with this before the model and its inputs are made
    build_cache: str  # the build cache holding the candidate's extensions (nothing new is built)
    problem_globals: bool  # check.problem_globals: the candidate's module starts with the problem's globals


@dataclasses.dataclass(frozen=True)
class Built:
    """worker -> parent: one load_inline call finished (as the content-addressed build cache saw it)."""

    build: ExtensionBuild


@dataclasses.dataclass(frozen=True)
class WeightsBySeed:
    """worker -> parent: the reference's weights pair with ModelNew's neither by name nor by position;
    it keeps its own."""

    reason: str  # what differs (names, shapes)


@dataclasses.dataclass(frozen=True)
class WeightsMapped:
    """worker -> parent: the reference's weights were loaded under other names (ModelNew renames them)."""

    pairs: tuple[tuple[str, str], ...]  # (own name, reference name) of each renamed tensor
    by: str = "position"  # how they paired: position (registration order and shape) or shape (each shape unique)


@dataclasses.dataclass(frozen=True)
class Threads:
    """worker -> parent: forward left threads running after it returned (the first call that did)."""

    label: str  # the call after which they were seen
    names: tuple[str, ...]  # the first few threads' names
    count: int  # how many


@dataclasses.dataclass(frozen=True)
class Unsafe:
    """worker -> parent: a write past the end of a device copy of an input (its guard band changed)."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Compiled:
    """worker -> parent: torch.compile and the first (compiling) call finished."""

    seconds: float  # how long they took


@dataclasses.dataclass(frozen=True)
class ExtensionCalls:
    """worker -> parent: calls into each extension function ("extension.function"), while checked and while timed."""

    checked: dict[str, int]
    timed: dict[str, int]
    forward_ops: Optional[ForwardOps] = None  # the ATen operators of its observed checked call (a candidate on the CPU)


@dataclasses.dataclass(frozen=True)
class Done:
    """worker -> parent: the worker finished its run (its last message)."""

    phase_seconds: dict[str, float]  # how long each phase took
    leftover: int = 0  # processes the model started and left running, ended by the worker before this message


@dataclasses.dataclass(frozen=True)
class Failed:
    """worker -> parent: the run failed; the worker exits after this."""

    status: Status
    reason: str  # one line


# what a worker sends on its channel
WORKER_MESSAGES: tuple[type, ...] = (
    Phase,
    Built,
    WeightsBySeed,
    WeightsMapped,
    Threads,
    Unsafe,
    Compiled,
    ExtensionCalls,
    Step,
    Ready,
    RoundTimed,
    Done,
    Failed,
)

# what parent and judge send each other (a worker's messages pass through the parent on to the judge)
JUDGE_MESSAGES: tuple[type, ...] = (
    Start,
    Open,
    Check,
    Close,
    Phase,
    Closed,
    Fault,
    Step,
    StepAnswer,
    SessionHandle,
    ReferenceReport,
    Staged,
    PrepareTiming,
    Ready,
    TimeRound,
    RoundTimed,
    TimingProtocol,
)

MESSAGES: dict[str, type] = {cls.__name__: cls for cls in JUDGE_MESSAGES + WORKER_MESSAGES}


def encode(message: Any) -> dict[str, Any]:
    return {"type": type(message).__name__, "body": to_dict(message)}


def decode(data: dict[str, Any]) -> Any:
    cls = MESSAGES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown message type {data.get('type')!r}")
    return from_dict(cls, data["body"])


def decode_worker(data: Any) -> Any:
    """A message from a worker's channel; a type a worker does not send, or a malformed body, raises ValueError."""
    if not isinstance(data, dict) or not isinstance(data.get("body"), dict):
        raise ValueError("a message without a type and body")
    cls = MESSAGES.get(data.get("type", ""))
    if cls not in WORKER_MESSAGES:
        raise ValueError(f"a message of type {data.get('type')!r}, which workers do not send")
    try:
        return from_dict(cls, data["body"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"a malformed {cls.__name__} message ({type(exc).__name__}: {exc})") from None


def dumps(message: Any) -> str:
    return json.dumps(encode(message), separators=(",", ":"))


def out_of_order(role: Role, seen: Sequence[str], step: Step, calls: int, gradients: bool) -> str:
    """Why `step` is not one that STEPS allows a `role` worker next, after the steps `seen`, when it
    makes `calls` calls and reports gradients only if `gradients`; "" when it is."""
    if step.step not in StepKind.words():
        return f"unknown step {step.step!r}"
    kind, order = StepKind(step.step), STEPS[role]
    at = order.index(kind) if kind in order else -1
    last = order.index(StepKind(seen[-1])) if seen else -1
    made = sum(s == StepKind.CALL for s in seen)
    again = kind in (StepKind.CALL, StepKind.GRADS)  # a call per call; a second gradient draw
    ok = at >= 0 and (at > last or (at == last and again))
    skippable = SKIPPABLE - {StepKind.GRADS} if gradients else SKIPPABLE  # asked for, the gradients must come
    # a required step left out
    ok = ok and not any(k not in skippable and k is not StepKind.CALL for k in order[last + 1 : at])
    if kind is StepKind.CALL:
        ok = ok and step.index == made < calls
    elif StepKind.CALL in order[:at]:
        ok = ok and made == calls  # every call before what follows them
    if kind is StepKind.GRADS:  # the first draw is 0, a second 1 (whether the judge asked for it is the judge's to say)
        ok = ok and step.index == sum(s == StepKind.GRADS for s in seen) < 2
    ok = ok and (kind is not StepKind.GRADS or gradients) and (kind is not StepKind.STAGE or not step.outputs)
    return (
        ""
        if ok
        else f"step {step.step} {step.index} arrived out of the plan's order (after "
        f"{', '.join(seen[-2:]) or 'nothing'})"
    )


# -- how a worker ended, as the parent saw it ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failing status and its reason: how a worker's run ended, or why a step was refused."""

    status: Status
    reason: str


M = TypeVar("M")


@dataclasses.dataclass(frozen=True)
class WorkerOutcome:
    """How a worker ended, as seen by the parent."""

    failure: Optional[Failure]  # None when the worker reported Done
    done: Optional[Done]  # the worker's final message when it finished
    messages: tuple[Any, ...]  # every verified message (harness.core.protocol's worker messages), in order
    phase: str  # the last phase the worker announced
    returncode: Optional[int]  # exit code, or -signal
    wall_seconds: float  # start to end, seen by the parent
    log_bytes: int  # total bytes the worker printed

    def first(self, kind: type[M]) -> Optional[M]:
        """The first message of type `kind` the worker sent, or None."""
        return next((m for m in self.messages if isinstance(m, kind)), None)

    def every(self, kind: type[M]) -> list[M]:
        """Every message of type `kind` the worker sent, in order."""
        return [m for m in self.messages if isinstance(m, kind)]
