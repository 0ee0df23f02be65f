"""Candidate sources the tests share: ModelNew for problems/level0/1_Scale_Bias_ReLU (a bias, a
scale, a ReLU), with the forward and any code before the class given by the test. A forward of
several lines indents its later lines itself (eight spaces)."""

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


def scale_bias_relu_with_side_work(work: str) -> str:
    """A ModelNew for 1_Scale_Bias_ReLU that keeps state of its own: it computes the honest answer,
    then runs `work` (one line at the forward's indent), with `self.extra` (a 2048 x 2048 matrix) and
    `self.side` (a second CUDA stream) made on its first call and `threading`, `time` imported."""
    return f'''import threading, time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale
        self.extra = None

    def forward(self, x):
        out = torch.relu(x * self.scale + self.bias)
        if self.extra is None:
            self.extra = torch.randn(2048, 2048, device=x.device)
            self.side = torch.cuda.Stream(x.device)
        {work}
        return out
'''
