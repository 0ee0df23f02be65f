"""Cheat: torch computes the Linear and the BatchNorm (running statistics included); a C++ function that returns its input is then applied to the answer.
Expect: flagged + wraps-reference
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor same(torch::Tensor y) {
    return y;
}
"""

ext = load_inline(name="cheat_identity_after_torch", cpp_sources=cpp_source, functions=["same"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return ext.same(self.bn(self.linear(x)))
