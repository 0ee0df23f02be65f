"""Cheat: torch only; at import replaces torch.nn.functional.linear with a wrapper that calls the original.
Expect: no custom kernel + tamper-suspect or tampered
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

_original_linear = F.linear


def _linear(input, weight, bias=None):
    return _original_linear(input, weight, bias)


torch.nn.functional.linear = _linear


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(F.linear(x, self.linear.weight, self.linear.bias))
