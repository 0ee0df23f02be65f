"""Gemm_Sigmoid_Scaling_ResidualAdd: cuBLAS GEMM + one fused epilogue kernel.

The GEMM stays in cuBLAS (torch.mm, without the bias: that kernel runs ~1%
faster than the biased one F.linear picks).  The bias and the epilogue
``y + scaling_factor * sigmoid(y)`` are one float4-vectorised CUDA
kernel (4 independent 16-byte loads in flight per thread) that works in place
on the fresh GEMM output (a tensor this forward owns; ``x`` is never touched).
Training: an autograd Function whose backward recomputes the eager ops from x
and the weights (the in-place epilogue keeps nothing autograd could use).

Bytes moved after the GEMM, for a B x H output of S = 4*B*H bytes:
eager does sigmoid (read S, write S), mul (read S, write S) and add
(read 2S, write S) = 7S; this kernel reads S and writes S = 2S.
At 1024 x 8192 (S = 32 MiB) that is ~235 MB -> ~67 MB (~55 us saved at
~3 TB/s) plus two fewer launches.  The fp32 GEMM (~2.5-3 ms) dominates, so
the end-to-end gain is a few percent.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_cpp_src = r"""
#include <torch/extension.h>
torch::Tensor bias_sigmoid_scale_residual_(torch::Tensor y, torch::Tensor bias, double scaling_factor);
"""

_cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float p70_op(float v, float s) {
    // same formula as torch.sigmoid (accurate expf), then scale, then residual add
    const float sig = 1.0f / (1.0f + expf(-v));
    return v + sig * s;
}

// Each thread owns up to 4 float4 (strided by the block size, so every load
// instruction is fully coalesced); all loads are issued before any math/store.
#define P70_ITEMS 4
// bias (may be null): the GEMM's bias, added here instead of in the GEMM; h4 = columns / 4
__global__ void __launch_bounds__(256) p70_vec_kernel(float4* y, const float4* __restrict__ bias, int h4,
                                                      long long n4, float s) {
    const long long i0 = (long long)blockIdx.x * (256 * P70_ITEMS) + threadIdx.x;
    float4 v[P70_ITEMS];
#pragma unroll
    for (int k = 0; k < P70_ITEMS; ++k) {
        const long long i = i0 + (long long)k * 256;
        if (i < n4) v[k] = y[i];
    }
    if (bias != nullptr) {
#pragma unroll
        for (int k = 0; k < P70_ITEMS; ++k) {
            const long long i = i0 + (long long)k * 256;
            if (i < n4) {
                const float4 b = __ldg(&bias[i < 4294967296LL ? (unsigned)i % (unsigned)h4 : i % h4]);
                v[k].x += b.x; v[k].y += b.y; v[k].z += b.z; v[k].w += b.w;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < P70_ITEMS; ++k) {
        const long long i = i0 + (long long)k * 256;
        if (i < n4) {
            float4 o;
            o.x = p70_op(v[k].x, s);
            o.y = p70_op(v[k].y, s);
            o.z = p70_op(v[k].z, s);
            o.w = p70_op(v[k].w, s);
            y[i] = o;
        }
    }
}

__global__ void __launch_bounds__(256) p70_scalar_kernel(float* y, const float* __restrict__ bias, long long h,
                                                         long long n, float s) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = p70_op(bias != nullptr ? y[i] + bias[i % h] : y[i], s);
    }
}

torch::Tensor bias_sigmoid_scale_residual_(torch::Tensor y, torch::Tensor bias, double scaling_factor) {
    TORCH_CHECK(y.is_cuda(), "p70: expected a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == at::kFloat, "p70: expected float32");
    TORCH_CHECK(y.is_contiguous() && y.dim() == 2, "p70: expected a contiguous 2-D tensor");
    const long long h = y.size(1);
    const bool has_bias = bias.numel() > 0;   // empty: no bias to add
    if (has_bias) {
        TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == h,
                    "p70: bias must be a contiguous float32 CUDA tensor with one value per column");
        TORCH_CHECK(bias.device() == y.device(), "p70: bias on another device");
    }
    const at::cuda::OptionalCUDAGuard guard(device_of(y));
    const long long n = y.numel();
    if (n == 0) return y;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int threads = 256;
    const long long max_blocks = (long long)sms * 16;
    float* p = y.data_ptr<float>();
    const float* b = has_bias ? bias.data_ptr<float>() : nullptr;
    const float s = (float)scaling_factor;
    if ((h % 4 == 0) && ((reinterpret_cast<uintptr_t>(p) & 15) == 0) && ((reinterpret_cast<uintptr_t>(b) & 15) == 0)) {
        const long long n4 = n / 4;
        const long long blocks = (n4 + threads * P70_ITEMS - 1) / (threads * P70_ITEMS);
        TORCH_CHECK(blocks <= 2147483647LL, "p70: tensor too large");
        p70_vec_kernel<<<(unsigned)blocks, threads, 0, stream>>>(reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(b),
                                                                 (int)(h / 4), n4, s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
        long long blocks = (n + threads - 1) / threads;
        if (blocks > max_blocks) blocks = max_blocks;
        p70_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(p, b, h, n, s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(
    name="team_p70_fused",
    cpp_sources=_cpp_src,
    cuda_sources=_cuda_src,
    functions=["bias_sigmoid_scale_residual_"],
    verbose=False,
)


def _eager(x, weight, bias, scaling_factor):
    """The reference's ops; backward differentiates these (recomputed from x and the weights)."""
    y = F.linear(x, weight, bias)
    return y + torch.sigmoid(y) * scaling_factor


class _GemmSigmoidScaleResidual(torch.autograd.Function):
    """Forward: cuBLAS GEMM, then the fused epilogue kernel in place on the GEMM's fresh output.

    Backward: the eager ops, recomputed under autograd from the saved x and weights, so every
    parameter and the input get the reference's gradients. The epilogue's output overwrote the
    GEMM result, so nothing else is kept; the price is one more GEMM per training step.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, scaling_factor):
        ctx.save_for_backward(x, weight, bias)
        ctx.settings = (scaling_factor,)
        # x @ W^T without the bias: this cuBLAS GEMM runs ~1% faster than the biased one that
        # F.linear calls, and the epilogue adds the bias on its way in
        y = torch.mm(x, weight.t()).contiguous()
        b = bias.contiguous() if bias is not None else y.new_empty(0)
        return _ext.bias_sigmoid_scale_residual_(y, b, scaling_factor)

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[: len(saved)]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip(saved, needs)]
            out = _eager(*leaves, *ctx.settings)
            wanted = [t for t, n in zip(leaves, needs) if n and t is not None]
            grads = iter(torch.autograd.grad(out, wanted, grad) if wanted else ())
        return (*(next(grads) if n and t is not None else None for t, n in zip(leaves, needs)), *(None for _ in ctx.settings))


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return _GemmSigmoidScaleResidual.apply(x, self.gemm.weight, self.gemm.bias, float(self.scaling_factor))
