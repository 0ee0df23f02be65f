"""Honest: upper-triangular matmul that relies on the documented structure: C[i][j] (j >= i) sums only k in [i, j], tiles below the diagonal are written as zeros without any work, and only the K tiles between the row tile and the column tile are visited.
Expect: correct
KernelBench: correct
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor triu_matmul(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

// A, B upper triangular (N x N). C = triu(A @ B): C[i][j] = sum_{k=i}^{j} A[i][k] * B[k][j] for j >= i, else 0.
__global__ void triu_matmul_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, int64_t N) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TILE + ty;
    const int64_t col = (int64_t)blockIdx.x * TILE + tx;
    if (blockIdx.y > blockIdx.x) {   // the whole tile lies below the diagonal
        if (row < N && col < N) C[row * N + col] = 0.f;
        return;
    }
    float acc = 0.f;
    // k runs over [i, j]: from the first row of this row tile to the last column of this column tile.
    const int64_t k_first = (int64_t)blockIdx.y * TILE;
    const int64_t k_last = min(N, (int64_t)(blockIdx.x + 1) * TILE);
    for (int64_t k0 = k_first; k0 < k_last; k0 += TILE) {
        const int64_t ka = k0 + tx;   // column of A
        const int64_t kb = k0 + ty;   // row of B
        As[ty][tx] = (row < N && ka < N && ka >= row) ? A[row * N + ka] : 0.f;   // k >= i
        Bs[ty][tx] = (col < N && kb < N && kb <= col) ? B[kb * N + col] : 0.f;   // k <= j
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    if (row < N && col < N) C[row * N + col] = (row <= col) ? acc : 0.f;
}

torch::Tensor triu_matmul(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "triu_matmul: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "triu_matmul: expected float32");
    TORCH_CHECK(A.dim() == 2 && A.size(0) == A.size(1) && A.sizes() == B.sizes(), "triu_matmul: expected two N x N matrices");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "triu_matmul: expected contiguous inputs");
    const int64_t N = A.size(0);
    auto C = torch::empty({N, N}, A.options());
    if (N == 0) return C;
    const c10::cuda::CUDAGuard guard(A.device());
    const dim3 threads(TILE, TILE);
    const unsigned tiles = (unsigned)((N + TILE - 1) / TILE);
    TORCH_CHECK(tiles <= 65535, "triu_matmul: N too large");
    triu_matmul_kernel<<<dim3(tiles, tiles), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_triu_matmul_triangular", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["triu_matmul"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.triu_matmul(A, B)
