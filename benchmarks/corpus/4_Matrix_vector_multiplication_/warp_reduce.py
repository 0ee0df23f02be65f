"""Honest: matrix-vector product with one 256-thread block per output row: a block-strided loop over K (float4 loads when aligned, scalar tail), then a warp-shuffle + shared-memory reduction, fp32 throughout.
Expect: correct
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matvec(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define THREADS 256

__inline__ __device__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// out[row] = sum_k A[row][k] * x[k]; A is M x K row-major (M*K may exceed 2^31: int64 offsets).
__global__ void __launch_bounds__(THREADS) matvec_kernel(const float* __restrict__ A, const float* __restrict__ x,
                                                         float* __restrict__ out, int64_t K, bool vec4) {
    const int64_t row = blockIdx.x;
    const float* a = A + row * K;
    float acc = 0.f;
    int64_t done = 0;
    if (vec4) {   // K % 4 == 0 and both pointers 16-byte aligned
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int64_t K4 = K / 4;
        for (int64_t i = threadIdx.x; i < K4; i += THREADS) {
            const float4 av = a4[i];
            const float4 xv = __ldg(&x4[i]);
            acc = fmaf(av.x, xv.x, acc);
            acc = fmaf(av.y, xv.y, acc);
            acc = fmaf(av.z, xv.z, acc);
            acc = fmaf(av.w, xv.w, acc);
        }
        done = K4 * 4;
    }
    for (int64_t k = done + threadIdx.x; k < K; k += THREADS) acc = fmaf(a[k], __ldg(&x[k]), acc);

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

torch::Tensor matvec(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matvec: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "matvec: expected float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && B.size(1) == 1 && A.size(1) == B.size(0), "matvec: expected A (M x K) and B (K x 1)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "matvec: expected contiguous inputs");
    const int64_t M = A.size(0), K = A.size(1);
    auto out = torch::empty({M, 1}, A.options());
    if (M == 0) return out;
    if (K == 0) return out.zero_();
    const c10::cuda::CUDAGuard guard(A.device());
    const bool vec4 = (K % 4 == 0) && (reinterpret_cast<uintptr_t>(A.data_ptr<float>()) % 16 == 0) &&
                      (reinterpret_cast<uintptr_t>(B.data_ptr<float>()) % 16 == 0);
    TORCH_CHECK(M <= 2147483647LL, "matvec: M too large");
    matvec_kernel<<<(unsigned)M, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), out.data_ptr<float>(), K, vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="corpus_matvec_warp_reduce", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["matvec"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matvec(A, B)
