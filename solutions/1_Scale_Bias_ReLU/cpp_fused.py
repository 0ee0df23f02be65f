"""One pass over x on the CPU: relu(x * scale + bias) in a C++ loop (a CPU-path example)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor scale_bias_relu(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.device().is_cpu(), "this kernel runs on the CPU only");
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "x must be a 2-D float tensor");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float s = static_cast<float>(scale);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            float v = xp[r * cols + c] * s + bp[c];
            op[r * cols + c] = v > 0.f ? v : 0.f;
        }
    }
    return out;
}
"""

fused = load_inline(name="cpp_scale_bias_relu", cpp_sources=cpp_source, functions=["scale_bias_relu"])


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        return fused.scale_bias_relu(x, self.bias, self.scale)
