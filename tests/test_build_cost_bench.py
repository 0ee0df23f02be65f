"""benchmarks/build_cost.py: what it reads from a build's .ninja_log and from nvcc --time, the table it writes, and
that a killed benchmark leaves no compiler running (ninja starts each compiler in a process group of its own)."""
import argparse
import importlib.util
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("build_cost", ROOT / "benchmarks" / "build_cost.py")
build_cost = importlib.util.module_from_spec(_spec)
sys.modules["build_cost"] = build_cost
_spec.loader.exec_module(build_cost)


def test_each_ninja_target_gets_its_seconds(tmp_path):
    (tmp_path / ".ninja_log").write_text("# ninja log v5\n0\t13840\t0\tmain.o\tabc\n10\t52410\t0\tcuda.cuda.o\tdef\n52410\t52800\t0\tmatmul.so\t0\n")
    assert build_cost.ninja_steps(tmp_path) == {"main.o": 13.84, "cuda.cuda.o": 52.4, "matmul.so": 0.39}
    assert build_cost.ninja_steps(tmp_path / "absent") == {}


def test_nvcc_phases_are_summed_by_name_across_its_rows(tmp_path):
    csv_path = tmp_path / "nvcc.csv"
    csv_path.write_text("source file name,phase name,phase input files,phase output file,arch,tool,metric,unit\n"
                        "cuda.cu,cicc,a,b,compute_90,cicc,15000.5,ms\ncuda.cu,cudafe++,a,b,,cudafe++,20000,ms\n"
                        "cuda.cu,cicc,a,b,compute_90,cicc,1000,ms\n")
    phases: dict = defaultdict(float)
    build_cost.nvcc_phases(csv_path, phases)
    assert phases == pytest.approx({"cicc": 16.0005, "cudafe++": 20.0})


def test_the_summary_gives_per_build_steps_and_the_precompiled_header_only_where_it_was_used():
    lines = [
        {"kernel": "l1_p1/a", "extension": "m", "main_o_s": 18.0, "cuda_o_s": 50.0, "link_s": 0.4, "plain_s": 14.0, "pch_s": 6.0, "pch_make_s": 30.0, "pch_used": True},
        {"kernel": "l1_p2/b", "extension": "n", "main_o_s": 20.0, "cuda_o_s": 54.0, "link_s": 0.4},
        {"kernel": "l1_p3/c", "extension": "", "note": "built nothing on import"},
    ]
    text = build_cost.summarize(lines, {"cicc": 30.0}, argparse.Namespace(parallel=4))
    assert "2 builds of 3 kernels" in text and "| C++ compile (main.cpp) | 38.0 | 19.0 |" in text and "| CUDA compile (nvcc) | 104.0 | 52.0 |" in text
    assert "14.00 s; against a precompiled torch/extension.h: 6.00 s" in text and "used in 1 of 2 builds" in text
    assert "| cicc | 30.0 |" in text and "l1_p3/c (built nothing on import)" in text


def test_killing_a_build_ends_every_process_of_its_session_whatever_its_group():
    # a child in a process group of its own, as ninja starts each compiler
    process = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time\n"
                                "child = subprocess.Popen(['sleep', '60'], process_group=0)\nprint(child.pid, flush=True)\ntime.sleep(60)"],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(process.stdout.readline())
    build_cost.kill_group(process.pid)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]:
        assert time.monotonic() < deadline, "the compiler in its own group outlived the kill"
        time.sleep(0.05)
