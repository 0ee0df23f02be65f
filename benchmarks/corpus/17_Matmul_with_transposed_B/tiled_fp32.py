"""Honest: 32x32 shared-memory tiled fp32 matmul computing A @ B.T straight from B as given (N x K, row-major; both tiles loaded along K, B tile padded against bank conflicts).
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_bt(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

// C[M][N] = A[M][K] @ B[N][K]^T: C[m][n] = sum_k A[m][k] * B[n][k]. Row-major float32.
__global__ void matmul_bt_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                 float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];   // Bs[n][k]; +1 so that Bs[tx][kk] hits 32 banks
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TILE + ty;       // output row (m)
    const int64_t col = (int64_t)blockIdx.x * TILE + tx;       // output column (n)
    const int64_t brow = (int64_t)blockIdx.x * TILE + ty;      // row of B this thread loads
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        const int64_t k = k0 + tx;   // both tiles are read along K: coalesced
        As[ty][tx] = (row < M && k < K) ? A[row * K + k] : 0.f;
        Bs[ty][tx] = (brow < N && k < K) ? B[brow * K + k] : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc = fmaf(As[ty][kk], Bs[tx][kk], acc);
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

torch::Tensor matmul_bt(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_bt: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matmul_bt: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(1), "matmul_bt: shape mismatch (A is M x K, B is N x K)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matmul_bt: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    const c10::cuda::CUDAGuard guard(A.device());
    const dim3 threads(TILE, TILE);
    const dim3 blocks((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    TORCH_CHECK(blocks.y <= 65535, "matmul_bt: M too large");
    matmul_bt_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_matmul_transposed_b_tiled_fp32", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matmul_bt"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_bt(A, B)
