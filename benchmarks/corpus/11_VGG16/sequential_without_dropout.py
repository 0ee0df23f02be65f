"""Honest: VGG16 with every ReLU replaced by a custom CUDA ReLU module, the features Sequential kept as the reference's, and the classifier rebuilt without the Dropout(p=0.0) layers (so its Linears sit at classifier.0/2/4 rather than 0/3/6); convs, pooling and Linears stay in torch.
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_fwd(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ out, int64_t n4) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = v.x < 0.f ? 0.f : v.x;
        v.y = v.y < 0.f ? 0.f : v.y;
        v.z = v.z < 0.f ? 0.f : v.z;
        v.w = v.w < 0.f ? 0.f : v.w;
        out[i] = v;
    }
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t start, int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        out[i] = v < 0.f ? 0.f : v;
    }
}

// out = max(x, 0), out of place (NaN stays NaN, as torch.relu).
torch::Tensor relu_fwd(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "relu_fwd: expected a float32 CUDA tensor");
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
        const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, 8192);
        relu_vec4_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                         reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (n4 * 4 < n) {
        const int64_t rest = n - n4 * 4;
        const int blocks = (int)std::min<int64_t>((rest + threads - 1) / threads, 8192);
        relu_kernel<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

ext = load_inline(name="corpus_vgg16_sequential_without_dropout", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_fwd"], extra_cuda_cflags=["-O3"], verbose=False)


class CudaReLU(nn.Module):
    """ReLU through the custom kernel (no parameters, so Sequential indices are as with nn.ReLU)."""

    def forward(self, x):
        return ext.relu_fwd(x)


class ModelNew(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            # Block 1
            nn.Conv2d(3, 64, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(64, 64, kernel_size=3, padding=1),
            CudaReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            # Block 2
            nn.Conv2d(64, 128, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(128, 128, kernel_size=3, padding=1),
            CudaReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            # Block 3
            nn.Conv2d(128, 256, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            CudaReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            # Block 4
            nn.Conv2d(256, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(512, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(512, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            # Block 5
            nn.Conv2d(512, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(512, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.Conv2d(512, 512, kernel_size=3, padding=1),
            CudaReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        # Dropout(p=0.0) is the identity, so it is left out: the Linears are classifier.0, .2 and .4.
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            CudaReLU(),
            nn.Linear(4096, 4096),
            CudaReLU(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x
