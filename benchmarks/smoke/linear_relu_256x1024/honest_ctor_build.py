"""Honest: cuBLAS GEMM with bias through F.linear, then a custom out-of-place ReLU kernel; the extension is
compiled by load_inline inside ModelNew.__init__, not at import (the build pool must construct it to build ahead).
Expect: correct
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_out(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void smoke_ctor_relu_kernel(const float* __restrict__ y, float* __restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i];
        out[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor relu_out(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_out: expected a contiguous float32 CUDA tensor");
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    smoke_ctor_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = None  # the extension, built by the first ModelNew


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        out = _ext.relu_out(y.contiguous())
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        global _ext
        if _ext is None:
            _ext = load_inline(
                name="smoke_ctor_relu",
                cpp_sources=cpp_src,
                cuda_sources=cuda_src,
                functions=["relu_out"],
                verbose=False,
            )
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ReLU.apply(F.linear(x, self.linear.weight, self.linear.bias))
