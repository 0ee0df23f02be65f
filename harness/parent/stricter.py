"""Which of our checks failed a candidate that KernelBench's own check would have passed.

KernelBench (its v0 and v0.1 eval) builds both models under one seed, calls each in train mode on
`get_inputs()` under a few seeds, and compares the outputs with allclose(atol = rtol = 1e-2). Our
default checks more: a tighter tolerance, redrawn inputs, eval mode, repeats, another size, redrawn
weights, buffers, the timed output, integrity flags, guard bands. A failed record names the first
of those that made the difference, with a stable code and the figures, so a verdict read beside
KernelBench's says "stricter: tolerance, max abs error 4.7e-4" rather than a bare `incorrect`.

A pure function of the record's evidence and the plan's calls; `verdict` calls it.
"""

from __future__ import annotations

import enum
from typing import Optional, Sequence

from harness.core.protocol import BUFFERS_CHECK, TIMED_CHECK, Call
from harness.core.records import CheckResult, Flag, Stricter
from harness.core.status import Status

__all__ = ["Check", "stricter_than_kernelbench"]


class Check(str, enum.Enum):
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
    failing = next((f for f in flags if f.policy == "fail"), None)
    if failing is not None:
        return Stricter(f"{Check.FLAG.value}:{failing.code}", failing.reason[:200])
    if status is Status.MUTATED_INPUT:
        return Stricter(Check.MUTATED_INPUT.value, "KernelBench does not look at the inputs after a call")
    if status is not Status.INCORRECT or not checks or checks[-1].passed:
        return None
    check = checks[-1]  # a failing check ends the worker's run: it is the last one made
    within = "within KernelBench's atol = rtol = 1e-2"  # compare.KERNELBENCH_TOLERANCE, which set within_kernelbench
    loose = f"; max abs error {check.max_abs_error:.2e}, {within}" if check.within_kernelbench else ""
    if check.name == BUFFERS_CHECK:
        return Stricter(Check.BUFFERS.value, "KernelBench compares outputs only" + loose)
    if check.name == TIMED_CHECK:
        return Stricter(Check.TIMED_OUTPUT.value, "KernelBench does not check what its timed calls return" + loose)
    if len(checks) > len(calls):
        return None
    call = calls[len(checks) - 1]
    if call.distribution != "given":
        return Stricter(Check.REDRAWN_INPUTS.value, f"{check.name}: KernelBench runs get_inputs() only" + loose)
    if call.other_size:
        return Stricter(Check.OTHER_SIZE.value, f"{check.name}: KernelBench runs one size" + loose)
    if call.repeat:
        return Stricter(Check.REPEAT.value, f"{check.name}: KernelBench calls once per trial" + loose)
    if call.mode == "eval":
        return Stricter(Check.EVAL_MODE.value, f"{check.name}: KernelBench calls both models in train mode" + loose)
    if check.within_kernelbench:
        return Stricter(Check.TOLERANCE.value, f"{check.name}: max abs error {check.max_abs_error:.2e}, max rel error {check.max_rel_error:.2e}; {within}")
    if redrawn_weights and same_seed is not None and (same_seed.passed or same_seed.within_kernelbench):
        return Stricter(Check.REDRAWN_WEIGHTS.value, f"{check.name}: right with the weights both models were built with, wrong with redrawn ones")
    return None
