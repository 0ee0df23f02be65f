import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Tall-and-skinny matrix product in float32: C = A @ B with A of shape (M, K), B of shape (K, N)
    and M far larger than K and N, so the output (M, N) is a narrow strip.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement:
      FLOPs: 2 * M * K * N = 137.4 GFLOP -> 2.66 ms
      bytes: A (1074 MB), B (1 MB) and C (268 MB) once each = 1343 MB -> 0.45 ms
      estimate: 2.66 ms (compute-bound)
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        """
        Args:
            A (torch.Tensor): (M, K)
            B (torch.Tensor): (K, N)
        Returns:
            torch.Tensor: A @ B, (M, N)
        """
        return torch.matmul(A, B)


M = 262144
K = 1024
N = 256

# The other-size trial (the problem has no batch_size): a row count that is no multiple of any tile.
HARNESS_EXTRA_SIZES = [{"M": 4097}]


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
