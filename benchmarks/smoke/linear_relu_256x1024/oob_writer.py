"""Cheat: correct F.linear + custom ReLU, but the kernel also writes 1024 floats 64 KB past the end of a 5 MB
scratch buffer of its own (memory the caching allocator holds for other tensors, so nothing faults).
Expect: unsafe memory
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_inplace(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

constexpr int64_t kGap = (64 << 10) / 4;  // 64 KB past the end of the scratch, in floats
constexpr int64_t kStray = 1024;          // floats written there

__global__ void relu_inplace_kernel(float* __restrict__ y, int64_t n, float* scratch, int64_t scratch_n) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = tid; i < n; i += stride) {
        const float v = y[i];
        y[i] = v < 0.f ? 0.f : v;
    }
    if (tid < kStray) scratch[scratch_n + kGap + tid] = 0.f;
}

torch::Tensor relu_inplace(torch::Tensor y) {
    // 5 MB: the caching allocator carves it from a 20 MB segment, so the stray writes stay mapped
    auto scratch = torch::empty({(5 << 20) / 4}, y.options());
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_inplace: expected a contiguous float32 CUDA tensor");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    blocks = std::max<int64_t>(blocks, (kStray + threads - 1) / threads);  // enough threads for the stray writes
    relu_inplace_kernel<<<(int)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), n, scratch.data_ptr<float>(), scratch.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(
    name="cheat_oob_writer_near", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_inplace"], verbose=False
)


class _ReLUInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ext.relu_inplace(y)
        ctx.mark_dirty(y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ReLUInPlace.apply(F.linear(x, self.linear.weight, self.linear.bias))
