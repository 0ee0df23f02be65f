"""The comparison knows floating point: honest float32 in another summation order passes, changed
mathematics or precision fails (the numbers behind the rule: benchmarks/tolerance_rule.py)."""
import torch

from harness.compare import compare_outputs
from harness.config import Tolerance, load_config


def outputs(t):
    return {"types": ["Tensor"], "tensors": [t], "layouts": ["torch.strided"], "devices": ["cpu"], "aliases": [-1]}


def check(got, expected, tolerances=None):
    return compare_outputs("trial 1 (eval)", outputs(expected), outputs(got), tolerances or load_config().check.tolerances)


def blocked(a, b, block):
    out = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], block):
        out += a[:, k : k + block] @ b[k : k + block]
    return out


def test_a_long_float32_reduction_in_another_order_passes_where_elementwise_alone_fails():
    torch.manual_seed(0)
    a, b = torch.randn(128, 16384), torch.randn(16384, 128)
    reference, honest = a @ b, blocked(a, b, 64)
    elementwise = {"float32": Tolerance(atol=1e-4, rtol=1e-4)}
    assert not check(honest, reference, elementwise).passed  # elements that cancel to near zero
    result = check(honest, reference)
    assert result.passed, result.reason


def test_changed_mathematics_or_precision_still_fails_with_the_numbers():
    torch.manual_seed(1)
    x = torch.randn(1 << 16)
    tanh = check(torch.nn.functional.gelu(x, approximate="tanh"), torch.nn.functional.gelu(x))
    assert not tanh.passed and "norm=0.0001 x rms" in tanh.reason and tanh.max_abs_error > 1e-4
    a, b = torch.randn(128, 4096), torch.randn(4096, 128)
    low = check(a.bfloat16().float() @ b.bfloat16().float(), a @ b)
    assert not low.passed
    tf32 = lambda t: (t.view(torch.int32) & ~0x1FFF).view(torch.float32)  # noqa: E731
    assert not check(tf32(a) @ tf32(b), a @ b).passed
    h = torch.randn(256, 256)
    assert not check(h, h + 0.05 * torch.randn(256)).passed  # a dropped bias term


def test_a_problem_that_declares_its_tolerance_keeps_it(tmp_path):
    cfg = load_config().for_problem({"HARNESS_TOLERANCES": {"float32": {"atol": 1e-3, "rtol": 0.0}}})
    assert cfg.check.tolerances["float32"] == Tolerance(atol=1e-3, rtol=0.0, norm=0.0)
