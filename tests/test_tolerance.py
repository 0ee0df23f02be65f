"""The comparison knows floating point: honest float32 in another summation order passes, changed
mathematics or precision fails (the numbers behind the rule: benchmarks/tolerance_rule.py)."""
import pytest
import torch

from harness.core.config import Tolerance, load_config
from harness.judge.compare import compare_outputs, output_rms, rms, rounding_noise


def outputs(t):
    return {"types": ["Tensor"], "tensors": [t], "layouts": ["torch.strided"], "devices": ["cpu"], "aliases": [-1]}


def check(got, expected, tolerances=None, noise=None):
    return compare_outputs("trial 1 (eval)", outputs(expected), outputs(got), tolerances or load_config().check.tolerances, noise)


def sequential(a, b):
    """a @ b summed one rank-1 term at a time in float32: elementwise operations only, so the
    rounding is the same on every CPU (a matrix library's order is not)."""
    out = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        out += torch.outer(a[:, k], b[k])
    return out


def test_a_long_float32_reduction_in_another_order_passes_where_elementwise_alone_fails():
    torch.manual_seed(0)
    a, b = torch.randn(128, 16384), torch.randn(16384, 128)
    reference, honest = (a.double() @ b.double()).float(), sequential(a, b)
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


GELU_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_the_kernelbench_profile_accepts_tanh_gelu_as_kernelbench_does_and_the_default_does_not(tmp_path):
    """configs/kernelbench.yaml reproduces KernelBench's verdict (atol = rtol = 1e-2, same inputs
    distribution, train mode only); the default's tolerance fails the tanh approximation."""
    from harness import api
    from harness.core.config import ROOT
    from harness.core.status import Status

    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "26_GELU.py").write_text(GELU_PROBLEM)
    tanh = GELU_PROBLEM.replace("class Model(", "class ModelNew(").replace("gelu(x)", "gelu(x, approximate='tanh')")
    common = {"problems_dir": str(problems), "results_dir": str(tmp_path / "results"), "timing.enabled": False}
    verdicts = {}
    for profile in ("kernelbench", "default"):
        record = api.evaluate("26_GELU", tanh, config=ROOT / "configs" / f"{profile}.yaml", overrides={**common, "flags.no_custom_kernel": "flag"})
        verdicts[profile] = record.decision.status
        if profile == "default":  # and the record says which of our checks KernelBench's does not make
            assert "norm=0.0001" in record.decision.reason
            assert record.decision.stricter is not None and record.decision.stricter.code == "tolerance" and "within KernelBench's" in record.decision.stricter.detail
    assert verdicts == {"kernelbench": Status.CORRECT, "default": Status.INCORRECT}


def test_an_output_smaller_than_atol_is_still_judged_against_its_own_size():
    """A softmax over 400000 columns is ~2.5e-6 per element: atol = 1e-4 alone passes zeros. The
    norm-wise rule bounds the error's rms by 1% of the output's there; honest float32 is far inside."""
    torch.manual_seed(3)
    x = torch.rand(2, 400_000)  # as KernelBench's level1/23 draws it: no element near atol
    reference = torch.softmax(x, dim=-1)
    honest = torch.softmax(x.double(), dim=-1).float()  # another order, another precision inside
    assert check(honest, reference).passed
    zeros = check(torch.zeros_like(reference), reference)
    assert not zeros.passed and "smaller than atol" in zeros.reason and zeros.within_kernelbench
    halved = check(reference * 0.5, reference)
    assert not halved.passed
    loose = {"float32": Tolerance(atol=1e-2, rtol=1e-2, norm=0.0)}  # KernelBench's: no norm-wise term, zeros pass
    assert check(torch.zeros_like(reference), reference, loose).passed


def test_rounding_noise_around_an_exact_zero_is_not_judged_against_itself():
    """A value that is zero in exact arithmetic comes out as noise of both signs, ~1e-6: another
    order gives other noise. The rule for small outputs leaves it to atol."""
    torch.manual_seed(4)
    noise = torch.randn(4096) * 1e-6
    assert check(torch.randn(4096) * 1e-6, noise).passed


def test_an_output_that_is_rounding_noise_is_judged_against_the_noise_not_its_own_size():
    """A mean of group-normalised values is zero in exact arithmetic: in float32 it is rounding noise
    (~6e-9, one-signed after a ReLU). The small-output rule judged it against itself and failed an
    honest kernel; judged against the noise (the level the judge finds from the float64 twin),
    another noise and exact zeros pass with a note, and a wrong value above the noise fails."""
    torch.manual_seed(5)
    reference = torch.relu(torch.randn(4096) * 6e-9)
    other = torch.relu(torch.randn(4096) * 6e-9)  # another summation order: another noise
    assert not check(other, reference).passed  # the small-output rule alone
    level = {0: rms(reference)}
    for got in (other, torch.zeros_like(reference)):
        result = check(got, reference, noise=level)
        assert result.passed and result.note.startswith("output is rounding noise around zero") and "a defect of the problem" in result.note
    wrong = check(torch.full_like(reference, 1e-5), reference, noise=level)  # inside atol, far above the noise
    assert not wrong.passed and "rounding noise around zero" in wrong.reason and "over 1000x that" in wrong.reason
    assert not check(reference + 0.5, reference, noise=level).passed
    kernelbench = {"float32": Tolerance(atol=1e-2, rtol=1e-2, norm=0.0)}  # no norm-wise term: left to atol, as KernelBench does, with the note
    loose = check(torch.full_like(reference, 1e-5), reference, kernelbench, noise=level)
    assert loose.passed and "rounding noise" in loose.note


def test_the_small_output_rule_still_fails_a_weightless_kernel_on_a_scalar_loss():
    """A scalar loss below atol is small, not noise (its float64 value is its own size): a kernel
    that drops the weights is off by ~10% and still fails, an exactly rounded one passes."""
    torch.manual_seed(6)
    x, w = torch.rand(4096), torch.rand(4096) + 0.5

    def loss(x, w):
        return torch.mean((x * w) ** 2) * 1e-5

    reference = loss(x, w)
    noise = rounding_noise([reference], output_rms([loss(x.double(), w.double())]))
    assert noise == {}
    weightless = check(loss(x, torch.ones_like(w)), reference, noise=noise)
    assert not weightless.passed and "smaller than atol" in weightless.reason
    assert check(loss(x.double(), w.double()).float(), reference, noise=noise).passed
