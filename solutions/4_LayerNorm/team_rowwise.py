"""LayerNorm: one block per row, the row held in registers, one read and one write.

Each of 256 threads loads its 4 float4 of a 4096-wide row (all 16-byte loads in flight at
once); the mean and then the sum of squared deviations are two deterministic block reductions
over the registers, so x is read from memory once and the output written once. At 24 x 4096 x
4096 that is 1.61 GB + 1.61 GB = 3.22 GB, ~1.1 ms at ~3 TB/s. Eager's LayerNorm kernel measured
1.60 ms on the H100 (2.0 TB/s).

Rows whose width is not 1024 * VPT floats for VPT in 1..4 (or are not 16-byte aligned) take a
general kernel: three passes over the row, the re-reads served by L1/L2.

Training: an autograd Function whose backward recomputes F.layer_norm from x and the weights.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_cpp_src = r"""
#include <torch/extension.h>
torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);
"""

_cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define LN_THREADS 256

// deterministic block sum; every thread gets the total. sh: 8 floats (one per warp), reused.
__device__ __forceinline__ float ln_block_sum(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();                       // sh may still be read from the previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < LN_THREADS / 32; ++w) total += sh[w];
    return total;
}

// VPT float4 per thread: rows of exactly LN_THREADS * 4 * VPT floats
template <int VPT>
__global__ void __launch_bounds__(LN_THREADS) ln_row_kernel(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
    float* __restrict__ y, float eps) {
    __shared__ float sh[LN_THREADS / 32];
    constexpr int H = LN_THREADS * 4 * VPT;
    const long long row = blockIdx.x;
    const float4* xr = reinterpret_cast<const float4*>(x + row * H);
    float4 v[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) v[k] = __ldg(&xr[threadIdx.x + k * LN_THREADS]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float mean = ln_block_sum(s, sh) * (1.0f / H);
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const float dx = v[k].x - mean, dy = v[k].y - mean, dz = v[k].z - mean, dw = v[k].w - mean;
        q += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
    const float rstd = rsqrtf(ln_block_sum(q, sh) * (1.0f / H) + eps);   // biased variance, as LayerNorm
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr = reinterpret_cast<float4*>(y + row * H);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = threadIdx.x + k * LN_THREADS;
        const float4 g = __ldg(&w4[i]), e = __ldg(&b4[i]);
        float4 o;
        o.x = (v[k].x - mean) * rstd * g.x + e.x;
        o.y = (v[k].y - mean) * rstd * g.y + e.y;
        o.z = (v[k].z - mean) * rstd * g.z + e.z;
        o.w = (v[k].w - mean) * rstd * g.w + e.w;
        yr[i] = o;
    }
}

// any width: three passes over the row (mean, squared deviations, output)
__global__ void __launch_bounds__(LN_THREADS) ln_general_kernel(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
    float* __restrict__ y, long long H, float eps) {
    __shared__ float sh[LN_THREADS / 32];
    const float* xr = x + (long long)blockIdx.x * H;
    float* yr = y + (long long)blockIdx.x * H;
    float s = 0.f;
    for (long long i = threadIdx.x; i < H; i += LN_THREADS) s += xr[i];
    const float mean = ln_block_sum(s, sh) / (float)H;
    float q = 0.f;
    for (long long i = threadIdx.x; i < H; i += LN_THREADS) { const float d = xr[i] - mean; q += d * d; }
    const float rstd = rsqrtf(ln_block_sum(q, sh) / (float)H + eps);
    for (long long i = threadIdx.x; i < H; i += LN_THREADS) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

static inline bool ln_al16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous() && x.dim() >= 1,
                "ln: x must be a contiguous float32 CUDA tensor");
    const long long H = x.size(-1);
    for (const torch::Tensor* t : {&weight, &bias}) {
        TORCH_CHECK(t->is_cuda() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == H,
                    "ln: weight and bias must be contiguous float32 CUDA tensors of the last dimension's size");
        TORCH_CHECK(t->device() == x.device(), "ln: weight or bias on another device");
    }
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty_like(x);
    const long long rows = H > 0 ? x.numel() / H : 0;
    if (rows == 0) return y;
    TORCH_CHECK(rows <= 2147483647LL, "ln: too many rows");
    cudaStream_t st = at::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool aligned = ln_al16(xp) && ln_al16(wp) && ln_al16(bp) && ln_al16(yp);
    const unsigned grid = (unsigned)rows;
    if (aligned && H == LN_THREADS * 4 * 4) {
        ln_row_kernel<4><<<grid, LN_THREADS, 0, st>>>(xp, wp, bp, yp, (float)eps);
    } else if (aligned && H == LN_THREADS * 4 * 3) {
        ln_row_kernel<3><<<grid, LN_THREADS, 0, st>>>(xp, wp, bp, yp, (float)eps);
    } else if (aligned && H == LN_THREADS * 4 * 2) {
        ln_row_kernel<2><<<grid, LN_THREADS, 0, st>>>(xp, wp, bp, yp, (float)eps);
    } else if (aligned && H == LN_THREADS * 4) {
        ln_row_kernel<1><<<grid, LN_THREADS, 0, st>>>(xp, wp, bp, yp, (float)eps);
    } else {
        ln_general_kernel<<<grid, LN_THREADS, 0, st>>>(xp, wp, bp, yp, H, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="team_ln_rowwise",
    cpp_sources=_cpp_src,
    cuda_sources=_cuda_src,
    functions=["layernorm_rows"],
    verbose=False,
)


class _LayerNormRows(torch.autograd.Function):
    """Forward: the kernels above. Backward: F.layer_norm recomputed under autograd from the saved
    x and weights, so the input and both parameters get the reference's gradients."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        H = x.shape[-1]
        w = weight if weight is not None else torch.ones(H, device=x.device)
        b = bias if bias is not None else torch.zeros(H, device=x.device)
        return _ext.layernorm_rows(x.contiguous(), w.contiguous(), b.contiguous(), eps)

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[: len(saved)]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip(saved, needs)]
            x, weight, bias = leaves
            out = F.layer_norm(x, (x.shape[-1],), weight, bias, ctx.eps)
            wanted = [t for t, n in zip(leaves, needs) if n and t is not None]
            grads = iter(torch.autograd.grad(out, wanted, grad) if wanted else ())
        return (*(next(grads) if n and t is not None else None for t, n in zip(leaves, needs)), None)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super(ModelNew, self).__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        norm = self.norm
        if not (x.is_cuda and x.dtype == torch.float32) or len(norm.normalized_shape) != 1:
            return norm(x)  # the kernels cover float32 CUDA rows only
        return _LayerNormRows.apply(x, norm.weight, norm.bias, float(norm.eps))
