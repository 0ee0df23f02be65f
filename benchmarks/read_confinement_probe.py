"""What a candidate's process can still do on the GPU when its reads are confined (docs/integrity.md,
"The boundary"): each case runs in a fresh process that creates its CUDA context, takes an own folder
and enters Landlock as a worker does (`sandbox.reads` confined or open), then does one thing a
kernel candidate does: a cuBLAS matmul, a cuDNN convolution, a Triton kernel compiled on the spot, a
CUDA extension compiled with nvcc (load_inline), torch.compile of a small function. Where strace is
installed, the confined cases are run again under it and every file access the kernel refused is
listed: the paths the allow-list misses.

    python benchmarks/read_confinement_probe.py [--out FILE.json]   # on a machine with a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("matmul", "conv", "triton", "nvcc", "compile")

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from harness.core.boundary import SandboxPolicy
from harness.core.config import Boundary
from harness.worker import sandbox
case, reads, own = sys.argv[1], sys.argv[2], sys.argv[3]
import torch
torch.empty(1, device="cuda")  # the context first, as the worker does
sandbox.take_own(own)
started = time.perf_counter()
entered = sandbox.enter(SandboxPolicy(Boundary.LANDLOCK, confine_reads=reads == "confined"), own=own)
result = {{"case": case, "reads": reads, "entered": entered, "enter_ms": round((time.perf_counter() - started) * 1e3, 2)}}
try:
    if case == "matmul":
        a = torch.randn(512, 512, device="cuda")
        ok = torch.allclose(a @ a, (a.double() @ a.double()).float(), atol=1e-2)
    elif case == "conv":
        x, w = torch.randn(2, 8, 32, 32, device="cuda"), torch.randn(16, 8, 3, 3, device="cuda")
        ok = torch.nn.functional.conv2d(x, w).shape == (2, 16, 30, 30)
    elif case == "triton":
        import triton
        import triton.language as tl

        @triton.jit
        def add(x, y, out, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

        x = torch.randn(1000, device="cuda")
        out = torch.empty_like(x)
        add[(4,)](x, x, out, 1000, BLOCK=256)
        ok = torch.equal(out, x + x)
    elif case == "nvcc":
        from torch.utils.cpp_extension import load_inline
        cuda = "__global__ void k(float* y, const float* x, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }}\n" \
               "torch::Tensor twice(torch::Tensor x) {{ auto y = torch::empty_like(x); k<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), x.numel()); return y; }}"
        build = sandbox.own_builds() / "probe"
        build.mkdir(parents=True)
        module = load_inline("probe_twice", cpp_sources="torch::Tensor twice(torch::Tensor x);", cuda_sources=cuda,
                             functions=["twice"], build_directory=str(build), verbose=False)
        x = torch.randn(1000, device="cuda")
        ok = torch.equal(module.twice(x), 2 * x)
    else:
        f = torch.compile(lambda x: torch.relu(x) * 2 + 1)
        x = torch.randn(1000, device="cuda")
        ok = torch.allclose(f(x), torch.relu(x) * 2 + 1)
    result["ok"] = bool(ok)
except BaseException as exc:
    result["ok"] = False
    result["error"] = f"{{type(exc).__name__}}: {{exc}}"[-600:]
print("RESULT " + json.dumps(result), flush=True)
"""


def run_case(case: str, reads: str, strace: str = "") -> dict:
    own = tempfile.mkdtemp(prefix=f"probe-{case}-")
    child = Path(own + ".py")  # a file, not -c: Triton reads its kernels' source back
    child.write_text(CHILD.format(root=str(ROOT)))
    command = [sys.executable, str(child), case, reads, own]
    log = Path(own + ".strace")
    if strace:
        command = [strace, "-f", "-Z", "-e", "trace=%file", "-o", str(log), *command]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        result = json.loads(lines[-1][7:]) if lines else {"case": case, "reads": reads, "ok": False,
                                                          "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    except subprocess.TimeoutExpired:
        result = {"case": case, "reads": reads, "ok": False, "error": "timed out after 300 s"}
    if strace and log.is_file():
        refused = sorted({line.split('"')[1] for line in log.read_text(errors="replace").splitlines()
                          if "EACCES" in line and line.count('"') >= 2})
        result["refused"] = refused[:80]
    shutil.rmtree(own, ignore_errors=True)
    log.unlink(missing_ok=True)
    child.unlink(missing_ok=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [run_case(case, reads) for reads in ("open", "confined") for case in CASES]
    strace = shutil.which("strace") or ""
    traced = [run_case(case, "confined", strace) for case in CASES] if strace else []
    print(f"{'case':<9} {'reads':<9} {'ok':<5} {'enter ms':>8}  error")
    for row in rows:
        print(f"{row['case']:<9} {row['reads']:<9} {str(row['ok']):<5} {row.get('enter_ms', 0):>8}  {row.get('error', '')[:150]}")
    for row in traced:
        print(f"refused under confined reads ({row['case']}, traced; ok={row['ok']}): {row.get('refused', [])}")
    if not strace:
        print("strace: not installed here; no refused paths listed")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "traced": traced}, indent=1))


if __name__ == "__main__":
    main()
