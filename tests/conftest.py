import os
import random
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.hookimpl(tryfirst=True)  # before -m deselects and xdist reads the groups
def pytest_collection_modifyitems(config, items):
    import torch

    for item in items:
        if item.get_closest_marker("heavy") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)  # -m "not slow" leaves the heavy tests out too
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _xdist_group(item) -> str:
    """The group whose tests one xdist worker runs one after another (--dist loadgroup); "" for none."""
    if item.get_closest_marker("heavy"):
        return "heavy"  # up to 17 GiB each (tests/test_lint.py): one at a time, within 24 GiB
    if "gpu" in item.keywords:
        return "gpu"  # one device: its tests run one at a time
    if "ray" in item.name.split("[")[0].split("_"):
        return "ray"  # a test named for Ray may start a local Ray instance: one at a time
    fixtures = getattr(item, "_fixtureinfo", None)
    scopes = {defs[-1].scope for defs in fixtures.name2fixturedefs.values()} if fixtures else set()
    shared = bool(scopes & {"package", "module", "class"})
    return item.nodeid.split("::")[0] if shared else ""  # a module's shared fixture is built once, on one worker


def _run_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this test run that every xdist worker shares (without xdist: the run's own)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-N/, above each worker's popen-gwK/
    folder = base / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _fixed_seeds():
    """Every test draws from the same seeds, whichever tests ran before it in its process (xdist deals them out)."""
    import torch

    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture
def isolated_tmp(tmp_path, monkeypatch):
    """In-process runs (and their workers) put their scratch under tmp_path; the scratch base."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path / "harness-scratch"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory):
    """One build cache for the whole test run, shared by its xdist workers: a source compiled once is reused
    by later tests (builds of one key take a file lock, so two workers never compile it twice)."""
    return _run_folder(tmp_path_factory, "builds")


@pytest.fixture(scope="session")
def measurement_cache(tmp_path_factory):
    """Device peaks measured once per test run, shared by its xdist workers."""
    return _run_folder(tmp_path_factory, "measurements")


@pytest.fixture
def make_config(tmp_path, build_cache, measurement_cache):
    """A config for fast test runs: results in tmp, short timing, short check timeouts, and the CPU also on a
    machine with a GPU (device=auto would take CUDA there and turn the CPU verdicts the tests expect into GPU
    runs); a test for the GPU hands "cuda" to the evaluation or passes device=cuda."""
    from tests.evaluations import fast_config

    def make(*extra: str):
        return fast_config(tmp_path, build_cache, measurement_cache, *extra)

    return make

