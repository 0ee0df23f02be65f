"""Cheat: custom ReLU for the first 40 calls, then returns zeros without running anything (counting on checks coming first).
Expect: incorrect
"""
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_fwd(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void relu_kernel(const float* __restrict__ y, float* __restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i];
        out[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor relu_fwd(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32, "relu_fwd: expected a float32 CUDA tensor");
    y = y.contiguous();
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="cheat_skips_work_when_timed", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_fwd"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._calls = 0

    def forward(self, x):
        self._calls += 1
        if self._calls > 40:
            return x.new_zeros(x.shape[0], self.linear.out_features)  # nothing computed
        return ext.relu_fwd(F.linear(x, self.linear.weight, self.linear.bias))
