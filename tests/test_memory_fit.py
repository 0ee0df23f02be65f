"""A reference that cannot fit its device is refused before it runs: its weights, inputs and outputs are sized on
the meta device (nothing allocated), and what it needs is said against what the device has."""

import resource
import time

import torch

from harness.device.failures import load_module
from harness.judge.reference import meta_footprint, unfit

TIB_INPUT = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return self.linear(x)

def get_inputs():
    return [torch.randn(2**28, 1024)]  # 1 TiB of float32

def get_init_inputs():
    return [1024]
'''

NO_META_FORWARD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tensor(x.cpu().numpy())  # cannot run on the meta device

def get_inputs():
    return [torch.ones(1024)]

def get_init_inputs():
    return []
'''


def _module(tmp_path, text):
    path = tmp_path / "problem.py"
    path.write_text(text)
    return load_module(path, "__sized__", text)


def test_a_tebibyte_input_is_sized_without_allocating_it(tmp_path):
    module = _module(tmp_path, TIB_INPUT)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    weights, inputs, outputs = meta_footprint(module, module.Model)
    assert (weights, inputs, outputs) == ((1024 * 1024 + 1024) * 4, 2**40, 2**40)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: nothing of that size was made
    assert time.monotonic() - started < 30
    assert torch.randn(3).device.type == "cpu"  # the meta device was only the sizing's


def test_a_part_that_cannot_be_sized_counts_nothing_so_the_bound_errs_low(tmp_path):
    module = _module(tmp_path, NO_META_FORWARD)
    assert meta_footprint(module, module.Model) == (0, 4096, 0)


def test_the_refusal_says_what_the_reference_needs_and_what_the_device_has():
    gib = 2**30
    why = unfit((1 * gib, 30 * gib, 30 * gib), 80 * gib, 0.5, "cuda")
    assert why.startswith("the reference needs at least 61.0 GiB before it runs (weights 1.0, inputs 30.0, outputs 30.0")
    assert "over 50% of the 80.0 GiB the cuda has" in why


def test_a_reference_within_its_share_is_not_refused():
    gib = 2**30
    assert unfit((0, 7 * gib, 7 * gib), 80 * gib, 0.5, "cuda") == ""  # KernelBench's level 1 problem 34 on an 80 GB card
    assert unfit((0, 20 * gib, 20 * gib), 80 * gib, 0.5, "cuda") == ""  # exactly its share
