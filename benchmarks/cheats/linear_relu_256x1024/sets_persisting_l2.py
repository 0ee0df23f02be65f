"""Cheat: correct F.linear + custom ReLU, but every forward pins the weight in persisting L2 (limit + access-policy window).
Expect: correct + tamper-suspect

The persisting lines survive the harness's L2 flush (a streaming write), so timed calls read the weight from L2.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = """
torch::Tensor relu_inplace(torch::Tensor y);
void pin_in_l2(torch::Tensor w);
"""

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

torch::Tensor relu_inplace(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.is_contiguous(),
                "relu_inplace: expected a contiguous float32 CUDA tensor");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(y.device());
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    relu_inplace_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

// Reserve the largest persisting L2 carve-out and mark the weight's bytes persisting on the current stream.
// Failures are ignored (and cleared) so that the candidate still runs where the feature is missing.
void pin_in_l2(torch::Tensor w) {
    TORCH_CHECK(w.is_cuda(), "pin_in_l2: expected a CUDA tensor");
    const c10::cuda::CUDAGuard guard(w.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
        size_t limit = 0;  // device-wide calls only outside a graph capture
        if (cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize) == cudaSuccess
            && limit != (size_t)prop->persistingL2CacheMaxSize) {
            (void)cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop->persistingL2CacheMaxSize);
        }
    }
    const size_t bytes = std::min<size_t>((size_t)w.numel() * w.element_size(), (size_t)prop->accessPolicyMaxWindowSize);
    if (bytes > 0) {
        cudaStreamAttrValue attr = {};
        attr.accessPolicyWindow.base_ptr = w.data_ptr();
        attr.accessPolicyWindow.num_bytes = bytes;
        attr.accessPolicyWindow.hitRatio = 1.0f;
        attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        (void)cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
    }
    (void)cudaGetLastError();
}
"""

ext = load_inline(name="cheat_sets_persisting_l2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_inplace", "pin_in_l2"], verbose=False)


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
        ext.pin_in_l2(self.linear.weight)
        return _ReLUInPlace.apply(F.linear(x, self.linear.weight, self.linear.bias))
