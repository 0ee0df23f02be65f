"""Candidate sources the tests share: ModelNew for problems/level0/1_Scale_Bias_ReLU (a bias, a
scale, a ReLU), with the forward and any code before the class given by the test."""

HONEST_FORWARD = "return torch.relu(x * self.scale + self.bias)"


def scale_bias_relu(forward: str = HONEST_FORWARD, before: str = "") -> str:
    """A ModelNew for 1_Scale_Bias_ReLU whose forward is the one line `forward`, with `before`
    (imports, module-level code) ahead of the class."""
    return f'''import torch
import torch.nn as nn
{before}

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        {forward}
'''
