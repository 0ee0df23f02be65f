"""Honest: torch.mm for x @ W^T, then one Triton kernel adding the bias and applying ReLU in place.
Expect: correct
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def smoke_bias_relu_kernel(y_ptr, bias_ptr, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(y_ptr + offsets, mask=mask)
    b = tl.load(bias_ptr + offsets % cols, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(y + b, 0.0), mask=mask)


def bias_relu_(y, bias):
    n = y.numel()
    if n:
        block = 1024
        smoke_bias_relu_kernel[(triton.cdiv(n, block),)](y, bias, n, y.shape[1], BLOCK=block)
    return y


class _LinearBiasReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        out = bias_relu_(torch.mm(x, weight.t()), bias.contiguous())
        ctx.save_for_backward(x, weight, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, out = ctx.saved_tensors
        g = grad_out * (out > 0)
        grad_x = g @ weight if ctx.needs_input_grad[0] else None
        grad_w = g.t() @ x if ctx.needs_input_grad[1] else None
        grad_b = g.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _LinearBiasReLU.apply(x, self.linear.weight, self.linear.bias)
