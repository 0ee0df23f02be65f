"""Trials keep the input structure a problem's get_inputs() guarantees (triangular, symmetric,
simplex rows, masks, integers, sorted, non-negative), and still leave [0, 1) behind."""
import pytest
import torch

from harness import api
from harness.core.status import Status
from harness.device.inputs import redistribute, structure

CASES = {
    "randn": (torch.randn(64, 64), ()),
    "vector": (torch.rand(4096), ("non-negative",)),  # a diagonal as one dimension (KernelBench's level1/12)
    "vector randn": (torch.randn(100), ()),
    "rand": (torch.rand(64, 64), ("non-negative",)),
    "upper": (torch.triu(torch.randn(64, 64)), ("upper-triangular",)),
    "lower": (torch.tril(torch.rand(64, 64)), ("lower-triangular", "non-negative")),
    "symmetric": ((lambda a: a + a.T)(torch.randn(32, 32)), ("symmetric",)),
    "batched symmetric": ((lambda a: a + a.transpose(-1, -2))(torch.randn(4, 16, 16)), ("symmetric",)),
    "softmax rows": (torch.softmax(torch.randn(16, 10), -1), ("rows on the simplex", "non-negative")),
    "mask": ((torch.rand(16, 16) > 0.5).float(), ("0/1 mask",)),
    "integers": (torch.randint(0, 10, (16, 16)).float(), ("integer-valued",)),
    "sorted": (torch.randn(8, 100).sort(-1).values, ("sorted",)),
    "sparse": (torch.randn(64, 64) * (torch.rand(64, 64) > 0.9), ("zero pattern",)),
    "large upper": (torch.triu(torch.randn(5000, 5000)), ("upper-triangular",)),  # read in part
}


@pytest.mark.parametrize("name", CASES)
def test_structure_is_read_from_one_draw_and_every_redraw_keeps_it(name):
    value, expected = CASES[name]
    assert structure(value) == expected
    for distribution in ("normal", "signed", "shifted"):
        drawn = redistribute(value, distribution, 7, expected)
        if {"0/1 mask", "integer-valued"} & set(expected):
            assert drawn is value  # not redrawn: the trial's own get_inputs() draw is fresh already
        else:
            assert set(expected) <= set(structure(drawn)), distribution  # kept (a shift may add non-negativity)
            assert not torch.equal(drawn, value)


UPPER_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """C = A @ B for upper triangular A and B (KernelBench's level1/14): C is upper triangular too."""
    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B))

N = 48

def get_inputs():
    return [torch.triu(torch.randn(N, N)), torch.triu(torch.randn(N, N))]

def get_init_inputs():
    return []
'''

CLAMP_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.clamp(x, 0.0, 1.0)

def get_inputs():
    return [torch.rand(64, 64)]

def get_init_inputs():
    return []
'''


def candidate(problem: str, forward: str) -> str:
    head, _, _ = problem.partition("    def forward")
    return head.replace("class Model(", "class ModelNew(") + forward


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    from harness.core.config import load_config

    problems = tmp_path_factory.mktemp("problems")
    (problems / "14_Upper.py").write_text(UPPER_PROBLEM)
    (problems / "2_Clamp.py").write_text(CLAMP_PROBLEM)
    cfg = load_config(overrides=[f"results_dir={tmp_path_factory.mktemp('results')}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                                 f"problems_dir={problems}", "timing.enabled=false", "check.trials=4", "flags.no_custom_kernel=flag"])
    sources = {
        # sums over k in [i, j] only, as honest triangular kernels do: right on the problem's inputs
        "triangular_sum": ("14_Upper", candidate(UPPER_PROBLEM, "    def forward(self, A, B):\n        return torch.triu(torch.triu(A) @ torch.triu(B))\n")),
        # forgets B's diagonal: wrong on any upper triangular inputs
        "drops_diagonal": ("14_Upper", candidate(UPPER_PROBLEM, "    def forward(self, A, B):\n        return torch.triu(A @ torch.triu(B, 1))\n")),
        # right only while x stays in [0, 1), as torch.rand draws it
        "assumes_unit_range": ("2_Clamp", candidate(CLAMP_PROBLEM, "    def forward(self, x):\n        return x.clone()\n")),
    }
    with api.Session(cfg) as session:
        futures = {name: session.submit(problem, text, name=name) for name, (problem, text) in sources.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.slow
def test_a_kernel_that_relies_on_documented_triangular_inputs_is_correct(records):
    assert records["triangular_sum"].decision.status is Status.CORRECT, records["triangular_sum"].decision.reason


@pytest.mark.slow
def test_a_structure_bug_still_fails(records):
    assert records["drops_diagonal"].decision.status is Status.INCORRECT


@pytest.mark.slow
def test_a_kernel_valid_only_on_unit_range_inputs_still_fails(records):
    record = records["assumes_unit_range"]
    assert record.decision.status is Status.INCORRECT and "inputs" in record.decision.reason  # a redrawn trial, beyond [0, 1)


@pytest.mark.slow
def test_the_reference_record_says_what_the_redraws_keep(records):
    from pathlib import Path

    from harness.core.records import ReferenceRecord
    from harness.core.store import read_records

    path = Path(records["triangular_sum"].identity.candidate_path).parents[2] / "records.jsonl"
    (reference,) = [r for r in read_records(path) if isinstance(r, ReferenceRecord) and r.identity.problem == "14_Upper"]
    assert "input 0: upper-triangular (the normal, signed and shifted redraws keep it)" in reference.outcome.notes
