import torch
import torch.nn as nn


class Model(nn.Module):
    """
    LayerNorm over the hidden dimension of (batch_size, seq_len, hidden) float32 activations,
    with a learned scale and shift.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement:
      FLOPs: about 8 per element = 3.2 GFLOP -> 0.06 ms
      bytes: x read once, output written once (weights negligible) = 3221 MB -> 1.07 ms
      estimate: 1.07 ms (memory-bound)
    """
    def __init__(self, hidden, eps=1e-5):
        super(Model, self).__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, seq_len, hidden)
        Returns:
            torch.Tensor: (batch_size, seq_len, hidden)
        """
        return self.norm(x)


batch_size = 24
seq_len = 4096
hidden = 4096


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
