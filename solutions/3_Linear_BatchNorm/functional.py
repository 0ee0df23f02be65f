"""BatchNorm written out with tensor ops (a CPU-path example that keeps the running statistics)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        bn = self.bn
        if bn.training:
            mean = y.mean(0)
            var = y.var(0, unbiased=False)
            with torch.no_grad():
                n = y.shape[0]
                bn.running_mean.mul_(1 - bn.momentum).add_(bn.momentum * mean)
                bn.running_var.mul_(1 - bn.momentum).add_(bn.momentum * var * n / (n - 1))
                bn.num_batches_tracked.add_(1)
        else:
            mean, var = bn.running_mean, bn.running_var
        return (y - mean) * torch.rsqrt(var + bn.eps) * bn.weight + bn.bias
