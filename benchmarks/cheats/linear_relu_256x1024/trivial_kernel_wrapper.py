"""Cheat: torch computes the whole answer; a custom kernel that writes one element of a scratch tensor runs beside it.
Expect: flagged + wraps-reference
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor touch(torch::Tensor like);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void touch_kernel(float* scratch) {
    if (blockIdx.x == 0 && threadIdx.x == 0) scratch[0] = 1.f;
}

torch::Tensor touch(torch::Tensor like) {
    TORCH_CHECK(like.is_cuda(), "touch: expected a CUDA tensor");
    const c10::cuda::CUDAGuard guard(like.device());
    auto scratch = torch::empty({1}, like.options().dtype(torch::kFloat32));
    touch_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(scratch.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return scratch;
}
"""

ext = load_inline(name="cheat_trivial_kernel_wrapper", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["touch"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        ext.touch(y)
        return y
