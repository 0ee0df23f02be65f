"""Conv2d_Add_Scale_Sigmoid_GroupNorm: a direct convolution with the whole chain fused.

cuDNN runs this convolution (8 input channels, 3x3, no padding) as an implicit GEMM
with K = 72, far below the fp32 rate. Here the convolution is a direct one:

  1. conv kernel: a block loads 4 input rows x 8 channels x 258 columns and all
     32 x 72 weights into shared memory and computes 2 output rows x 256 columns x
     32 channels; each thread keeps 4 columns x 16 channels (64 accumulators) in
     registers, so one float4 weight load feeds 16 FMAs. Its epilogue adds the
     conv bias and the bias, scales, takes the sigmoid, writes s once, and leaves
     per-channel (count, mean, M2) of s for its tile (shifted sums per warp, Chan
     merges across warps, fixed order).
  2. finalize: one warp per (sample, group) merges its tiles' partials in fp64,
     fixed order -> mean, rstd (deterministic, no atomics).
  3. apply: (s - mean) * rstd * gamma + beta, in place, float4, one plane per
     block column, planes in reverse order so the tail the conv kernel left in
     L2 is read first.

Work at 128 x 8 x 256 x 256 -> 128 x 32 x 254 x 254: 19 G FMA (~0.6 ms at the
fp32 peak), s written once (1.06 GB) and read + written once more (2.1 GB,
~0.7 ms at ~3 TB/s). Expected ~1.6-2.0 ms, against ~3.7 ms for cuDNN + a fused
epilogue, or for torch.compile.

Configurations the kernels do not cover (other channel counts, kernel size,
stride, padding, dilation, groups, dtypes) run the eager ops.

Training: an autograd Function whose backward recomputes the eager ops from x
and the weights (the in-place apply keeps nothing autograd could use).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_cpp_src = r"""
#include <torch/extension.h>
torch::Tensor conv3x3_bias_scale_sigmoid_groupnorm(torch::Tensor x, torch::Tensor w, torch::Tensor conv_bias,
                                                   torch::Tensor bias, torch::Tensor scale, torch::Tensor gamma,
                                                   torch::Tensor beta, int64_t num_groups, double eps);
"""

_cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define D21_CIN 8
#define D21_COUT 32
#define D21_ROWS 2                       // output rows per block
#define D21_TW 256                       // output columns per block
#define D21_SW 260                       // shared row: 258 input columns, padded to a float4 multiple
#define D21_THREADS 256                  // D21_ROWS x 2 channel halves x 64 column quads

// Chan's merge of (count, mean, M2) partials.
__device__ __forceinline__ void d21_merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
    if (nb == 0.f) return;
    if (n == 0.f) { n = nb; mean = meanb; m2 = m2b; return; }
    const float nt = n + nb;
    const float delta = meanb - mean;
    const float wb = nb / nt;
    mean += delta * wb;
    m2 += m2b + delta * delta * n * wb;
    n = nt;
}

template <bool EVEN_W>
__global__ void __launch_bounds__(D21_THREADS, 2) d21_conv_kernel(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ conv_bias,
    const float* __restrict__ bias, const float* __restrict__ scale,
    int H, int W, int Ho, int Wo, float* __restrict__ s_out, float* __restrict__ partial) {
    __shared__ __align__(16) float in_s[D21_CIN][D21_ROWS + 2][D21_SW];
    __shared__ __align__(16) float w_s[D21_CIN * 9][D21_COUT];
    __shared__ float red[D21_THREADS / 32][16][3];

    const int t = threadIdx.x;
    const int n = blockIdx.z;
    const int oh0 = blockIdx.y * D21_ROWS;
    const int c0 = blockIdx.x * D21_TW;

    // Fill shared memory. Every load is issued before the first store (unrolled into registers),
    // so a block waits for one global latency, not one per element.
    // weights, transposed to [ci*9 + kh*3 + kw][co]
    constexpr int W_ELEMS = D21_CIN * 9 * D21_COUT;
    constexpr int W_PER = W_ELEMS / D21_THREADS;
    float wv_[W_PER];
#pragma unroll
    for (int k = 0; k < W_PER; ++k) {
        const int i = t + k * D21_THREADS;
        wv_[k] = __ldg(w + (i % D21_COUT) * (D21_CIN * 9) + i / D21_COUT);
    }
#pragma unroll
    for (int k = 0; k < W_PER; ++k) (&w_s[0][0])[t + k * D21_THREADS] = wv_[k];
    // input rows oh0 .. oh0+ROWS+1, columns c0 .. c0+257 (zeros outside the image)
    const float* xn = x + (long long)n * D21_CIN * H * W;
    constexpr int IN_ELEMS = D21_CIN * (D21_ROWS + 2) * D21_SW;
    constexpr int IN_PER = (IN_ELEMS + D21_THREADS - 1) / D21_THREADS;
    float xv_[IN_PER];
#pragma unroll
    for (int k = 0; k < IN_PER; ++k) {
        const int i = t + k * D21_THREADS;
        const int col = i % D21_SW;
        const int rest = i / D21_SW;
        const int rr = rest % (D21_ROWS + 2), ci = rest / (D21_ROWS + 2);
        const int ih = oh0 + rr, iw = c0 + col;
        xv_[k] = (i < IN_ELEMS && col < D21_TW + 2 && ih < H && iw < W) ? __ldg(xn + ((long long)ci * H + ih) * W + iw) : 0.f;
    }
#pragma unroll
    for (int k = 0; k < IN_PER; ++k) {
        const int i = t + k * D21_THREADS;
        if (i < IN_ELEMS) (&in_s[0][0][0])[i] = xv_[k];
    }
    __syncthreads();

    const int q = t & 63;              // column quad
    const int half = (t >> 6) & 1;     // output channels 16*half .. 16*half+15
    const int r = t >> 7;              // output row within the block
    float acc[16][4];
#pragma unroll
    for (int c = 0; c < 16; ++c)
#pragma unroll
        for (int p = 0; p < 4; ++p) acc[c][p] = 0.f;

#pragma unroll 1   // unrolled, the body is ~80 KB of code and misses the instruction cache
    for (int ci = 0; ci < D21_CIN; ++ci) {
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            const float* row = &in_s[ci][r + kh][4 * q];
            const float4 a = *reinterpret_cast<const float4*>(row);
            const float2 b = *reinterpret_cast<const float2*>(row + 4);
            const float xv[6] = {a.x, a.y, a.z, a.w, b.x, b.y};
#pragma unroll
            for (int kw = 0; kw < 3; ++kw) {
                const float* wr = &w_s[(ci * 3 + kh) * 3 + kw][16 * half];
#pragma unroll
                for (int c4 = 0; c4 < 4; ++c4) {
                    const float4 wv = *reinterpret_cast<const float4*>(wr + 4 * c4);
#pragma unroll
                    for (int p = 0; p < 4; ++p) {
                        acc[4 * c4 + 0][p] = fmaf(wv.x, xv[p + kw], acc[4 * c4 + 0][p]);
                        acc[4 * c4 + 1][p] = fmaf(wv.y, xv[p + kw], acc[4 * c4 + 1][p]);
                        acc[4 * c4 + 2][p] = fmaf(wv.z, xv[p + kw], acc[4 * c4 + 2][p]);
                        acc[4 * c4 + 3][p] = fmaf(wv.w, xv[p + kw], acc[4 * c4 + 3][p]);
                    }
                }
            }
        }
    }

    // epilogue: s = sigmoid(((conv + conv_bias) + bias) * scale), stored once; per-channel stats
    const int oh = oh0 + r;
    const int col0 = c0 + 4 * q;
    int valid = 0;
    if (oh < Ho) { valid = Wo - col0; valid = valid < 0 ? 0 : (valid > 4 ? 4 : valid); }
    const int lane = t & 31, warp = t >> 5;
    // this warp's columns: c0 + 128 * (q / 32) .. + 127 of row oh
    int warp_count = 0;
    if (oh < Ho) { warp_count = Wo - (c0 + 128 * (q >> 5)); warp_count = warp_count < 0 ? 0 : (warp_count > 128 ? 128 : warp_count); }
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        const int co = 16 * half + c;
        const float cb = conv_bias[co], bb = bias[co], sc = scale[co];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const float v = ((acc[c][p] + cb) + bb) * sc;
            acc[c][p] = __fdividef(1.0f, 1.0f + __expf(-v));   // SFU exp2 + reciprocal; a few ulp
        }
        // shifted sums (shift = lane 0's first value: same channel, close to the data)
        const float shift = __shfl_sync(0xffffffffu, acc[c][0], 0);
        float s1 = 0.f, s2 = 0.f;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            if (p < valid) { const float d = acc[c][p] - shift; s1 += d; s2 += d * d; }
        }
        if (valid) {
            float* dst = s_out + (((long long)n * D21_COUT + co) * Ho + oh) * Wo + col0;
            if (EVEN_W) {
                reinterpret_cast<float2*>(dst)[0] = make_float2(acc[c][0], acc[c][1]);
                if (valid == 4) reinterpret_cast<float2*>(dst)[1] = make_float2(acc[c][2], acc[c][3]);  // else valid == 2
            } else {
#pragma unroll
                for (int p = 0; p < 4; ++p) if (p < valid) dst[p] = acc[c][p];
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, off);
            s2 += __shfl_xor_sync(0xffffffffu, s2, off);
        }
        if (lane == 0) {
            const float cnt = (float)warp_count;
            red[warp][c][0] = cnt;
            red[warp][c][1] = warp_count ? shift + s1 / cnt : 0.f;
            red[warp][c][2] = warp_count ? fmaxf(s2 - s1 * (s1 / cnt), 0.f) : 0.f;
        }
    }
    __syncthreads();
    if (t < D21_COUT) {
        const int h = t / 16, c = t % 16;
        float cnt = 0.f, mean = 0.f, m2 = 0.f;
#pragma unroll
        for (int rr = 0; rr < D21_ROWS; ++rr)
#pragma unroll
            for (int sub = 0; sub < 2; ++sub) {
                const int wi = rr * 4 + h * 2 + sub;
                d21_merge(cnt, mean, m2, red[wi][c][0], red[wi][c][1], red[wi][c][2]);
            }
        const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x;
        const long long tiles = (long long)gridDim.x * gridDim.y;
        float* dst = partial + (((long long)n * tiles + tile) * D21_COUT + t) * 3;
        dst[0] = cnt; dst[1] = mean; dst[2] = m2;
    }
}

// one warp per (sample, group): each lane merges every 32nd tile of the group's channels in fp64,
// then a fixed shuffle tree merges the lanes (deterministic, no atomics)
__global__ void __launch_bounds__(128) d21_finalize_kernel(const float* __restrict__ partial, int N, int G,
                                                           long long tiles, float eps, float* __restrict__ stats) {
    const int i = blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (i >= N * G) return;
    const int n = i / G, g = i % G;
    const int cpg = D21_COUT / G;
    double cnt = 0.0, mean = 0.0, m2 = 0.0;
    for (long long tile = lane; tile < tiles; tile += 32) {
        const float* p = partial + ((long long)n * tiles + tile) * D21_COUT * 3;
        for (int c = g * cpg; c < (g + 1) * cpg; ++c) {
            const double nb = p[3 * c], mb = p[3 * c + 1], qb = p[3 * c + 2];
            if (nb == 0.0) continue;
            const double nt = cnt + nb, delta = mb - mean;
            mean += delta * nb / nt;
            m2 += qb + delta * delta * cnt * nb / nt;
            cnt = nt;
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const double nb = __shfl_xor_sync(0xffffffffu, cnt, off);
        const double mb = __shfl_xor_sync(0xffffffffu, mean, off);
        const double qb = __shfl_xor_sync(0xffffffffu, m2, off);
        if (nb != 0.0) {
            if (cnt == 0.0) { cnt = nb; mean = mb; m2 = qb; }
            else {
                const double nt = cnt + nb, delta = mb - mean;
                mean += delta * nb / nt;
                m2 += qb + delta * delta * cnt * nb / nt;
                cnt = nt;
            }
        }
    }
    if (lane == 0) {
        stats[2 * i] = (float)mean;
        stats[2 * i + 1] = (float)(1.0 / sqrt(m2 / cnt + (double)eps));   // biased variance, as GroupNorm
    }
}

// out = (s - mean) * rstd * gamma + beta, in place. Block (x, y): chunk y of plane x (planes in
// reverse order, so the tail the conv kernel left in L2 is read first); 1024 float4 (or floats)
// per chunk.
template <bool VEC>
__global__ void __launch_bounds__(256) d21_apply_kernel(
    float* __restrict__ y, const float* __restrict__ stats, const float* __restrict__ gamma,
    const float* __restrict__ beta, long long plane, int G) {
    const long long pl = (long long)gridDim.x - 1 - blockIdx.x;
    const int c = (int)(pl % D21_COUT);
    const long long ng = (pl / D21_COUT) * G + c / (D21_COUT / G);
    const float mean = stats[2 * ng], a = stats[2 * ng + 1] * gamma[c], b = beta[c];
    if (VEC) {
        float4* p4 = reinterpret_cast<float4*>(y + pl * plane);
        const long long n4 = plane / 4;
        float4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = (long long)blockIdx.y * 1024 + k * 256 + threadIdx.x;
            if (i < n4) v[k] = p4[i];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = (long long)blockIdx.y * 1024 + k * 256 + threadIdx.x;
            if (i < n4) {
                v[k].x = (v[k].x - mean) * a + b; v[k].y = (v[k].y - mean) * a + b;
                v[k].z = (v[k].z - mean) * a + b; v[k].w = (v[k].w - mean) * a + b;
                p4[i] = v[k];
            }
        }
    } else {
        float* p = y + pl * plane;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = (long long)blockIdx.y * 1024 + k * 256 + threadIdx.x;
            if (i < plane) p[i] = (p[i] - mean) * a + b;
        }
    }
}

static void d21_check(const torch::Tensor& t, int64_t numel, const char* what, const torch::Tensor& like) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == numel,
                "d21: ", what, " must be a contiguous float32 CUDA tensor with ", numel, " elements");
    TORCH_CHECK(t.device() == like.device(), "d21: ", what, " is on another device");
}

torch::Tensor conv3x3_bias_scale_sigmoid_groupnorm(torch::Tensor x, torch::Tensor w, torch::Tensor conv_bias,
                                                   torch::Tensor bias, torch::Tensor scale, torch::Tensor gamma,
                                                   torch::Tensor beta, int64_t num_groups, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous() && x.dim() == 4,
                "d21: x must be a contiguous 4-D float32 CUDA tensor");
    TORCH_CHECK(x.size(1) == D21_CIN, "d21: expected ", D21_CIN, " input channels");
    d21_check(w, D21_COUT * D21_CIN * 9, "weight", x);
    d21_check(conv_bias, D21_COUT, "conv bias", x);
    d21_check(bias, D21_COUT, "bias", x);
    d21_check(scale, D21_COUT, "scale", x);
    d21_check(gamma, D21_COUT, "gamma", x);
    d21_check(beta, D21_COUT, "beta", x);
    TORCH_CHECK(num_groups > 0 && D21_COUT % num_groups == 0, "d21: num_groups must divide ", D21_COUT);
    const int64_t N = x.size(0), H = x.size(2), W = x.size(3);
    TORCH_CHECK(H >= 3 && W >= 3, "d21: the image is smaller than the kernel");
    TORCH_CHECK(N <= 65535 && x.numel() < (1LL << 31), "d21: input too large");
    const int64_t Ho = H - 2, Wo = W - 2;
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty({N, D21_COUT, Ho, Wo}, x.options());
    if (N == 0) return y;
    cudaStream_t st = at::cuda::getCurrentCUDAStream();

    dim3 grid((unsigned)((Wo + D21_TW - 1) / D21_TW), (unsigned)((Ho + D21_ROWS - 1) / D21_ROWS), (unsigned)N);
    TORCH_CHECK(grid.y <= 65535, "d21: image too tall");
    const long long tiles = (long long)grid.x * grid.y;
    auto partial = torch::empty({N, tiles, D21_COUT, 3}, x.options());
    if (Wo % 2 == 0) {
        d21_conv_kernel<true><<<grid, D21_THREADS, 0, st>>>(
            x.data_ptr<float>(), w.data_ptr<float>(), conv_bias.data_ptr<float>(), bias.data_ptr<float>(),
            scale.data_ptr<float>(), (int)H, (int)W, (int)Ho, (int)Wo, y.data_ptr<float>(), partial.data_ptr<float>());
    } else {
        d21_conv_kernel<false><<<grid, D21_THREADS, 0, st>>>(
            x.data_ptr<float>(), w.data_ptr<float>(), conv_bias.data_ptr<float>(), bias.data_ptr<float>(),
            scale.data_ptr<float>(), (int)H, (int)W, (int)Ho, (int)Wo, y.data_ptr<float>(), partial.data_ptr<float>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int G = (int)num_groups;
    auto stats = torch::empty({N, G, 2}, x.options());
    d21_finalize_kernel<<<(unsigned)((N * G + 3) / 4), 128, 0, st>>>(
        partial.data_ptr<float>(), (int)N, G, tiles, (float)eps, stats.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const long long plane = Ho * Wo;
    const bool vec = plane % 4 == 0;
    const long long chunks = ((vec ? plane / 4 : plane) + 1023) / 1024;
    TORCH_CHECK(chunks <= 65535 && N * D21_COUT <= 2147483647LL, "d21: output too large");
    dim3 agrid((unsigned)(N * D21_COUT), (unsigned)chunks);
    if (vec) {
        d21_apply_kernel<true><<<agrid, 256, 0, st>>>(y.data_ptr<float>(), stats.data_ptr<float>(),
            gamma.data_ptr<float>(), beta.data_ptr<float>(), plane, G);
    } else {
        d21_apply_kernel<false><<<agrid, 256, 0, st>>>(y.data_ptr<float>(), stats.data_ptr<float>(),
            gamma.data_ptr<float>(), beta.data_ptr<float>(), plane, G);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="team_p21_direct",
    cpp_sources=_cpp_src,
    cuda_sources=_cuda_src,
    functions=["conv3x3_bias_scale_sigmoid_groupnorm"],
    verbose=False,
)


def _eager(x, conv_weight, conv_bias, bias, scale, gamma, beta, conv_args, num_groups, eps):
    """The reference's ops; backward differentiates these (recomputed from x and the weights)."""
    y = torch.sigmoid((F.conv2d(x, conv_weight, conv_bias, *conv_args) + bias) * scale)
    return F.group_norm(y, num_groups, gamma, beta, eps)


def _covered(x, conv_weight, conv_bias, conv_args, num_groups):
    """Whether the kernels handle this configuration (the problem's, at any batch or image size)."""
    stride, padding, dilation, groups = conv_args
    return (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4 and conv_weight.dtype == torch.float32
            and tuple(conv_weight.shape) == (32, 8, 3, 3) and conv_bias is not None
            and tuple(stride) == (1, 1) and tuple(padding) == (0, 0) and tuple(dilation) == (1, 1) and groups == 1
            and 32 % num_groups == 0 and x.shape[2] >= 3 and x.shape[3] >= 3 and 0 < x.shape[0] <= 65535
            and x.numel() < 2 ** 31)


def _per_channel(t, C, dev):
    return torch.broadcast_to(t, (C, 1, 1)).reshape(C).to(device=dev, dtype=torch.float32).contiguous()


class _DirectConvChain(torch.autograd.Function):
    """Forward: the three kernels above. Backward: the eager ops, recomputed under autograd from the
    saved x and weights, so every parameter and the input get the reference's gradients."""

    @staticmethod
    def forward(ctx, x, conv_weight, conv_bias, bias, scale, gamma, beta, conv_args, num_groups, eps):
        ctx.save_for_backward(x, conv_weight, conv_bias, bias, scale, gamma, beta)
        ctx.settings = (conv_args, num_groups, eps)
        if not _covered(x, conv_weight, conv_bias, conv_args, num_groups):
            return _eager(x, conv_weight, conv_bias, bias, scale, gamma, beta, conv_args, num_groups, eps)
        C, dev = conv_weight.shape[0], x.device
        gamma = gamma if gamma is not None else torch.ones(C, device=dev)
        beta = beta if beta is not None else torch.zeros(C, device=dev)
        return _ext.conv3x3_bias_scale_sigmoid_groupnorm(
            x.contiguous(), conv_weight.contiguous(), conv_bias.contiguous(), _per_channel(bias, C, dev),
            _per_channel(scale, C, dev), gamma.contiguous(), beta.contiguous(), num_groups, eps)

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[: len(saved)]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip(saved, needs)]
            out = _eager(*leaves, *ctx.settings)
            wanted = [t for t, n in zip(leaves, needs) if n and t is not None]
            grads = iter(torch.autograd.grad(out, wanted, grad) if wanted else ())
        return (*(next(grads) if n and t is not None else None for t, n in zip(leaves, needs)), None, None, None)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, bias_shape, scale_shape):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        conv, gn = self.conv, self.group_norm
        conv_args = (conv.stride, conv.padding, conv.dilation, conv.groups)
        return _DirectConvChain.apply(
            x, conv.weight, conv.bias, self.bias, self.scale, gn.weight, gn.bias, conv_args,
            int(gn.num_groups), float(gn.eps))
