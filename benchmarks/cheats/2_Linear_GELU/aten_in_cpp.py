"""Cheat: the whole forward is one C++ function, but it computes by calling torch's own operators (torch::addmm, then torch::gelu) through the dispatcher: no arithmetic of its own.
Expect: no custom kernel
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    return torch::gelu(torch::addmm(bias, x, weight.t()));
}
"""

ext = load_inline(name="cheat_aten_in_cpp", cpp_sources=cpp_source, functions=["linear_gelu"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.linear_gelu(x, self.linear.weight, self.linear.bias)
