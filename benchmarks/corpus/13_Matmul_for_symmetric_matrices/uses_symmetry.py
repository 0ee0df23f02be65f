"""Honest: tiled fp32 matmul that relies on B being symmetric (as the problem guarantees): reads B[j][k] row-wise (coalesced) in place of B[k][j], i.e. computes A @ B.T.
Expect: correct
KernelBench: correct
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor symm_matmul(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

// C = A @ B with B symmetric (N x N): B[k][j] == B[j][k], so C[i][j] = sum_k A[i][k] * B[j][k]
// and both operands are read along their rows (contiguous K), which coalesces both tile loads.
__global__ void symm_matmul_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];   // Bs[j][k], padded against bank conflicts
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TILE + ty;
    const int64_t col = (int64_t)blockIdx.x * TILE + tx;
    const int64_t brow = (int64_t)blockIdx.x * TILE + ty;   // the row j of B (= column j, by symmetry)
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        const int64_t k = k0 + tx;
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

torch::Tensor symm_matmul(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "symm_matmul: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "symm_matmul: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && B.size(0) == B.size(1) && A.size(1) == B.size(0),
                "symm_matmul: expected A (M x K) and a square symmetric B (K x K)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "symm_matmul: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    const c10::cuda::CUDAGuard guard(A.device());
    const dim3 threads(TILE, TILE);
    const dim3 blocks((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    TORCH_CHECK(blocks.y <= 65535, "symm_matmul: M too large");
    symm_matmul_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_symmetric_matmul_uses_symmetry", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["symm_matmul"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.symm_matmul(A, B)
