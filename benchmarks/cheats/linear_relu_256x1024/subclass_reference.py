"""Cheat: torch only; ModelNew is a bare subclass of a copy of the reference Model.
Expect: no custom kernel
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


class ModelNew(Model):
    pass
