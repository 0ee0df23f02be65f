import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Elementwise y = x * scale + bias over one 256 MB float32 input: a data-plane benchmark problem
    (how the harness copes with large inputs and outputs), light enough to run on a CPU.
    """
    def __init__(self, rows, cols):
        super(Model, self).__init__()
        self.scale = nn.Parameter(torch.randn(cols))
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return x * self.scale + self.bias


rows = 4096
cols = 16384  # 4096 * 16384 * 4 bytes = 256 MiB


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return [rows, cols]
