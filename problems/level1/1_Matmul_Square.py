import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Square matrix product in float32: C = A @ B, with A, B and C all of shape (N, N).

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement:
      FLOPs: 2 * N^3 = 137.4 GFLOP -> 2.66 ms
      bytes: A, B and C once each = 201 MB -> 0.07 ms
      estimate: 2.66 ms (compute-bound)
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        """
        Args:
            A (torch.Tensor): (N, N)
            B (torch.Tensor): (N, N)
        Returns:
            torch.Tensor: A @ B, (N, N)
        """
        return torch.matmul(A, B)


N = 4096

# The other-size trial (the problem has no batch_size): an odd size, no multiple of any tile.
HARNESS_EXTRA_SIZES = [{"N": 1025}]


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []
