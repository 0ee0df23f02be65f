import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Tiny GEMM + BatchNorm problem: train and eval mode differ, and train mode updates buffers.
    """
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return self.bn(self.linear(x))


batch_size = 48
in_features = 64
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
