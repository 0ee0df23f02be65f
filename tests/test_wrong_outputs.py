"""`harness error` means ours only: a candidate's output of the wrong shape, size, dtype, layout,
device or count is `incorrect` with a one-line reason naming what is wrong, never an error of the
harness's data plane (a sparse, nested or meta tensor has no bytes to put in the judge's mailbox: the
worker describes it instead, and the judge fails it). An output with no values of its own (a tensor
subclass, the meta device) is `incorrect` and flagged `lazy-output`; what our code raises while it
handles a model's outputs right after its call is the model's `runtime error`."""

from pathlib import Path

import pytest
import torch

from harness import api
from harness.core.status import Status
from harness.device.failures import WorkerFailure
from harness.worker.compared import model_fault
from tests.sources import HONEST_FORWARD, scale_bias_relu

pytestmark = pytest.mark.slow  # real workers

ROOT = Path(__file__).resolve().parent.parent

def candidate(output: str) -> str:
    """ModelNew for 1_Scale_Bias_ReLU whose forward computes the right `y`, then returns `output`."""
    return scale_bias_relu(f"y = {HONEST_FORWARD.removeprefix('return ')}\n        return {output}")


WRONG = {  # what forward returns -> what the reason must say
    "empty": ("torch.empty(0)", "output has shape (0,), expected (64, 256)"),
    "empty_rows": ("y[:0]", "output has shape (0, 256)"),
    "larger": ("torch.cat([y, y])", "output has shape (128, 256)"),
    "scalar": ("y.sum()", "output has shape ()"),
    "float64": ("y.double()", "output has dtype float64, expected float32"),
    "bool": ("y > 0", "output has dtype bool"),
    "sparse": ("y.to_sparse()", "output has layout torch.sparse_coo, not a dense (strided) tensor"),
    "meta": ("torch.empty_like(y, device='meta')", "output is on the meta device: a shape with no values"),
    "nested": ("torch.nested.nested_tensor([y[0], y[1]])", "output has layout nested torch.strided, not a dense"),
    "two_outputs": ("[y, y]", "returned 2 outputs, the reference returns 1"),
    "broadcast_row": ("y[:1].expand_as(y)", "of elements outside"),
}

RAISES_WHEN_ASKED = """
class Opaque(torch.Tensor):
    def untyped_storage(self):
        raise RuntimeError("no storage here")
"""
LAZY = {  # a candidate whose output has no values of its own -> what the reason must say (flag lazy-output)
    # the catalog's cheat: a wrapper subclass that claims the shape and computes only when an operator reads it
    "lazy_output": (
        (ROOT / "benchmarks" / "cheats" / "1_Scale_Bias_ReLU" / "lazy_output.py").read_text(),
        "output is a torch.Tensor subclass (__candidate__.Deferred), not a plain tensor",
    ),
    "raises_when_asked": (
        scale_bias_relu(f"return {HONEST_FORWARD.removeprefix('return ')}.as_subclass(Opaque)", RAISES_WHEN_ASKED),
        "output is a torch.Tensor subclass (__candidate__.Opaque)",
    ),
    "meta": (candidate(WRONG["meta"][0]), WRONG["meta"][1]),
}
TUPLE_THAT_RAISES = """
class Outputs(tuple):
    def __iter__(self):
        raise RuntimeError("these outputs cannot be listed")
"""
AFTER_CALL = {  # forward returns, then our handling of what it returned raises -> what the reason must say
    "qint8": (candidate("torch.quantize_per_tensor(y, 0.1, 0, torch.qint8)"),
              "output 0 (qint8 on cpu) could not be copied"),
    "raising_tuple": (scale_bias_relu(f"return Outputs([{HONEST_FORWARD.removeprefix('return ')}])", TUPLE_THAT_RAISES),
                      "these outputs cannot be listed (after forward ("),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    overrides = [f"results_dir={tmp_path_factory.mktemp('results')}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                 "device=cpu", "timing.enabled=false", "check.trials=1", "flags.no_custom_kernel=flag"]
    sources = {name: candidate(output) for name, (output, _) in WRONG.items()}
    sources["honest_non_contiguous"] = candidate("y.t().contiguous().t()")
    sources["honest_parameter"] = candidate("torch.nn.Parameter(y, requires_grad=False)")  # not a subclass to judge
    sources |= {name: source for name, (source, _) in (LAZY | AFTER_CALL).items()}
    with api.Session(overrides=overrides) as session:
        futures = {name: session.submit("1_Scale_Bias_ReLU", source, name=name) for name, source in sources.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_output_is_incorrect_and_says_what_is_wrong(records, name):
    decision = records[name].decision
    assert decision.status is Status.INCORRECT, (decision.status, decision.reason)
    assert WRONG[name][1] in decision.reason, decision.reason


def test_a_right_output_with_other_strides_is_correct(records):
    assert records["honest_non_contiguous"].decision.status is Status.CORRECT, records["honest_non_contiguous"].decision.reason


def test_a_right_output_as_a_parameter_is_correct(records):
    record = records["honest_parameter"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert not any(f.code == "lazy-output" for f in record.integrity.flags)


@pytest.mark.parametrize("name", list(LAZY))
def test_an_output_with_no_values_of_its_own_is_incorrect_and_flagged_lazy_output(records, name):
    record = records[name]
    decision = record.decision
    assert decision.status is Status.INCORRECT, (decision.status, decision.reason)
    assert LAZY[name][1] in decision.reason, decision.reason
    flag = next(f for f in record.integrity.flags if f.code == "lazy-output")
    assert flag.policy == "fail" and LAZY[name][1].removeprefix("output ") in flag.reason, flag
    assert decision.stricter is not None and decision.stricter.code == "flag:lazy-output"
    assert record.timing.speedup is None


@pytest.mark.parametrize("name", list(AFTER_CALL))
def test_what_our_code_raises_on_a_models_outputs_is_the_models_runtime_error(records, name):
    decision = records[name].decision
    assert decision.status is Status.RUNTIME_ERROR, (decision.status, decision.reason)
    assert AFTER_CALL[name][1] in decision.reason, decision.reason


@pytest.mark.parametrize("raised, status", [
    # a sticky CUDA error, or one a launch left pending, met first by our check of the inputs after the call
    (torch.AcceleratorError("CUDA error: invalid argument"), Status.CUDA_FAULT),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), Status.CUDA_FAULT),
    (RuntimeError("shape '[16384, 16384]' is invalid for input of size 0"), Status.RUNTIME_ERROR),
    (WorkerFailure(Status.MUTATED_INPUT, "forward changed input 0 in place (call_0)"), Status.MUTATED_INPUT),
], ids=["accelerator-error", "cuda-error", "runtime-error", "a-status-of-its-own"])
def test_what_our_code_raises_right_after_the_call_is_the_models(raised, status):
    with pytest.raises(WorkerFailure) as caught:
        with model_fault("checking its inputs after forward (call_0)"):
            raise raised
    assert caught.value.status is status
    if not isinstance(raised, WorkerFailure):
        assert caught.value.reason.endswith("(checking its inputs after forward (call_0))"), caught.value.reason
