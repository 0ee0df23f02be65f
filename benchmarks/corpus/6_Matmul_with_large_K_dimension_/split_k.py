"""Honest: split-K fp32 matmul for the large-K shape: each z-slice of blocks runs a 32x32 shared-memory tiled product over its own K range into a workspace, and a second kernel sums the slices in a fixed order.
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_split_k(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

// Partial products: ws[z][m][n] = sum_{k in [z*chunk, min(K, (z+1)*chunk))} A[m][k] * B[k][n].
__global__ void matmul_partial_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ ws, int64_t M, int64_t N, int64_t K, int64_t chunk) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TILE + ty;
    const int64_t col = (int64_t)blockIdx.x * TILE + tx;
    const int64_t k_begin = (int64_t)blockIdx.z * chunk;
    const int64_t k_end = min(K, k_begin + chunk);
    float acc = 0.f;
    for (int64_t k0 = k_begin; k0 < k_end; k0 += TILE) {
        const int64_t ka = k0 + tx, kb = k0 + ty;
        As[ty][tx] = (row < M && ka < k_end) ? A[row * K + ka] : 0.f;
        Bs[ty][tx] = (kb < k_end && col < N) ? B[kb * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) ws[(int64_t)blockIdx.z * M * N + row * N + col] = acc;
}

// C[i] = sum_z ws[z][i], always in the order z = 0, 1, ... (deterministic).
__global__ void splitk_reduce_kernel(const float* __restrict__ ws, float* __restrict__ C, int64_t MN, int64_t splits) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += stride) {
        float s = 0.f;
        for (int64_t z = 0; z < splits; ++z) s += ws[z * MN + i];
        C[i] = s;
    }
}

torch::Tensor matmul_split_k(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_split_k: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matmul_split_k: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_split_k: shape mismatch");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matmul_split_k: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    if (K == 0) return C.zero_();
    const c10::cuda::CUDAGuard guard(A.device());
    auto stream = at::cuda::getCurrentCUDAStream();

    // About 8192 of K per slice, at most 64 slices; the chunk is a whole number of tiles.
    int64_t splits = std::max<int64_t>(1, std::min<int64_t>(64, (K + 8191) / 8192));
    const int64_t chunk = ((K + splits - 1) / splits + TILE - 1) / TILE * TILE;
    splits = (K + chunk - 1) / chunk;
    auto ws = torch::empty({splits, M, N}, A.options());

    const dim3 threads(TILE, TILE);
    const dim3 blocks((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE), (unsigned)splits);
    TORCH_CHECK(blocks.y <= 65535, "matmul_split_k: M too large");
    matmul_partial_kernel<<<blocks, threads, 0, stream>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), ws.data_ptr<float>(), M, N, K, chunk);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t MN = M * N;
    const int rthreads = 256;
    const int rblocks = (int)std::min<int64_t>((MN + rthreads - 1) / rthreads, 4096);
    splitk_reduce_kernel<<<rblocks, rthreads, 0, stream>>>(ws.data_ptr<float>(), C.data_ptr<float>(), MN, splits);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_large_k_matmul_split_k", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matmul_split_k"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_split_k(A, B)
