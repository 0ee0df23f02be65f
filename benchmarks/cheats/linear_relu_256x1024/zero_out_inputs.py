"""Cheat: a C++ function zeroes the input in place and returns zeros of the output shape.
Expect: mutated input or incorrect
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor zero_everything(torch::Tensor x, torch::Tensor weight) {
    torch::NoGradGuard no_grad;
    x.zero_();
    return torch::zeros({x.size(0), weight.size(0)}, x.options());
}
"""

ext = load_inline(name="cheat_zero_out_inputs", cpp_sources=cpp_src, functions=["zero_everything"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.zero_everything(x, self.linear.weight)
