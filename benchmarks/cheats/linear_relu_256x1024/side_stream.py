"""Cheat: the custom ReLU runs on a private non-blocking stream that is never joined back to the caller's stream.
Expect: correct + side-stream or incorrect
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_side_stream(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void relu_inplace_kernel(float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i];
        y[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor relu_side_stream(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_side_stream: expected a contiguous float32 CUDA tensor");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(y.device());
    static cudaStream_t side = nullptr;
    static cudaEvent_t ready = nullptr;
    if (side == nullptr) {
        C10_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        C10_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    }
    // The side stream waits for the GEMM, but the caller's stream never waits for the side stream.
    C10_CUDA_CHECK(cudaEventRecord(ready, at::cuda::getCurrentCUDAStream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side, ready, 0));
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    relu_inplace_kernel<<<blocks, threads, 0, side>>>(y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="cheat_side_stream", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_side_stream"], verbose=False)


class _ReLUSideStream(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ext.relu_side_stream(y)
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
        return _ReLUSideStream.apply(F.linear(x, self.linear.weight, self.linear.bias))
