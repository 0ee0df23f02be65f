"""Wrong: reference-named modules (gemm, scale, bn) so the weights load by name; x @ W^T in cuBLAS, then a custom kernel meant to apply (+ bias) * scale that only adds the bias (the multiply by scale was dropped), then self.bn.
Expect: incorrect
KernelBench: incorrect
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_scale(torch::Tensor y, torch::Tensor bias, torch::Tensor scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// Meant to be out[i][j] = (y[i][j] + bias[j]) * scale[j]; the scale factor never gets applied.
__global__ void bias_scale_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                  const float* __restrict__ scale, float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t j = i % cols;
        out[i] = y[i] + __ldg(&bias[j]);
    }
}

torch::Tensor bias_scale(torch::Tensor y, torch::Tensor bias, torch::Tensor scale) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda() && scale.is_cuda(), "bias_scale: expected CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32 && scale.scalar_type() == torch::kFloat32,
                "bias_scale: expected float32");
    TORCH_CHECK(y.dim() == 2 && bias.numel() == y.size(1) && scale.numel() == y.size(1), "bias_scale: shape mismatch");
    y = y.contiguous();
    bias = bias.contiguous();
    scale = scale.contiguous();
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous() && scale.is_contiguous(), "bias_scale: expected contiguous inputs");
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 8192);
    bias_scale_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(), out.data_ptr<float>(), n, y.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="corpus_gemm_scale_bn_drops_scale", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["bias_scale"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        y = ext.bias_scale(y, self.gemm.bias, self.scale)
        return self.bn(y)
