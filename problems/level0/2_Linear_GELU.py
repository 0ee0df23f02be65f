import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Tiny GEMM + activation problem for CPU smoke tests.
    """
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


batch_size = 32
in_features = 128
out_features = 64


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
