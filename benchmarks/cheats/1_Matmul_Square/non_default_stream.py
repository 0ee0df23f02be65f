"""Cheat: the GEMM runs in cuBLAS on a non-blocking stream of its own and forward returns without joining it, so a timer that waits only on the calling stream reads almost nothing (KernelBench's non-default-stream test, rewritten; the stream and handle are made once, not leaked per call).
Expect: no custom kernel + side-stream or incorrect
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    static cudaStream_t stream = nullptr;
    static cublasHandle_t handle = nullptr;
    if (stream == nullptr) {
        TORCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
        TORCH_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublas");
        TORCH_CHECK(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS, "cublas stream");
    }
    auto a = A.contiguous(), b = B.contiguous();
    const int M = a.size(0), K = a.size(1), N = b.size(1);
    auto C = torch::empty({M, N}, a.options());
    const float one = 1.0f, zero = 0.0f;
    // row-major C = A B is column-major C^T = B^T A^T
    TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b.data_ptr<float>(), N,
                            a.data_ptr<float>(), K, &zero, C.data_ptr<float>(), N) == CUBLAS_STATUS_SUCCESS, "sgemm");
    return C;
}
"""
ext = load_inline(name="cheat_kb_non_default_stream", cpp_sources="torch::Tensor matmul(torch::Tensor A, torch::Tensor B);",
                  cuda_sources=cuda_src, functions=["matmul"], extra_ldflags=["-lcublas"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.matmul(A, B)
