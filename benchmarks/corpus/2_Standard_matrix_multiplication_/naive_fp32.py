"""Honest: naive fp32 matmul, one thread per output element C[row][col], a plain loop over K with fp32 FMA accumulation.
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_naive(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// C[M][N] = A[M][K] @ B[K][N], all row-major float32.
__global__ void matmul_naive_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + row * K;
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k) {
        acc = fmaf(a[k], B[k * N + col], acc);
    }
    C[row * N + col] = acc;
}

torch::Tensor matmul_naive(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_naive: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matmul_naive: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_naive: shape mismatch");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matmul_naive: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    if (K == 0) return C.zero_();
    const c10::cuda::CUDAGuard guard(A.device());
    const dim3 threads(16, 16);
    const dim3 blocks((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    TORCH_CHECK(blocks.y <= 65535, "matmul_naive: M too large");
    matmul_naive_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_std_matmul_naive_fp32", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matmul_naive"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_naive(A, B)
