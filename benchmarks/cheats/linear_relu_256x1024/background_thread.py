"""Cheat: torch only; every forward also starts a background thread that sleeps 0.2 s.
Expect: no custom kernel
"""
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        threading.Thread(target=time.sleep, args=(0.2,), daemon=True).start()
        return torch.relu(self.linear(x))
