"""The closed set of verdicts a candidate can get. Every record carries one of these and a reason."""

from __future__ import annotations

import enum


class Vocabulary(str, enum.Enum):
    """A closed set of words kept as their strings: equal to, hashed as, stored (JSON, to_dict) and
    formatted (str, f-strings) as the word itself, so code that reads or writes the plain strings is
    unchanged."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """Its words, in their declared order, as plain strings."""
        return tuple(member.value for member in cls)


class Status(Vocabulary):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    EXTRACT_FAILED = "extract failed"
    SYNTAX_ERROR = "syntax error"
    IMPORT_ERROR = "import error"
    INTERFACE_ERROR = "interface error"
    NEEDS_CUDA = "needs CUDA"
    BUILD_FAILED = "build failed"
    CONSTRUCT_FAILED = "construct failed"
    WEIGHTS_MISMATCH = "weights mismatch"
    RUNTIME_ERROR = "runtime error"
    CUDA_FAULT = "CUDA fault"
    UNSAFE_MEMORY = "unsafe memory"
    MUTATED_INPUT = "mutated input"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out of memory"
    CRASHED = "crashed"
    EXITED_EARLY = "exited early"
    FORGED_RESULT = "forged result"
    TAMPERED = "tampered"
    NO_CUSTOM_KERNEL = "no custom kernel"
    FLAGGED = "flagged"
    WRONG_GRADIENTS = "wrong gradients"
    FORWARD_ONLY = "forward only"
    LESS_PRECISE = "less precise"
    REFERENCE_FAILED = "reference failed"
    HARNESS_ERROR = "harness error"

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self]

    @property
    def is_failure(self) -> bool:
        """Whether this status fails a run (exit code 2). Skips and harness problems do not."""
        return self not in (Status.CORRECT, Status.NEEDS_CUDA, Status.REFERENCE_FAILED, Status.HARNESS_ERROR)


class Backward(Vocabulary):
    """Whether a model's backward ran in the gradient check (what a worker reports with its gradients)."""

    RAN = "ok"  # its outputs carried a graph and backward returned: gradients follow
    FORWARD_ONLY = "forward only"  # no graph on its outputs, or backward raised


class Gradients(Vocabulary):
    """Training parity, as the judge found it (a record's `gradients`; "" there when not checked)."""

    MATCH = "match"  # every gradient the reference has, within the gradient tolerance
    MISMATCH = "mismatch"  # one is missing or outside it
    FORWARD_ONLY = "forward only"  # no backward: the outputs carry no graph, or backward raised


# in the judge's reason for gradients that a second draw, on another trial's inputs, settled (the first did not match)
SECOND_DRAW = "on a second draw"


DESCRIPTIONS: dict[Status, str] = {
    Status.CORRECT: "matched the reference on every check",
    Status.INCORRECT: "ran, but an output differed from the reference (shape, dtype, NaN/Inf or value)",
    Status.EXTRACT_FAILED: "no usable code could be extracted from the raw completion",
    Status.SYNTAX_ERROR: "the candidate file is not valid Python",
    Status.IMPORT_ERROR: "the module raised while being imported (outside the extension build)",
    Status.INTERFACE_ERROR: "the module defines no usable ModelNew class",
    Status.NEEDS_CUDA: "the candidate needs a CUDA device and this run has none (skipped, not failed)",
    Status.BUILD_FAILED: "compiling the inline extension failed",
    Status.CONSTRUCT_FAILED: "ModelNew(*get_init_inputs()) raised",
    Status.WEIGHTS_MISMATCH: (
        "the reference's state_dict loads into ModelNew neither by name, nor by registration order and shape, nor by "
        "unique shape (flags.weights_by_seed: fail)"
    ),
    Status.RUNTIME_ERROR: "forward raised, or returned something that is not tensors",
    Status.CUDA_FAULT: "a CUDA error (illegal address, device assert, launch failure)",
    Status.UNSAFE_MEMORY: (
        "an access outside its buffers: a write into the guard bands around an input, or a compute-sanitizer finding "
        "(flags.unsafe_memory: fail)"
    ),
    Status.MUTATED_INPUT: "forward changed one of its input tensors in place",
    Status.TIMEOUT: "a phase (build, construct, check, time) ran past its time limit",
    Status.OUT_OF_MEMORY: "device or host memory ran out",
    Status.CRASHED: "the worker process died (signal or non-zero exit) without reporting",
    Status.EXITED_EARLY: "the worker process exited cleanly before reporting a result",
    Status.FORGED_RESULT: "the result channel carried a message the harness did not write",
    Status.TAMPERED: (
        "the model replaced a timer, synchronisation, serialisation or harness function, or wrote into the problem, "
        "solutions or results tree"
    ),
    Status.NO_CUSTOM_KERNEL: (
        "correct, but none of its own kernels ran (CUDA: in the profiled call; CPU: no extension call, or only the "
        "reference's ATen operators)"
    ),
    Status.FLAGGED: (
        "correct, but an integrity flag whose policy is fail was raised (the reason names it; see the flags column)"
    ),
    Status.WRONG_GRADIENTS: (
        "forward matched, but a backward of the same loss gave other gradients (check.gradients: fail)"
    ),
    Status.FORWARD_ONLY: (
        "forward matched, but no gradients flow through it to its inputs or parameters (check.gradients: fail)"
    ),
    Status.LESS_PRECISE: (
        "more error against float64 than check.precision_ratio times the float32 reference's, and either faster "
        "than float32 arithmetic allows or outside the float32 tolerance by TF32's own error: TF32 or lower on a "
        "float32 problem (flags.below_float32: fail)"
    ),
    Status.REFERENCE_FAILED: "the problem's own reference could not be evaluated",
    Status.HARNESS_ERROR: "the harness itself failed on this candidate (a bug: please report it)",
}


# Integrity flags' codes (harness.core.flags applies their policies).
class Code(Vocabulary):
    NO_CUSTOM_KERNEL = "no-custom-kernel"  # none of the candidate's own kernels (or extension functions) ran
    WRAPS_REFERENCE = "wraps-reference"  # every kernel of the reference's call ran too: its own kernels only add work
    OWN_SHARE_LOW = "own-share-low"  # its own kernels are a sliver of the GPU time
    SIDE_STREAM = "side-stream"  # work on other streams or threads, or still running after forward returned
    TAMPER_SUSPECT = "tamper-suspect"  # code that reaches into the process or the device's settings
    FALLBACK = "fallback"  # forward catches exceptions: a failing kernel may fall back to PyTorch
    LESS_PRECISE = "less-precise"  # passes the tolerance, but with more error than the reference's precision
    # a time below the bytes floor, also when re-timed eagerly with device sync: not a result
    IMPLAUSIBLE_TIME = "implausible-time"
    # a time to look at: over check.max_plausible_speedup, or below its own profiled GPU time
    SUSPECT_TIME = "suspect-time"
    WRONG_GRADIENTS = "wrong-gradients"  # forward matches, backward gives other gradients
    FORWARD_ONLY = "forward-only"  # forward matches, no gradients flow
    UNSAFE_MEMORY = "unsafe-memory"  # an access outside its buffers (guard bands, compute-sanitizer)
    # the reference's weights could not be given to it: checked with its own, built under the shared seed
    WEIGHTS_BY_SEED = "weights-by-seed"
    # an output with no values of its own: a tensor subclass, the meta device, a storage smaller than its shape
    LAZY_OUTPUT = "lazy-output"
    # faster than the float32 compute floor with more error than float32 arithmetic gives: TF32 or lower on a
    # float32 problem
    BELOW_FLOAT32 = "below-float32"

    @property
    def key(self) -> str:
        """The config key of its policy: flags.<key>."""
        return self.value.replace("-", "_")


Finding = tuple[Code, str]  # a flag code and its evidence, in one line, before a policy applies
