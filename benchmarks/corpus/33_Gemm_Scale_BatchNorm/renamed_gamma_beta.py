"""Honest: flat, renamed parameters (scale, gemm_weight, gemm_bias, gamma, beta; buffers running_mean, running_var, num_batches_tracked) in the reference's state_dict order and shapes; x @ W^T in cuBLAS, a custom kernel for (+ bias) * scale, then F.batch_norm with nn.BatchNorm1d's exact train/eval semantics.
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_scale(torch::Tensor y, torch::Tensor bias, torch::Tensor scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// out[i][j] = (y[i][j] + bias[j]) * scale[j]; y is rows x cols row-major.
__global__ void bias_scale_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                  const float* __restrict__ scale, float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t j = i % cols;
        out[i] = (y[i] + __ldg(&bias[j])) * __ldg(&scale[j]);
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

ext = load_inline(name="corpus_gemm_scale_bn_renamed_gamma_beta", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["bias_scale"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        # Same random draws, in the same order, as the reference: nn.Linear's init, then randn(scale_shape).
        lin = nn.Linear(in_features, out_features)
        scale = torch.randn(scale_shape)
        # Registered in the order of the reference's state_dict (its own `scale` first, then gemm.*, then bn.*).
        self.scale = nn.Parameter(scale)
        self.gemm_weight = nn.Parameter(lin.weight.detach())
        self.gemm_bias = nn.Parameter(lin.bias.detach())
        self.gamma = nn.Parameter(torch.ones(out_features))
        self.beta = nn.Parameter(torch.zeros(out_features))
        self.register_buffer("running_mean", torch.zeros(out_features))
        self.register_buffer("running_var", torch.ones(out_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.eps = eps
        self.momentum = momentum

    def forward(self, x):
        y = torch.mm(x, self.gemm_weight.t())
        y = ext.bias_scale(y, self.gemm_bias, self.scale)
        # nn.BatchNorm1d.forward, spelled out: count the batch, then batch statistics in training
        # (running stats updated with momentum and the unbiased variance), running stats in eval.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        return F.batch_norm(y, self.running_mean, self.running_var, self.gamma, self.beta,
                            self.training, factor, self.eps)
