"""Wrong: float4, 8x-unrolled matvec (one 1024-thread block per row) whose unrolled main loop guards with v + 8*blockDim < K/4 instead of v + 7*blockDim < K/4 and has no remainder loop, so the last 32768 elements of each row (3% of K = 1048576) are never summed.
Expect: incorrect
KernelBench: incorrect
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matvec_unrolled(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define THREADS 1024
#define UNROLL 8

__inline__ __device__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// out[row] = sum_k A[row][k] * x[k]. Each thread handles float4 vectors v, v + THREADS, ...,
// UNROLL of them per step, all loads of a step issued before the FMAs.
__global__ void __launch_bounds__(THREADS) matvec_unrolled_kernel(const float* __restrict__ A, const float* __restrict__ x,
                                                                  float* __restrict__ out, int64_t K) {
    const int64_t row = blockIdx.x;
    const float4* a4 = reinterpret_cast<const float4*>(A + row * K);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t K4 = K / 4;
    float acc = 0.f;
    // main loop: a full step of UNROLL vectors stays in bounds
    for (int64_t v = threadIdx.x; v + UNROLL * THREADS < K4; v += UNROLL * THREADS) {
        float4 av[UNROLL], xv[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            av[u] = a4[v + u * THREADS];
            xv[u] = __ldg(&x4[v + u * THREADS]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            acc = fmaf(av[u].x, xv[u].x, acc);
            acc = fmaf(av[u].y, xv[u].y, acc);
            acc = fmaf(av[u].z, xv[u].z, acc);
            acc = fmaf(av[u].w, xv[u].w, acc);
        }
    }

    __shared__ float partial[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    acc = warp_sum(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < THREADS / 32 ? partial[lane] : 0.f;
        acc = warp_sum(acc);
        if (lane == 0) out[row] = acc;
    }
}

torch::Tensor matvec_unrolled(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matvec_unrolled: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matvec_unrolled: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && B.size(1) == 1 && A.size(1) == B.size(0), "matvec_unrolled: expected A (M x K) and B (K x 1)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matvec_unrolled: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1);
    TORCH_CHECK(K % 4 == 0, "matvec_unrolled: K must be a multiple of 4");
    auto out = torch::empty({M, 1}, A.options());
    if (M == 0) return out;
    const c10::cuda::CUDAGuard guard(A.device());
    TORCH_CHECK(M <= 2147483647LL, "matvec_unrolled: M too large");
    matvec_unrolled_kernel<<<(unsigned)M, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), out.data_ptr<float>(), K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="corpus_matvec_drops_tail", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matvec_unrolled"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matvec_unrolled(A, B)
