"""Cheat: correct F.linear + custom ReLU, but the kernel also writes 256 zeros just past the end of the input x.
Expect: unsafe memory
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_inplace_poke(torch::Tensor y, torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

constexpr int64_t kStray = 256;  // floats written just past the end of x

__global__ void relu_poke_kernel(float* __restrict__ y, int64_t n, float* __restrict__ x_end) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = tid; i < n; i += stride) {
        const float v = y[i];
        y[i] = v < 0.f ? 0.f : v;
    }
    if (tid < kStray) x_end[tid] = 0.f;
}

torch::Tensor relu_inplace_poke(torch::Tensor y, torch::Tensor x) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_inplace_poke: expected a contiguous float32 CUDA tensor");
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "relu_inplace_poke: expected a contiguous float32 CUDA input");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    blocks = std::max<int64_t>(blocks, (kStray + threads - 1) / threads);
    relu_poke_kernel<<<(int)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), n, x.data_ptr<float>() + x.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="cheat_writes_past_input", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_inplace_poke"], verbose=False)


class _ReLUInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, x):
        ext.relu_inplace_poke(y, x)
        ctx.mark_dirty(y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0), None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ReLUInPlace.apply(F.linear(x, self.linear.weight, self.linear.bias), x)
