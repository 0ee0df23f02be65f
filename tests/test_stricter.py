"""A failed record says which of our checks KernelBench's own would not have made (harness/parent/verdict.py),
as a pure function of the evidence: table-driven, no workers."""
import pytest

from harness.core import protocol as P
from harness.core.plan import Plan
from harness.core.protocol import Call
from harness.core.records import CheckResult, Flag
from harness.core.status import Status
from harness.parent.verdict import stricter_than_kernelbench

CALLS = (Call(0, "train"), Call(0, "eval"), Call(1, "train", "normal"), Call(1, "eval", "normal"),
         Call(2, "train", other_size=True), Call(0, "eval", repeat=1))
OK = CheckResult("ok", True, "ok", 0.0, 0.0, 0.0)


def failed(name="trial 1 (train)", loose=False):
    return CheckResult(name, False, "output: 1% of elements outside ...", 4.7e-4, 3e-3, 0.01, within_kernelbench=loose)


@pytest.mark.parametrize("checks, code", [
    ([failed(loose=True)], "tolerance"),  # tanh-GELU: within 1e-2, outside our float32 rule
    ([OK, OK, failed("trial 2 (train, normal inputs)")], "redrawn-inputs"),  # valid only on get_inputs()' values
    ([OK, failed("trial 1 (eval)")], "eval-mode"),  # ignores running statistics
    ([OK] * 4 + [failed("trial 3 (train, other size)")], "other-size"),  # hard-coded shapes
    ([OK] * 5 + [failed("repeat 1 of trial 1 (eval)")], "repeat"),  # a race
    ([OK] * 6 + [failed("buffers after the calls")], "buffers"),  # skips the running-stat update
    ([OK] * 6 + [failed("last timed call on trial 1 (eval)")], "timed-output"),
])
def test_a_failing_check_kernelbench_does_not_make_is_named(checks, code):
    found = stricter_than_kernelbench(Status.INCORRECT, checks, CALLS, OK, (), True)
    assert found is not None and found.code == code, found


def test_the_tolerance_difference_carries_the_figures():
    found = stricter_than_kernelbench(Status.INCORRECT, [failed(loose=True)], CALLS, OK, (), True)
    assert "4.70e-04" in found.detail and "1e-2" in found.detail


def test_wrong_on_get_inputs_beyond_kernelbench_tolerance_is_no_difference():
    """A dropped term, a structure bug: KernelBench fails these as well."""
    assert stricter_than_kernelbench(Status.INCORRECT, [failed()], CALLS, failed("same-seed construction (eval)"), (), True) is None


def test_right_with_initial_weights_and_wrong_with_redrawn_ones_names_the_weights():
    found = stricter_than_kernelbench(Status.INCORRECT, [failed()], CALLS, OK, (), True)
    assert found.code == "redrawn-weights"
    assert stricter_than_kernelbench(Status.INCORRECT, [failed()], CALLS, OK, (), False) is None  # weights were not redrawn


def test_a_failing_flag_and_a_mutated_input_are_ours_and_a_correct_record_has_none():
    flags = (Flag("side-stream", "flag", "..."), Flag("no-custom-kernel", "fail", "none of its own kernels ran"))
    assert stricter_than_kernelbench(Status.NO_CUSTOM_KERNEL, [OK], CALLS, OK, flags, True).code == "flag:no-custom-kernel"
    assert stricter_than_kernelbench(Status.MUTATED_INPUT, [], CALLS, OK, (), True).code == "mutated-input"
    assert stricter_than_kernelbench(Status.CORRECT, [OK], CALLS, OK, flags, True) is None
    assert stricter_than_kernelbench(Status.CRASHED, [], CALLS, None, (), True) is None


@pytest.mark.parametrize("kind", sorted(P.CHECK_NAMES))
def test_a_check_of_a_declared_kind_is_known_by_its_stored_name(kind):
    assert P.check_kind(CheckResult(P.CHECK_NAMES[kind], False, "...")) is kind


def test_every_planned_calls_check_is_a_call(make_config):
    cfg = make_config("check.other_size=true", "check.repeats=2", "check.input_distributions=[given, normal, signed, shifted]", "check.trials=4")
    labels = [c.label for c in Plan.fresh(cfg).calls] + [c.label for c in CALLS]
    assert {P.check_kind(CheckResult(label, False, "...")) for label in labels} == {P.CheckKind.CALL}


def test_a_failing_check_of_no_call_beyond_the_plan_is_no_difference():
    assert stricter_than_kernelbench(Status.INCORRECT, [OK] * 6 + [failed("trial 9 (eval)")], CALLS, OK, (), True) is None
