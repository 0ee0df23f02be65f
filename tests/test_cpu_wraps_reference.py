"""On the CPU, torch's own answer behind a trivial C++ call does not rank as a custom kernel.

The ATen compute operators of one checked forward of the candidate are compared with the
reference's on the same call (harness.core.integrity.reference_ops): the decision, the operator classes,
the profile's reading and the verdict are tested here without a build. The CPU decoys of the cheat
catalog (benchmarks/cheats/<level0 problem>/, each file's `Expect:` line) and the shipped honest C++
candidates of the level0 problems are then evaluated end to end, one evaluation per problem (slow:
C++ builds).
"""
import importlib.util
import types
from pathlib import Path

import pytest
import torch

from tests.records import reference_record
from harness.core import protocol as P
from harness.core.config import load_config
from harness.core.integrity import is_compute, reference_ops
from harness.core.protocol import Call, WorkerOutcome
from harness.core.records import CandidateRecord, CheckResult, ForwardOps, OpCount, ReferenceRecord, to_dict
from harness.core.status import Code, Status
from harness.core.store import RunStore, read_records
from harness.device.profile import observe_ops, observed_call, summarize_ops
from harness.parent.verdict import Case, Compared, Reported, VerdictRules, decide
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cheats", ROOT / "benchmarks" / "cheats.py")
cheats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cheats)

LEVEL0 = sorted(p.stem for p in (ROOT / "problems" / "level0").glob("*.py"))
CATALOG = [name for name in LEVEL0 if (cheats.CATALOG / name).is_dir()]  # the CPU decoys, a folder per level0 problem
# the shipped honest C++ candidates of the level0 problems (load_inline with C++ sources only)
HONEST_CPP = sorted(p for name in LEVEL0 for p in (ROOT / "solutions" / name).glob("*.py") if "load_inline" in p.read_text() and "cuda_sources" not in p.read_text())


def ops(*named, other=0, error=""):
    """ForwardOps from ("aten::addmm", count) or ("aten::addmm", count, inside) tuples."""
    return ForwardOps(tuple(OpCount(*n) for n in named), other, 1, error)


LINEAR_GELU = ops(("aten::addmm", 1), ("aten::gelu", 1), other=9)  # the reference of 2_Linear_GELU
CALLED = {"ext.f": 14}


# -- the decision: operators in, finding out ---------------------------------------------------------


def test_torch_running_every_reference_operator_beside_an_extension_call_wraps_the_reference():
    found = reference_ops(ops(("aten::addmm", 1), ("aten::gelu", 1), other=11), LINEAR_GELU, CALLED)
    assert [code for code, _ in found] == [Code.WRAPS_REFERENCE]
    assert "(aten::addmm x1, aten::gelu x1)" in found[0][1] and "2 of them outside its extension functions" in found[0][1] and "(ext.f)" in found[0][1]


def test_an_extension_that_only_calls_the_reference_operators_is_no_custom_kernel():
    found = reference_ops(ops(("aten::addmm", 1, 1), ("aten::gelu", 1, 1)), LINEAR_GELU, CALLED)
    assert [code for code, _ in found] == [Code.NO_CUSTOM_KERNEL]
    assert found[0][1].startswith("its extension functions (ext.f) call torch's operators for the reference's work")


def test_torch_and_the_extension_sharing_the_reference_operators_wrap_the_reference():
    found = reference_ops(ops(("aten::addmm", 1, 1), ("aten::gelu", 1, 0)), LINEAR_GELU, CALLED)
    assert [code for code, _ in found] == [Code.WRAPS_REFERENCE]


@pytest.mark.parametrize("candidate", [
    ops(other=3),  # allocations, views and copies only: its own loops do the work
    ops(("aten::addmm", 1)),  # keeps torch's GEMM, its own GELU
    ops(("aten::mm", 1), ("aten::gelu", 1)),  # its own bias epilogue after torch's mm
    ops(("aten::addmm", 1), ("aten::gelu_backward", 1)),  # names are compared whole
])
def test_a_kernel_that_replaces_a_reference_operator_is_not_flagged(candidate):
    assert reference_ops(candidate, LINEAR_GELU, CALLED) == []


def test_each_reference_operator_must_run_as_often():
    reference = ops(("aten::add", 2), ("aten::mul", 1))
    assert reference_ops(ops(("aten::add", 1), ("aten::mul", 1)), reference, CALLED) == []
    assert [c for c, _ in reference_ops(ops(("aten::add", 3), ("aten::mul", 1)), reference, CALLED)] == [Code.WRAPS_REFERENCE]


def test_an_in_place_variant_is_its_operator():
    reference = ops(("aten::mul", 1), ("aten::add", 1), ("aten::clamp_min", 1))
    candidate = ops(("aten::mul", 1), ("aten::add_", 1), ("aten::clamp_min_", 1))
    assert [c for c, _ in reference_ops(candidate, reference, CALLED)] == [Code.WRAPS_REFERENCE]


@pytest.mark.parametrize("candidate, reference, called", [
    (None, LINEAR_GELU, CALLED),  # not observed (a worker that reported nothing)
    (LINEAR_GELU, None, CALLED),  # the reference not observed (a CUDA run)
    (ops(error="the profiler did not start: busy"), LINEAR_GELU, CALLED),
    (LINEAR_GELU, ops(error="the profiler did not start: busy"), CALLED),
    (LINEAR_GELU, LINEAR_GELU, {"ext.f": 0}),  # its extension never ran: extension_use's no-custom-kernel says so
    (LINEAR_GELU, LINEAR_GELU, {}),
    (ops(other=2), ops(other=2), CALLED),  # a reference with no compute operator: nothing to wrap
])
def test_without_both_observations_and_an_extension_call_nothing_is_found(candidate, reference, called):
    assert reference_ops(candidate, reference, called) == []


@pytest.mark.parametrize("name", ["aten::addmm", "aten::mm", "aten::clamp_min", "aten::relu_", "aten::gelu", "aten::native_batch_norm", "aten::mul", "aten::add_", "aten::sum", "aten::_slow_conv2d_forward", "aten::__and__"])
def test_operators_that_do_arithmetic_are_compute(name):
    assert is_compute(name)


@pytest.mark.parametrize("name", [
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zero_", "aten::fill_", "aten::ones_like", "aten::resize_",  # allocations, fills
    "aten::copy_", "aten::clone", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::detach", "aten::resolve_conj", "aten::item",  # copies
    "aten::view", "aten::reshape", "aten::t", "aten::transpose", "aten::as_strided", "aten::expand", "aten::unsqueeze", "aten::select", "aten::slice",  # views
    "aten::is_contiguous", "aten::_nnpack_available", "aten::_has_compatible_shallow_copy_type",  # queries
    "harness::call", "<built-in method relu of type object at 0x1>", "cheat.copy_out",  # not ATen operators
])
def test_views_copies_allocations_and_queries_are_not_compute(name):
    assert not is_compute(name)


# -- reading the profile ------------------------------------------------------------------------------


def _events(tree, parent=None):
    """Profiler-like events (name, cpu_parent) from a nested (name, [children]) tree, in order."""
    name, children = tree
    event = types.SimpleNamespace(name=name, cpu_parent=parent)
    found = [event]
    for child in children:
        found.extend(_events(child, event))
    return found


def test_the_innermost_compute_operators_count_and_those_under_an_extension_call_are_inside():
    linear = ("aten::linear", [("aten::t", [("aten::transpose", [("aten::as_strided", [])])]), ("aten::addmm", [("aten::expand", []), ("aten::copy_", [])])])
    relu = ("aten::relu", [("aten::clamp_min", [])])
    extension = ("<built-in method f of pybind11_builtins.pybind11_detail_function_record_v1 object at 0x7f>", [("aten::empty_like", []), relu])
    forward = ("model.py(12): forward", [linear, ("harness/device/buildcache.py(164): counted", [extension]), ("<built-in method f of type object at 0x1>", [relu])])
    summary = summarize_ops(_events(forward), is_compute, {"f"}, call=1)
    assert summary.compute == (OpCount("aten::addmm", 1, 0), OpCount("aten::clamp_min", 2, 1))
    assert summary.other == 1 + 3 + 2 + 1 + 2 and summary.call == 1 and summary.error == ""  # linear, its view chain, addmm's two, empty_like, the two relus
    unattributed = summarize_ops(_events(forward), is_compute)  # no extension functions named: nothing is inside
    assert unattributed.compute == (OpCount("aten::addmm", 1, 0), OpCount("aten::clamp_min", 2, 0))


def test_a_forward_is_observed_for_its_aten_operators_without_changing_its_result():
    linear, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    with torch.no_grad():
        out, seen = observe_ops(lambda: torch.relu(linear(x)), is_compute, call=3)
        assert torch.equal(out, torch.relu(linear(x)))
    assert [(op.name, op.count, op.inside) for op in seen.compute] == [("aten::addmm", 1, 0), ("aten::clamp_min", 1, 0)]
    assert seen.other > 0 and seen.call == 3 and seen.error == ""


def test_a_forward_that_raises_raises_and_the_profiler_is_stopped():
    def broken():
        torch.ones(2).add_(1)
        raise ValueError("the model's own error")

    with pytest.raises(ValueError, match="the model's own error"):
        observe_ops(broken, is_compute)
    _, seen = observe_ops(lambda: torch.ones(2) * 2, is_compute)  # a second observation starts: the first one stopped
    assert [op.name for op in seen.compute] == ["aten::mul"] and seen.error == ""


def test_the_observed_call_is_the_first_eval_call_at_the_problem_size():
    assert observed_call((Call(0, "train"), Call(0, "eval"), Call(1, "train"), Call(1, "eval"))) == 1
    assert observed_call((Call(2, "train", other_size=True), Call(2, "eval", other_size=True), Call(0, "train"), Call(0, "eval"))) == 3
    assert observed_call((Call(0, "train"), Call(1, "train"))) == 0


# -- the verdict --------------------------------------------------------------------------------------

CALLS = (Call(0, "train"), Call(0, "eval"))
OK = CheckResult("ok", True, "ok", 3e-5, 1e-4, 0.0)
REFERENCE = reference_record(run_id="r", problem="p", problem_hash="h", problem_path="p.py", device="cpu", device_name="cpu", ok=True, reason="ok", forward_ops=LINEAR_GELU)


def cpu_verdict(candidate_ops, called=CALLED, policies=()):
    cfg = load_config(overrides=[f"flags.{key}={value}" for key, value in policies])
    outcome = WorkerOutcome(None, P.Done({}), (), "done", 0, 1.0, 100)
    compared = Compared(outcome, [OK] * len(CALLS), OK, {}, None)
    reported = Reported(counted=P.ExtensionCalls(dict(called), dict(called), candidate_ops))
    return decide(Case(compared, CALLS, True, REFERENCE, VerdictRules.of(cfg), "cpu", reported))


def test_on_the_cpu_wraps_reference_fails_by_default_and_its_policy_applies():
    wraps = ops(("aten::addmm", 1), ("aten::gelu", 1))
    failed = cpu_verdict(wraps)
    assert failed.status is Status.FLAGGED and failed.reason.startswith("wraps-reference: every compute operator")
    assert [(f.code, f.policy) for f in failed.flags] == [("wraps-reference", "fail")]
    assert failed.evidence.forward_ops == wraps
    flagged = cpu_verdict(wraps, policies=[("wraps_reference", "flag")])
    assert flagged.status is Status.CORRECT and [f.code for f in flagged.flags] == ["wraps-reference"]


def test_on_the_cpu_an_extension_calling_aten_is_no_custom_kernel_and_an_uncalled_one_stays_so():
    inside = cpu_verdict(ops(("aten::addmm", 1, 1), ("aten::gelu", 1, 1)))
    assert inside.status is Status.NO_CUSTOM_KERNEL and "call torch's operators for the reference's work" in inside.reason
    uncalled = cpu_verdict(ops(("aten::addmm", 1), ("aten::gelu", 1)), called={"ext.f": 0})
    assert uncalled.status is Status.NO_CUSTOM_KERNEL and [f.code for f in uncalled.flags] == ["no-custom-kernel"]
    assert "was called in its checked forward calls" in uncalled.reason


def test_on_the_cpu_an_honest_kernel_stays_correct_and_a_failed_observation_is_a_warning():
    honest = cpu_verdict(ops(("aten::addmm", 1), other=4))
    assert honest.status is Status.CORRECT and honest.flags == () and honest.warnings == ()
    unobserved = cpu_verdict(ops(error="the profiler did not start: busy"))
    assert unobserved.status is Status.CORRECT and unobserved.warnings == ("observing the candidate's ATen operators failed: the profiler did not start: busy",)


# -- end to end: the catalog's CPU decoys and the shipped honest C++ candidates ------------------------


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory, build_cache):
    """Every CPU decoy of the catalog and every shipped honest C++ candidate, per level0 problem, in
    one evaluation per problem (a judge each), under the default flag policies, without timing."""
    root = tmp_path_factory.mktemp("cpu-wraps")
    cfg = load_config(overrides=[
        f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={root / 'measurements'}",
        "device=cpu", "baselines.compile_modes=[]", "check.trials=2", "timing.enabled=false", "timeouts.check=60",
    ])
    records = {}
    for name in LEVEL0:
        paths = sorted((cheats.CATALOG / name).glob("*.py")) if name in CATALOG else []
        paths += [p for p in HONEST_CPP if p.parent.name == name]
        if not paths:
            continue
        problem = resolve_problem(name, cfg.path(cfg.problems_dir))
        store = RunStore(cfg.path(cfg.results_dir), f"cpu-wraps-{name}")
        evaluate_problem(problem, [Candidate(p.stem, p) for p in paths], cfg, "cpu", store)
        for record in read_records(store.dir):
            if isinstance(record, (CandidateRecord, ReferenceRecord)):
                records[(name, record.identity.candidate if isinstance(record, CandidateRecord) else "_reference")] = record
    return records


@pytest.mark.slow
def test_each_cpu_decoy_gets_the_verdict_its_file_expects_and_none_is_ranked(cpu_records):
    assert CATALOG, "no CPU decoys in the catalog"
    wrong = []
    for name in CATALOG:
        for candidate, options in cheats.expectations(cheats.CATALOG / name).items():
            record = cpu_records[(name, candidate)]
            if not cheats.matches(to_dict(record), options) or record.decision.status is Status.CORRECT or record.timing.speedup is not None:
                wrong.append(f"{name}/{candidate}: {record.decision.status.value}: {record.decision.reason}")
    assert wrong == []


@pytest.mark.slow
def test_the_shipped_honest_cpp_candidates_stay_correct_without_integrity_flags(cpu_records):
    assert HONEST_CPP, "no shipped honest C++ candidate for a level0 problem"
    parity = {"forward-only", "wrong-gradients"}  # training parity: a C++ kernel without backward is flagged for it, as before
    for path in HONEST_CPP:
        record = cpu_records[(path.parent.name, path.stem)]
        integrity = record.integrity
        assert record.decision.status is Status.CORRECT, f"{path}: {record.decision.status.value}: {record.decision.reason}"
        assert [f.code for f in integrity.flags if f.code not in parity] == [], integrity.flags
        assert integrity.forward_ops is not None and integrity.forward_ops.error == "" and sum(integrity.extension_calls.values()) > 0


@pytest.mark.slow
def test_both_sides_record_the_aten_operators_of_the_same_call(cpu_records):
    for name in CATALOG:
        reference = cpu_records[(name, "_reference")]
        ops = reference.profile.forward_ops
        assert ops is not None and ops.compute and ops.error == ""
        for (problem, candidate), record in cpu_records.items():
            # a decoy that fails a check (lazy_output) ends before its observed call
            if problem == name and candidate != "_reference" and record.decision.status is not Status.INCORRECT:
                assert record.integrity.forward_ops is not None and record.integrity.forward_ops.call == ops.call, candidate
