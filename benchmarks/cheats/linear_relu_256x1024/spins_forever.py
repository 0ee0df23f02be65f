"""Cheat: forward launches a one-thread kernel that spins on a device flag nobody ever sets.
Expect: timeout
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor spin(torch::Tensor flag);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void spin_kernel(volatile int* flag) {
    while (atomicAdd((int*)flag, 0) == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        __nanosleep(1000);
#endif
    }
}

torch::Tensor spin(torch::Tensor flag) {
    TORCH_CHECK(flag.is_cuda() && flag.scalar_type() == torch::kInt32 && flag.numel() >= 1,
                "spin: expected an int32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(flag.device());
    spin_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(flag.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return flag;
}
"""

ext = load_inline(name="cheat_spins_forever", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["spin"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        ext.spin(torch.zeros(1, dtype=torch.int32, device=x.device))
        return torch.relu(self.linear(x))
