import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Softmax over the last dimension of a (batch_size, dim) float32 tensor, one row at a time.

    Rows of 1024 keep most probabilities well above the float32 tolerance (atol 1e-4); with much
    wider rows nearly every output would be within atol of zero and the check would mean little.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement:
      FLOPs: about 5 per element = 2.0 GFLOP -> 0.04 ms
      bytes: x read once, output written once = 3221 MB -> 1.07 ms
      estimate: 1.07 ms (memory-bound)
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, dim)
        Returns:
            torch.Tensor: softmax of each row, (batch_size, dim)
        """
        return torch.softmax(x, dim=-1)


batch_size = 393216
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
