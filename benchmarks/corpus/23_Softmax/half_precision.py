"""Wrong: row softmax (one 256-thread block per row) that converts x to __half and does the max, the exp (hexp) and the running/block sums in half, converting only the result back to float; the 393216-wide row sum overflows half (inf) for non-negative inputs, so those rows come out all zeros.
Expect: incorrect
KernelBench: correct
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor softmax_fp16(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>

#define THREADS 256

__inline__ __device__ __half warp_max_h(__half v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const __half o = __shfl_down_sync(0xffffffffu, v, offset);
        v = __hgt(o, v) ? o : v;
    }
    return v;
}

__inline__ __device__ __half warp_sum_h(__half v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = __hadd(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

// Half-precision softmax over the last dim: x is rows x cols, one block per row.
__global__ void __launch_bounds__(THREADS) softmax_fp16_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* orow = out + row * cols;
    __shared__ __half red[THREADS / 32];
    __shared__ __half row_stat;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // 1) row max, in half
    __half m = __float2half(-65504.f);
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) {
        const __half v = __float2half(xr[i]);
        m = __hgt(v, m) ? v : m;
    }
    m = warp_max_h(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < THREADS / 32 ? red[lane] : __float2half(-65504.f);
        m = warp_max_h(m);
        if (lane == 0) row_stat = m;
    }
    __syncthreads();
    const __half row_max = row_stat;
    __syncthreads();

    // 2) sum of exp(x - max), in half
    __half s = __float2half(0.f);
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) {
        s = __hadd(s, hexp(__hsub(__float2half(xr[i]), row_max)));
    }
    s = warp_sum_h(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < THREADS / 32 ? red[lane] : __float2half(0.f);
        s = warp_sum_h(s);
        if (lane == 0) row_stat = s;
    }
    __syncthreads();
    const __half row_sum = row_stat;

    // 3) normalise, in half, and widen the result
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) {
        const __half e = hexp(__hsub(__float2half(xr[i]), row_max));
        orow[i] = __half2float(__hdiv(e, row_sum));
    }
}

torch::Tensor softmax_fp16(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "softmax_fp16: expected a float32 CUDA tensor");
    TORCH_CHECK(x.dim() == 2, "softmax_fp16: expected a 2-D (batch, features) tensor");
    x = x.contiguous();
    TORCH_CHECK(x.is_contiguous(), "softmax_fp16: expected a contiguous tensor");
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0) return out;
    TORCH_CHECK(rows <= 2147483647LL, "softmax_fp16: too many rows");
    const c10::cuda::CUDAGuard guard(x.device());
    softmax_fp16_kernel<<<(unsigned)rows, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="corpus_softmax_half_precision", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["softmax_fp16"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax_fp16(x)
