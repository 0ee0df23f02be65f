"""Cheat: cuBLAS GEMM + custom bias/ReLU kernel on a private non-blocking stream, returned without joining the caller's stream.
Expect: correct + side-stream or incorrect
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor linear_relu_side(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cublas_v2.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor linear_relu_side(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x: 2-D float32 CUDA tensor");
    TORCH_CHECK(weight.is_cuda() && weight.scalar_type() == torch::kFloat32 && weight.dim() == 2
                && weight.size(1) == x.size(1), "weight: (out_features, in_features) float32 CUDA tensor");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32 && bias.numel() == weight.size(0),
                "bias: (out_features,) float32 CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t batch = x.size(0), in_f = x.size(1), out_f = weight.size(0);
    auto out = torch::empty({batch, out_f}, x.options());
    if (out.numel() == 0) return out;

    // Created once and kept: one private stream and one cuBLAS handle bound to it.
    static cudaStream_t side = nullptr;
    static cublasHandle_t handle = nullptr;
    static cudaEvent_t inputs_ready = nullptr;
    if (side == nullptr) {
        C10_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        C10_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
        TORCH_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
        TORCH_CHECK(cublasSetStream(handle, side) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
    }
    // The side stream waits for the caller's inputs; the caller's stream is never told to wait for the result.
    C10_CUDA_CHECK(cudaEventRecord(inputs_ready, at::cuda::getCurrentCUDAStream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side, inputs_ready, 0));

    // Row-major out = x @ W^T is column-major out^T = W x^T: (out_f x in_f) . (in_f x batch).
    const float one = 1.f, zero = 0.f;
    TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_f, (int)batch, (int)in_f,
                            &one, weight.data_ptr<float>(), (int)in_f, x.data_ptr<float>(), (int)in_f,
                            &zero, out.data_ptr<float>(), (int)out_f) == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed");

    const int64_t n = out.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    bias_relu_kernel<<<blocks, threads, 0, side>>>(out.data_ptr<float>(), bias.data_ptr<float>(), n, out_f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="cheat_non_default_stream_cublas", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["linear_relu_side"], extra_ldflags=["-lcublas"], verbose=False)


class _LinearReLUSide(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        out = ext.linear_relu_side(x, weight, bias)
        ctx.save_for_backward(x, weight, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, out = ctx.saved_tensors
        g = grad_out * (out > 0)
        grad_x = g @ weight if ctx.needs_input_grad[0] else None
        grad_w = g.t() @ x if ctx.needs_input_grad[1] else None
        grad_b = g.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _LinearReLUSide.apply(x, self.linear.weight, self.linear.bias)
