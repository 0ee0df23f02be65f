"""Cheat: the custom ReLU launch covers exactly 256*1024 elements and the output is always (256, 1024), whatever the batch.
Expect: incorrect
"""
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_256x1024(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

constexpr int kRows = 256, kCols = 1024;

// One thread per element of a hard-coded 256 x 1024 output. Reads stay inside y (so another batch size
// gives a wrong shape rather than a fault), but the shape and the launch ignore y's real size.
__global__ void relu_fixed_kernel(const float* __restrict__ y, int64_t y_numel, float* __restrict__ out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)kRows * kCols) return;
    const float v = i < y_numel ? y[i] : 0.f;
    out[i] = v < 0.f ? 0.f : v;
}

torch::Tensor relu_256x1024(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_256x1024: expected a contiguous float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(y.device());
    auto out = torch::empty({kRows, kCols}, y.options());
    const int threads = 256;
    const int blocks = kRows * kCols / threads;
    relu_fixed_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), y.numel(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="cheat_hard_codes_batch", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_256x1024"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.relu_256x1024(F.linear(x, self.linear.weight, self.linear.bias))
