"""`harness error` means ours only: a candidate's output of the wrong shape, size, dtype, layout,
device or count is `incorrect` with a one-line reason naming what is wrong, never an error of the
harness's data plane (a sparse or meta tensor has no bytes to put in the judge's mailbox: the
worker describes it instead, and the judge fails it)."""

import pytest

from harness import api
from harness.core.status import Status
from tests.sources import HONEST_FORWARD, scale_bias_relu

pytestmark = pytest.mark.slow  # real workers

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
    "meta": ("torch.empty_like(y, device='meta')", "output is on meta, the reference's on cpu"),
    "two_outputs": ("[y, y]", "returned 2 outputs, the reference returns 1"),
    "broadcast_row": ("y[:1].expand_as(y)", "of elements outside"),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    overrides = [f"results_dir={tmp_path_factory.mktemp('results')}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                 "device=cpu", "timing.enabled=false", "check.trials=1", "flags.no_custom_kernel=flag"]
    sources = {name: candidate(output) for name, (output, _) in WRONG.items()}
    sources["honest_non_contiguous"] = candidate("y.t().contiguous().t()")
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
