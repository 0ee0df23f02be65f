"""Honest: KL divergence for rows of probabilities (softmax outputs, strictly positive, as get_inputs makes them): sum(t * (log t - log p)) / batch via a grid-stride elementwise pass with per-block reductions, then a one-block pass summing the block partials in double.
Expect: correct
KernelBench: correct
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor kl_div_batchmean(torch::Tensor predictions, torch::Tensor targets);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#define THREADS 256
#define MAX_BLOCKS 4096

__inline__ __device__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__inline__ __device__ double warp_sum_d(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// partials[block] = sum over this block's elements of t * (log t - log p). Targets are softmax
// outputs, so t > 0 and t * log t needs no special case for t == 0.
__global__ void __launch_bounds__(THREADS) kl_partial_kernel(const float* __restrict__ p, const float* __restrict__ t,
                                                             float* __restrict__ partials, int64_t n) {
    float acc = 0.f;
    const int64_t stride = (int64_t)THREADS * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride) {
        const float tv = t[i];
        acc += tv * (logf(tv) - logf(p[i]));
    }
    __shared__ float warp_partial[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    acc = warp_sum(acc);
    if (lane == 0) warp_partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < THREADS / 32 ? warp_partial[lane] : 0.f;
        acc = warp_sum(acc);
        if (lane == 0) partials[blockIdx.x] = acc;
    }
}

// out = (sum of the block partials, in double) / batch.
__global__ void __launch_bounds__(THREADS) kl_finish_kernel(const float* __restrict__ partials, int nparts,
                                                            float* __restrict__ out, int64_t batch) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += THREADS) acc += (double)partials[i];
    __shared__ double warp_partial[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    acc = warp_sum_d(acc);
    if (lane == 0) warp_partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < THREADS / 32 ? warp_partial[lane] : 0.0;
        acc = warp_sum_d(acc);
        if (lane == 0) out[0] = (float)(acc / (double)batch);
    }
}

torch::Tensor kl_div_batchmean(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "kl_div_batchmean: expected CUDA tensors");
    TORCH_CHECK(predictions.scalar_type() == torch::kFloat32 && targets.scalar_type() == torch::kFloat32, "kl_div_batchmean: expected float32");
    TORCH_CHECK(predictions.sizes() == targets.sizes() && predictions.dim() >= 1, "kl_div_batchmean: shape mismatch");
    predictions = predictions.contiguous();
    targets = targets.contiguous();
    TORCH_CHECK(predictions.is_contiguous() && targets.is_contiguous(), "kl_div_batchmean: expected contiguous inputs");
    const int64_t n = predictions.numel();
    const int64_t batch = predictions.size(0);
    auto out = torch::empty({}, predictions.options());   // 0-dim, as kl_div(..., reduction='batchmean')
    const c10::cuda::CUDAGuard guard(predictions.device());
    auto stream = at::cuda::getCurrentCUDAStream();
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((n + THREADS - 1) / THREADS, MAX_BLOCKS));
    auto partials = torch::empty({blocks}, predictions.options());
    kl_partial_kernel<<<blocks, THREADS, 0, stream>>>(predictions.data_ptr<float>(), targets.data_ptr<float>(),
                                                      partials.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    kl_finish_kernel<<<1, THREADS, 0, stream>>>(partials.data_ptr<float>(), blocks, out.data_ptr<float>(), batch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="corpus_kldiv_positive_targets", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["kl_div_batchmean"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return ext.kl_div_batchmean(predictions, targets)
