"""The package installs: a non-editable `pip install .` into a fresh virtual environment runs a
problem from outside the checkout, with its workers, its commands and its default config."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import __version__
from tests.venvs import venv_seeing_this_python

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_non_editable_install_runs_a_problem_from_outside_the_checkout(tmp_path):
    venv = tmp_path / "venv"
    # no pip of its own: the system's pip and setuptools build and install, with no download (no build isolation)
    python = venv_seeing_this_python(venv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout on the path
    source = tmp_path / "source"  # a copy of what the package is built from: the build leaves its folders there, not in the checkout
    shutil.copytree(ROOT / "harness", source / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", str(source)], capture_output=True, text=True, env={**env, "TMPDIR": str(tmp_path)}, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = subprocess.run([str(python), "-c", "import harness, harness.worker, harness.commands; print(harness.__file__)"], capture_output=True, text=True, cwd=outside, env=env)
    assert where.returncode == 0 and str(ROOT) not in where.stdout and "site-packages" in where.stdout, where.stdout + where.stderr
    results = outside / "results"
    command = [
        str(python), "-m", "harness", "--problems-dir", str(ROOT / "problems"), "--problem", "3_Linear_BatchNorm", "--device", "cpu", "--no-timing", "--json", "--quiet",
        "--set", f"solutions_dir={ROOT / 'solutions'}", "--set", "check.trials=1", "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}",
    ]
    run = subprocess.run(command, capture_output=True, text=True, cwd=outside, env=env, timeout=600)
    assert run.returncode == 2, run.stdout[-1000:] + run.stderr[-2000:]  # the torch-only candidate is no custom kernel: a failed candidate
    (record,) = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert record["identity"]["candidate"] == "functional" and record["decision"]["status"] == "no custom kernel", record["decision"]["reason"]
    assert (results / record["identity"]["run_id"] / "records.jsonl").is_file()  # relative paths start from where it was started
    script = subprocess.run([str(venv / "bin" / "kernel-harness"), "--version"], capture_output=True, text=True, cwd=outside, env=env)
    assert script.returncode == 0 and script.stdout.splitlines()[0] == f"kernel-harness {__version__}", script.stderr
