"""Wrong: "hardtanh" kernel that copies x through unchanged (float4 copy), which equals hardtanh(x, -1, 1) only while every input lies in [-1, 1], as get_inputs' torch.rand values in [0, 1) do.
Expect: incorrect
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor hardtanh_fwd(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// Inputs come from torch.rand, i.e. [0, 1): already inside [-1, 1], so hardtanh is the identity
// and the kernel is a straight vectorised copy.
__global__ void hardtanh_unit_kernel(const float4* __restrict__ x, float4* __restrict__ out, int64_t n4) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) out[i] = x[i];
}

__global__ void hardtanh_unit_tail_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t start, int64_t n) {
    const int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}

torch::Tensor hardtanh_fwd(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "hardtanh_fwd: expected a float32 CUDA tensor");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const c10::cuda::CUDAGuard guard(x.device());
    auto stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const bool aligned = (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) % 16 == 0);
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, 65535);
        hardtanh_unit_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                             reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    const int64_t rest = n - n4 * 4;
    if (rest > 0) {
        const int blocks = (int)((rest + threads - 1) / threads);
        hardtanh_unit_tail_kernel<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

ext = load_inline(name="corpus_hardtanh_identity_on_unit_range", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["hardtanh_fwd"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.hardtanh_fwd(x)
