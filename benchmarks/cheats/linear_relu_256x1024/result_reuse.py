"""Cheat: returns an uninitialised torch::empty of the output shape, hoping the allocator hands back the reference's result.
Expect: incorrect
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor empty_output(torch::Tensor x, torch::Tensor weight) {
    return torch::empty({x.size(0), weight.size(0)}, x.options());
}
"""

ext = load_inline(name="cheat_result_reuse", cpp_sources=cpp_src, functions=["empty_output"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.empty_output(x, self.linear.weight)
