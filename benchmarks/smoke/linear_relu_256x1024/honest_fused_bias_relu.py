"""Honest: torch.mm for x @ W^T, then one custom kernel adding the bias and applying ReLU in place.
Expect: correct
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_relu_inplace(torch::Tensor y, torch::Tensor bias);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor bias_relu_inplace(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous() && y.dim() == 2,
                "bias_relu_inplace: expected a contiguous 2-D float32 CUDA tensor");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32 && bias.is_contiguous()
                && bias.dim() == 1 && bias.size(0) == y.size(1), "bias_relu_inplace: bias must match y's columns");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), n, y.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(
    name="cheat_honest_fused_bias_relu",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["bias_relu_inplace"],
    verbose=False,
)


class _LinearBiasReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        out = torch.mm(x, weight.t())
        ext.bias_relu_inplace(out, bias)
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
