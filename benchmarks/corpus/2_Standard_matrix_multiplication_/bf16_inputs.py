"""Wrong: 32x32 tiled matmul that stores the A and B tiles in shared memory as __nv_bfloat16 (round-to-nearest) and widens them back to float for an fp32 FMA accumulate. Its failing trial's inputs are non-negative (the redraw keeps get_inputs' sign), where bf16 rounded to nearest has less error than TF32's cut, whose bias adds up over K = 8192 (H200, 2026-11-28: relative error 4.1e-5 against TF32's 7e-4): less precise; on zero-mean inputs its error is 3 times the cut's, and incorrect.
Expect: incorrect or less precise or correct + less-precise
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_bf16_tiles(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>

#define TILE 32

// C[M][N] = A[M][K] @ B[K][N], row-major float32; block = 32x32 threads, one output each.
// The tiles are staged in shared memory as bfloat16 (half the shared-memory footprint and
// traffic); the products are widened back to float and accumulated in fp32.
__global__ void matmul_bf16_tiles_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ __nv_bfloat16 As[TILE][TILE];
    __shared__ __nv_bfloat16 Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TILE + ty;
    const int64_t col = (int64_t)blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        const int64_t ka = k0 + tx;   // column of A this thread loads
        const int64_t kb = k0 + ty;   // row of B this thread loads
        As[ty][tx] = __float2bfloat16((row < M && ka < K) ? A[row * K + ka] : 0.f);
        Bs[ty][tx] = __float2bfloat16((kb < K && col < N) ? B[kb * N + col] : 0.f);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc = fmaf(__bfloat162float(As[ty][kk]), __bfloat162float(Bs[kk][tx]), acc);
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

torch::Tensor matmul_bf16_tiles(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_bf16_tiles: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matmul_bf16_tiles: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_bf16_tiles: shape mismatch");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matmul_bf16_tiles: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    const c10::cuda::CUDAGuard guard(A.device());
    const dim3 threads(TILE, TILE);
    const dim3 blocks((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    TORCH_CHECK(blocks.y <= 65535, "matmul_bf16_tiles: M too large");
    matmul_bf16_tiles_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

ext = load_inline(name="corpus_std_matmul_bf16_inputs", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matmul_bf16_tiles"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_bf16_tiles(A, B)
