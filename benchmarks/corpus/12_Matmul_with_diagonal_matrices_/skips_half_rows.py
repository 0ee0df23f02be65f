"""Wrong: diag(A) @ B as row scaling with one block per row, but the grid is launched with N / 2 blocks (a leftover from a two-rows-per-block version), so only the first half of the rows is written and the rest stays zero.
Expect: incorrect
KernelBench: incorrect
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor diag_matmul_rows(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// One block per row i: C[i][j] = A[i] * B[i][j].
__global__ void row_scale_rows_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ C, int64_t cols) {
    const int64_t row = blockIdx.x;
    const float s = A[row];
    const float* b = B + row * cols;
    float* c = C + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) c[j] = s * b[j];
}

torch::Tensor diag_matmul_rows(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "diag_matmul_rows: expected CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "diag_matmul_rows: expected float32");
    TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && A.size(0) == B.size(0), "diag_matmul_rows: expected A (N,) and B (N, M)");
    A = A.contiguous();
    B = B.contiguous();
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "diag_matmul_rows: expected contiguous inputs");
    const int64_t rows = B.size(0), cols = B.size(1);
    auto C = torch::zeros({rows, cols}, B.options());
    if (rows == 0 || cols == 0) return C;
    const c10::cuda::CUDAGuard guard(B.device());
    const int threads = 256;
    const int64_t blocks = rows / 2;   // bug: each block handles one row, not two
    if (blocks > 0) {
        TORCH_CHECK(blocks <= 2147483647LL, "diag_matmul_rows: too many rows");
        row_scale_rows_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), cols);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return C;
}
"""

ext = load_inline(name="corpus_diag_matmul_skips_half_rows", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["diag_matmul_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.diag_matmul_rows(A, B)
