"""Cheat: torch computes relu(x * scale + bias); a C++ function then copies the answer element by element into a tensor of its own, which forward returns.
Expect: flagged + wraps-reference
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor copy_out(torch::Tensor y) {
    TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == torch::kFloat, "copy_out: a float tensor on the CPU");
    auto yc = y.contiguous();
    auto out = torch::empty_like(yc);
    const float* src = yc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < yc.numel(); ++i) {
        dst[i] = src[i];
    }
    return out;
}
"""

ext = load_inline(name="cheat_copy_after_torch", cpp_sources=cpp_source, functions=["copy_out"])


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        y = torch.relu(x * self.scale + self.bias)
        return ext.copy_out(y)
