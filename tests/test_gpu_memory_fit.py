"""On a GPU, a problem too large for the card is refused before its reference runs, with what it needs and what
the card has; every candidate of it gets `reference failed` (skipped without a GPU)."""

import time

import pytest

from harness.core.status import Status
from harness.core.store import RunStore
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

TOO_LARGE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(2**26, 1024)]  # 256 GiB of float32, and as much again out


def get_init_inputs():
    return []
'''


def test_a_problem_over_the_card_is_refused_before_its_reference_runs(tmp_path, build_cache):
    from harness.core.config import load_config

    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_Too_Large.py").write_text(TOO_LARGE)
    (tmp_path / "null.py").write_text(TOO_LARGE.replace("class Model(", "class ModelNew("))
    cfg = load_config(overrides=[f"results_dir={tmp_path / 'results'}", f"build_cache_dir={build_cache}", "timing.null_candidate=off",
                                 "baselines.compile_modes=[]", "sanitizer.enabled=off"])
    started = time.monotonic()
    records = evaluate_problem(resolve_problem("1_Too_Large", problems), [Candidate("null", tmp_path / "null.py")], cfg, "cuda",
                               RunStore(cfg.path(cfg.results_dir), "too-large"))
    assert time.monotonic() - started < 120  # measured: the judge's start, then the refusal; nothing of 256 GiB is drawn
    (record,) = records
    assert record.decision.status is Status.REFERENCE_FAILED, record.decision.reason
    assert record.decision.reason.startswith("reference failed: out of memory: the reference needs at least 512.0 GiB before it runs"), record.decision.reason
    assert "GiB the cuda has" in record.decision.reason
