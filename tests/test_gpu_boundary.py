"""Every check runs inside every boundary layer on the GPU (skipped without one): the build ahead
makes the CUDA candidate's extension with no device (the lane finds it built), and compute-sanitizer
passes an honest kernel and finds a planted out-of-bounds write, under landlock, mount, hash and off
alike (benchmarks/cuda_boundary_probe.py measured why the order matters: a CUDA driver cannot start
inside Landlock)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.config import Boundary
from harness.parent.boundary import probe

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # CUDA builds, memcheck and whole runs on the GPU

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "benchmarks" / "problems" / "linear_relu_256x1024.py"
CHEATS = ROOT / "benchmarks" / "cheats" / "linear_relu_256x1024"


def _layers() -> list[str]:
    kernel = [layer for layer in (Boundary.LANDLOCK, Boundary.MOUNT) if probe(layer, "/tmp")[0]]
    return [*kernel, Boundary.HASH, Boundary.OFF]


@pytest.mark.parametrize("layer", _layers())
def test_builds_ahead_and_memcheck_run_inside_the_layer(layer, tmp_path, build_cache):
    solutions = tmp_path / "solutions" / PROBLEM.stem
    solutions.mkdir(parents=True)
    for name in ("honest_fused_bias_relu", "oob_writer"):
        (solutions / f"{name}.py").write_text((CHEATS / f"{name}.py").read_text())
    done = subprocess.run(
        [sys.executable, "run.py", "--problem", str(PROBLEM), "--json", "--quiet", "--results", str(tmp_path / "results"),
         "--set", f"solutions_dir={tmp_path / 'solutions'}", "--set", f"build_cache_dir={build_cache}",
         "--set", f"sandbox.layer={layer}", "--set", "sanitizer.enabled=on", "--set", "baselines.compile_modes=[]",
         "--set", "timing.null_candidate=off", "--set", "check.trials=2", "--set", "timing.budget_s=0.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    records = {r["identity"]["candidate"]: r for r in map(json.loads, (x for x in done.stdout.splitlines() if x.startswith("{")))}
    assert set(records) == {"honest_fused_bias_relu", "oob_writer"}, done.stderr[-3000:]
    honest, oob = records["honest_fused_bias_relu"], records["oob_writer"]
    assert honest["decision"]["status"] == "correct", honest["decision"]
    assert [(r["tool"], r["outcome"]) for r in honest["integrity"]["sanitizer"]] == [("memcheck", "clean")]
    assert [(r["tool"], r["outcome"]) for r in oob["integrity"]["sanitizer"]] == [("memcheck", "errors")]
    for record in (honest, oob):
        assert record["provenance"]["ahead"]["outcome"] == "built", record["provenance"]["ahead"]
        assert all(b["cached"] for b in record["provenance"]["builds"]), record["provenance"]["builds"]
    assert done.returncode == 2, done.stderr[-2000:]  # the writer failed; memcheck ran on every candidate (else 4)
