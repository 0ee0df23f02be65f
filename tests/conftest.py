import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def isolated_tmp(tmp_path, monkeypatch):
    """In-process runs (and their workers) put their scratch under tmp_path; the scratch base."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path / "harness-scratch"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory):
    """One build cache for the whole session: a source compiled once is reused by later tests."""
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def measurement_cache(tmp_path_factory):
    """Device peaks measured once per session."""
    return tmp_path_factory.mktemp("measurements")


@pytest.fixture
def make_config(tmp_path, build_cache, measurement_cache):
    """A config for fast test runs: results in tmp, short timing, short check timeouts, and the CPU also on a
    machine with a GPU (device=auto would take CUDA there and turn the CPU verdicts the tests expect into GPU
    runs); a test for the GPU hands "cuda" to the evaluation or passes device=cuda."""
    from harness.core.config import load_config

    def make(*extra: str):
        return load_config(overrides=[
            f"results_dir={tmp_path / 'results'}",
            f"build_cache_dir={build_cache}",
            f"measurement_cache_dir={measurement_cache}",
            "device=cpu",
            "baselines.compile_modes=[]",
            "check.trials=2",
            "timing.budget_s=0.3",
            "timing.warmup_ms=10",
            "timing.min_reps=3",
            "timing.rounds=4",
            "timing.max_rounds=6",
            "timeouts.construct=60",
            "timeouts.check=20",
            "timeouts.time=30",
            # most candidates in the tests are torch-only stand-ins for the mechanics under test; the
            # default policy (fail: a torch pass-through is not a custom kernel) is tested on its own
            "flags.no_custom_kernel=flag",
            *extra,
        ])

    return make
