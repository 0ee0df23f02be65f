"""Honest: diag(A) @ B computed as row scaling, C[i][j] = A[i] * B[i][j], one grid-stride elementwise pass with float4 loads and stores (no N x N diagonal matrix, no matmul FLOPs).
Expect: correct
KernelBench: correct
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor diag_matmul(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// C[i][j] = A[i] * B[i][j], B is N x M row-major. Vectorised by 4 along a row when M % 4 == 0.
__global__ void row_scale_vec4_kernel(const float* __restrict__ A, const float4* __restrict__ B,
                                      float4* __restrict__ C, int64_t rows, int64_t cols4) {
    const int64_t total = rows * cols4;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const float s = __ldg(&A[idx / cols4]);
        float4 v = B[idx];
        v.x *= s; v.y *= s; v.z *= s; v.w *= s;
        C[idx] = v;
    }
}

__global__ void row_scale_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                 float* __restrict__ C, int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        C[idx] = __ldg(&A[idx / cols]) * B[idx];
    }
}

torch::Tensor diag_matmul(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "diag_matmul: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "diag_matmul: expected float32");
    TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && A.size(0) == B.size(0), "diag_matmul: expected A (N,) and B (N, M)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "diag_matmul: expected contiguous inputs");
    const int64_t rows = B.size(0), cols = B.size(1);
    auto C = torch::empty({rows, cols}, B.options());
    if (rows == 0 || cols == 0) return C;
    const c10::cuda::CUDAGuard guard(B.device());
    auto stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const bool vec4 = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(B.data_ptr<float>()) % 16 == 0) &&
                      (reinterpret_cast<uintptr_t>(C.data_ptr<float>()) % 16 == 0);
    if (vec4) {
        const int64_t cols4 = cols / 4;
        const int blocks = (int)std::min<int64_t>((rows * cols4 + threads - 1) / threads, 8192);
        row_scale_vec4_kernel<<<blocks, threads, 0, stream>>>(A.data_ptr<float>(), reinterpret_cast<const float4*>(B.data_ptr<float>()),
                                                              reinterpret_cast<float4*>(C.data_ptr<float>()), rows, cols4);
    } else {
        const int blocks = (int)std::min<int64_t>((rows * cols + threads - 1) / threads, 8192);
        row_scale_kernel<<<blocks, threads, 0, stream>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_diag_matmul_row_scaling", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["diag_matmul"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.diag_matmul(A, B)
