"""A CUDA kernel for 1_Scale_Bias_ReLU launched with an invalid configuration (2048 threads a block,
over the limit of 1024) whose launch error is never checked: the kernel never runs, forward returns
an uninitialised tensor, and the error stays pending until the next launch that checks for one.
Its verdict is `CUDA fault` (or `runtime error`), never `harness error` (tests/test_gpu_faults.py;
with 2048 replaced by 256 it is correct)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void scale_bias_relu(const float* x, const float* b, float* out, float s, long n, long cols) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] * s + b[i % cols];
        out[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor b, double s) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 2048;
    scale_bias_relu<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n, xc.size(1));
    return out;
}
"""

ext = load_inline(
    name="unchecked_invalid_launch_2048",
    cpp_sources="torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor b, double s);",
    cuda_sources=cuda_source,
    functions=["scale_bias_relu_forward"],
)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        return ext.scale_bias_relu_forward(x, self.bias, self.scale)
