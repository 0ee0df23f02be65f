"""A candidate's fault on the GPU is its own status, never `harness error` (skipped without a GPU): a
kernel launch that failed and was never checked (the error stays pending until the next launch that
checks, which used to be the harness's copy of the outputs), and a lazy output on CUDA. Each has an
honest twin that stays correct."""

from pathlib import Path

import pytest

from harness.core.status import Status
from harness.core.store import RunStore
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # CUDA builds and a whole evaluation on the GPU

ROOT = Path(__file__).resolve().parent.parent
INVALID_LAUNCH = ROOT / "tests" / "data" / "candidates" / "1_Scale_Bias_ReLU" / "unchecked_invalid_launch.py"
LAZY_OUTPUT = ROOT / "benchmarks" / "cheats" / "1_Scale_Bias_ReLU" / "lazy_output.py"


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache):
    from harness.core.config import load_config

    root = tmp_path_factory.mktemp("gpu-faults")
    valid = INVALID_LAUNCH.read_text().replace("int threads = 2048;", "int threads = 256;")
    (root / "valid_launch.py").write_text(valid.replace("unchecked_invalid_launch_2048", "unchecked_valid_launch_256"))
    candidates = [Candidate(p.stem, p) for p in (INVALID_LAUNCH, LAZY_OUTPUT, root / "valid_launch.py")]
    overrides = [f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", "timing.budget_s=1"]
    cfg = load_config(overrides=overrides)
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "gpu-faults")
    return {r.identity.candidate: r for r in evaluate_problem(problem, candidates, cfg, "cuda", store)}


def test_a_failed_launch_left_unchecked_is_the_candidates_cuda_fault(records):
    decision = records["unchecked_invalid_launch"].decision
    assert decision.status in (Status.CUDA_FAULT, Status.RUNTIME_ERROR), (decision.status, decision.reason)
    assert "invalid" in decision.reason, decision.reason  # invalid configuration argument, or invalid argument


def test_the_same_kernel_launched_validly_is_correct(records):
    decision = records["valid_launch"].decision
    assert decision.status is Status.CORRECT, (decision.status, decision.reason)


def test_a_lazy_output_on_cuda_is_incorrect_and_flagged_never_timed(records):
    record = records["lazy_output"]
    assert record.decision.status is Status.INCORRECT, (record.decision.status, record.decision.reason)
    assert "torch.Tensor subclass" in record.decision.reason, record.decision.reason
    assert [f.policy for f in record.integrity.flags if f.code == "lazy-output"] == ["fail"]
    assert record.timing.speedup is None and record.timing.stats is None
