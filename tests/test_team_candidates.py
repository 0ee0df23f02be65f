"""The team candidates train like their references: with each CUDA extension replaced by an eager
stand-in of the same signature (this machine may have no GPU), a backward through ModelNew gives
the reference's gradients for the input and every parameter, in train and eval mode, and leaves
the same buffers. The kernels themselves are checked on the GPU (tests/test_gpu.py, run.py)."""
from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
TEAM = sorted(p for p in (ROOT / "solutions").glob("*/team_*.py") if (ROOT / "problems" / "level2" / f"{p.parent.name}.py").exists())


def _stand_ins(**_kwargs) -> types.SimpleNamespace:
    """Eager versions of every extension function the team candidates load (same arguments, same in-place contract)."""

    def p70(y, bias, s):
        if bias.numel():
            y += bias
        return y.copy_(y + torch.sigmoid(y) * s)

    def p37(y, bias, gamma, beta, groups, eps):
        return y.copy_(F.group_norm(torch.sigmoid(y) * y + bias, groups, gamma, beta, eps))

    def p88(y, bias, gamma, beta, w, groups, eps):
        if bias.numel():
            y += bias
        z = F.group_norm(y, groups, gamma, beta, eps)
        z = z * torch.sigmoid(z) * w
        return y.copy_(z * torch.sigmoid(z))

    def p21(y, bias, scale, gamma, beta, groups, eps):
        s = torch.sigmoid((y + bias.view(-1, 1, 1)) * scale.view(-1, 1, 1))
        return y.copy_(F.group_norm(s, groups, gamma, beta, eps))

    def fold(w, b, scale, gamma, beta, mean, var, eps):
        a = gamma / torch.sqrt(var + eps)
        return [w * (scale * a)[:, None], (b * scale - mean) * a + beta]

    def bn_train(y, scale, gamma, beta, mean, var, update, momentum, eps):
        out = F.batch_norm(y * scale, mean if update else None, var if update else None, gamma, beta,
                           training=True, momentum=momentum, eps=eps)
        return y.copy_(out)

    def direct(*_args):
        raise AssertionError("the direct-convolution kernel only runs on CUDA tensors")

    return types.SimpleNamespace(
        bias_sigmoid_scale_residual_=p70, swish_bias_groupnorm_=p37, groupnorm_swish_mul_swish_=p88,
        bias_scale_sigmoid_groupnorm_=p21, fold_scale_bn_eval=fold, scale_bn_train_=bn_train,
        conv3x3_bias_scale_sigmoid_groupnorm=direct)


def _load(path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    import torch.utils.cpp_extension

    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", _stand_ins)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _small(x: torch.Tensor) -> torch.Tensor:
    return x[:8] if x.dim() == 2 else x[:2, :, :12, :12]


def test_every_level2_problem_has_a_team_candidate():
    problems = {p.stem for p in (ROOT / "problems" / "level2").glob("*.py")}
    assert problems and problems <= {p.parent.name for p in TEAM}


@pytest.mark.slow
@pytest.mark.parametrize("path", TEAM, ids=lambda p: f"{p.parent.name[:2]}-{p.stem}")
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_team_candidate_backward_gives_the_reference_gradients(path, mode, monkeypatch):
    problem = _load(ROOT / "problems" / "level2" / f"{path.parent.name}.py", "team_problem", monkeypatch)
    candidate = _load(path, "team_candidate", monkeypatch)
    torch.manual_seed(0)
    init = problem.get_init_inputs()
    reference, new = problem.Model(*init), candidate.ModelNew(*init)
    new.load_state_dict(reference.state_dict())
    reference.train(mode == "train")
    new.train(mode == "train")
    x = _small(problem.get_inputs()[0])
    x_ref, x_new = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ref, out_new = reference(x_ref), new(x_new)
    # A GEMM's float32 sums differ in their last bits from run to run on the CPU (the BLAS picks its
    # path by the buffers' alignment): the forward is compared as loosely as the gradients are.
    torch.testing.assert_close(out_new, out_ref, atol=1e-3, rtol=1e-3)
    weights = torch.randn(out_ref.shape, generator=torch.Generator().manual_seed(1))
    (out_ref * weights).sum().backward()
    (out_new * weights).sum().backward()
    torch.testing.assert_close(x_new.grad, x_ref.grad, atol=1e-3, rtol=1e-3)
    grads_ref = {n: p.grad for n, p in reference.named_parameters()}
    grads_new = {n: p.grad for n, p in new.named_parameters()}
    assert grads_new.keys() == grads_ref.keys()
    for name, grad in grads_ref.items():
        assert grads_new[name] is not None, f"{name} gets no gradient"
        torch.testing.assert_close(grads_new[name], grad, atol=1e-3, rtol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    for (name, a), (_, b) in zip(reference.named_buffers(), new.named_buffers()):
        torch.testing.assert_close(b, a, msg=lambda m, n=name: f"buffer {n}: {m}")


@pytest.mark.slow
def test_an_in_place_kernel_behind_autograd_fails_this_check(monkeypatch):
    """The check can fail: 70's kernel called directly on the GEMM output (as the candidate once
    did) leaves autograd differentiating the GEMM alone."""
    problem = _load(ROOT / "problems" / "level2" / "70_Gemm_Sigmoid_Scaling_ResidualAdd.py", "team_problem", monkeypatch)
    ext = _stand_ins()
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs())
    x = _small(problem.get_inputs()[0])
    y = F.linear(x, model.gemm.weight, model.gemm.bias)
    with torch.no_grad():  # what a data_ptr write looks like to autograd: nothing happened
        ext.bias_sigmoid_scale_residual_(y, y.new_empty(0), model.scaling_factor)
    y.sum().backward()
    wrong = model.gemm.weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    assert not torch.allclose(wrong, model.gemm.weight.grad, atol=1e-3, rtol=1e-3)
