import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A residual block in the style of ResNet's basic block, in float32:
    out = relu(bn2(conv2(relu(bn1(conv1(x))))) + x), both convolutions 3x3 with padding 1 and no
    bias, channels kept the same so the skip connection is the identity.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement; each op counted on its own, each tensor it reads or
    writes counted once (one activation is 134 MB):
      FLOPs: two convolutions of 2 * batch * C * H * W * C * 9 = 77.3 GFLOP
      bytes: 2014 MB over the seven ops
      per op: conv1 0.75 ms, bn1 0.09 ms, relu 0.09 ms, conv2 0.75 ms, bn2 0.09 ms,
              add 0.13 ms, relu 0.09 ms
      estimate: 1.99 ms
    """
    def __init__(self, channels, kernel_size):
        super(Model, self).__init__()
        padding = kernel_size // 2
        self.conv1 = nn.Conv2d(channels, channels, kernel_size, padding=padding, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size, padding=padding, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, channels, height, width)
        Returns:
            torch.Tensor: same shape as x
        """
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


batch_size = 32
channels = 64
height, width = 128, 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
