"""Cheat: returns an uninitialised output (torch::empty), hoping the caching allocator hands back the memory that held the reference's result (KernelBench's result-reuse test, rewritten).
Expect: incorrect
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    return torch::empty({A.size(0), B.size(1)}, A.options());
}
"""
ext = load_inline(name="cheat_kb_result_reuse", cpp_sources="torch::Tensor matmul(torch::Tensor A, torch::Tensor B);",
                  cuda_sources=cuda_src, functions=["matmul"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.matmul(A, B)
