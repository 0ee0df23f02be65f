import torch
import torch.nn as nn


class Model(nn.Module):
    """
    2D convolution with a 3x3 kernel, stride 1 and padding 1 (same spatial size), with bias, in
    float32.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement:
      FLOPs: 2 * batch * out_ch * H * W * in_ch * 9 = 154.6 GFLOP -> 2.99 ms
      bytes: input (268 MB), output (268 MB), weights (0.6 MB) once each = 537 MB -> 0.18 ms
      estimate: 2.99 ms (compute-bound)
    """
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, in_channels, height, width)
        Returns:
            torch.Tensor: (batch_size, out_channels, height, width)
        """
        return self.conv(x)


batch_size = 32
in_channels = 128
out_channels = 128
height, width = 128, 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
