import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A three-layer perceptron: Linear -> ReLU -> Linear -> ReLU -> Linear, in float32.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement; each op counted on its own, each tensor it reads or
    writes counted once:
      FLOPs: 2 * batch * (in * hidden + hidden * hidden + hidden * out) = 154.6 GFLOP
      bytes: activations and weights = 461 MB
      per op: linear1 1.33 ms, relu 0.02 ms, linear2 1.33 ms, relu 0.02 ms, linear3 0.33 ms
      estimate: 3.04 ms (compute-bound)
    """
    def __init__(self, in_features, hidden_features, out_features):
        super(Model, self).__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, hidden_features)
        self.fc3 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, in_features)
        Returns:
            torch.Tensor: (batch_size, out_features)
        """
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


batch_size = 2048
in_features = 4096
hidden_features = 4096
out_features = 1024


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
