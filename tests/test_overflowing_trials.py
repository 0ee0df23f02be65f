"""A trial whose redrawn inputs overflow the reference, where the problem's own inputs do not, uses the problem's
own distribution, with a note: a cumulative product of 2048 values in [0, 4) is Inf in nearly every element, and
an honest scan in another order meets the overflow a few elements earlier or later. A kernel that is wrong on
the problem's own inputs still fails."""

import pytest

from harness import api
from harness.core.status import Status

pytestmark = pytest.mark.slow

CUMPROD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumprod(x, dim=self.dim)

batch_size = 64
input_shape = (2048,)
dim = 1

def get_inputs():
    return [torch.rand(batch_size, *input_shape)]

def get_init_inputs():
    return [dim]
'''

# products of blocks of 32, carried from block to block: the same mathematics in another order
BLOCKED = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1] // 32, 32)
        inner = torch.cumprod(rows, dim=2)
        carry = torch.cumprod(inner[:, :, -1], dim=1)
        carry = torch.cat([torch.ones_like(carry[:, :1]), carry[:, :-1]], dim=1)
        return (inner * carry[:, :, None]).reshape(x.shape)
'''

EXCLUSIVE = BLOCKED.replace("return (inner * carry[:, :, None]).reshape(x.shape)", "return (inner * carry[:, :, None]).reshape(x.shape) / x")


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    from tests.evaluations import fast_config

    root = tmp_path_factory.mktemp("overflow")
    (root / "problems").mkdir()
    (root / "problems" / "90_cumprod.py").write_text(CUMPROD)
    cfg = fast_config(root, build_cache, measurement_cache, f"problems_dir={root / 'problems'}", "timing.enabled=false", "check.trials=4")
    from harness.core.store import read_records

    with api.Session(cfg) as session:
        found = {name: session.evaluate("90_cumprod", source, name=name) for name, source in (("blocked", BLOCKED), ("exclusive", EXCLUSIVE))}
        folder = session.store.dir
    found["reference"] = next(r for r in read_records(folder) if type(r).__name__ == "ReferenceRecord")
    return found


def test_an_honest_scan_in_another_order_passes_and_the_record_says_which_trials_fell_back(records):
    record = records["blocked"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    notes = [n for n in records["reference"].outcome.notes if "overflow the reference" in n]
    assert notes and all("uses the problem's own distribution" in n for n in notes), records["reference"].outcome.notes
    assert any(n.startswith("trial 3's signed inputs overflow the reference") for n in notes), notes
    names = [c.name for c in record.checks.results]
    assert "trial 3 (train)" in names and not any("signed inputs" in n for n in names), names


def test_a_wrong_scan_still_fails_on_the_problems_own_inputs(records):
    record = records["exclusive"]
    assert record.decision.status is Status.INCORRECT, record.decision.reason
    assert record.decision.reason.startswith("trial 1"), record.decision.reason


def test_the_overflowing_share_counts_inf_and_nan_in_views_and_scalars():
    import torch

    from harness.judge.degenerate import non_finite_share

    x = torch.ones(3000, 700)
    x[5, 3], x[2999, 0] = float("inf"), float("nan")
    assert non_finite_share([x]) == non_finite_share([x.t()]) == 2 / x.numel()  # a transposed view too
    assert non_finite_share([torch.tensor(float("-inf")), torch.ones(3)]) == 0.25
    assert non_finite_share([torch.ones(0), torch.arange(3), "not a tensor"]) == 0.0
