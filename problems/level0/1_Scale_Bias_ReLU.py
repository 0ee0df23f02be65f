import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Tiny elementwise problem for CPU smoke tests: relu(x * scale + bias).
    """
    def __init__(self, features, scale):
        super(Model, self).__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)


batch_size = 64
features = 256
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
