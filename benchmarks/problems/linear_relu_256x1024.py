"""A small launch-bound problem: a 256 x 1024 x 1024 Linear, then ReLU. On a modern GPU its two
kernels take a few microseconds; host launch overhead is most of an eager call."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 256
in_features = 1024
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
