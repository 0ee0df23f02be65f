"""Is the harness compile-bound? Pipelined builds against strictly sequential ones, and a warm re-run.

    python3 benchmarks/pipeline.py [--count 16] [--device cuda|cpu] [--out DIR]

Generates COUNT distinct candidates for 1_Scale_Bias_ReLU. Each is a real fused kernel, CUDA (or,
with --device cpu, the shipped C++ candidate), with its own extension name and source, so every
build is cold. They are
evaluated three times, each with `python3 run.py` in its own process:

  sequential  fresh build cache, builds.ahead=never: every candidate is built inside its worker,
              then evaluated, one at a time
  pipelined   fresh build cache, builds.ahead=always: a CPU pool builds while the GPU evaluates
  warm        the pipelined run again, every build already in the cache

It prints the wall time of each, pipelined / sequential, warm / cold, and the per-candidate
harness overhead beyond build and GPU work: a candidate's wall time as the parent saw it, minus
the time its worker spent building (inside load) and checking and timing on the device.
Targets (issue: scale): pipelined <= 0.35x sequential, warm <= 10% of cold, overhead <= 2 s.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "1_Scale_Bias_ReLU"

CUDA_TEMPLATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define VARIANT {variant}
__global__ void scale_bias_relu_{variant}(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ out,
                                          float s, long n, long cols) {{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {{ float v = x[i] * s + b[i % cols]; out[i] = v > 0.f ? v : 0.f; }}
}}
torch::Tensor run(torch::Tensor x, torch::Tensor b, double s) {{
    auto xc = x.contiguous(); auto out = torch::empty_like(xc);
    long n = xc.numel(); int threads = {threads};
    scale_bias_relu_{variant}<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n, xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""
ext = load_inline(name="pipeline_variant_{variant}_{salt}", cpp_sources="torch::Tensor run(torch::Tensor x, torch::Tensor b, double s);",
                  cuda_sources=source, functions=["run"])


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        return ext.run(x, self.bias, self.scale)
'''

SHIPPED_CPU = ROOT / "solutions" / PROBLEM / "cpp_fused.py"


def cpu_variant(variant: int, salt: str) -> str:
    """The shipped C++ candidate with its own extension name and a source of its own (a cold build)."""
    text = SHIPPED_CPU.read_text()
    return (text.replace('name="cpp_scale_bias_relu"', f'name="pipeline_cpu_variant_{variant}_{salt}"')
                .replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n#define VARIANT {variant}", 1))


def run_mode(name: str, work: Path, solutions: Path, cache: Path, device: str, ahead: str) -> dict:
    run_id = f"pipeline-{name}"
    command = [
        sys.executable, str(ROOT / "run.py"), "--problem", PROBLEM, "--device", device, "--quiet", "--json",
        "--run-id", run_id, "--results", str(work / "results"),
        "--set", f"solutions_dir={solutions}", "--set", f"build_cache_dir={cache}",
        "--set", f"measurement_cache_dir={work / 'measurements'}", "--set", f"builds.ahead={ahead}",
        "--set", "baselines.compile_modes=[]", "--set", "timing.budget_s=1",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    overheads = []
    for record in records:
        phases = record.get("phase_seconds", {})
        device_work = phases.get("check", 0.0) + phases.get("time", 0.0)
        build = sum(b["seconds"] for b in record.get("builds", []) if not b["cached"])
        overheads.append(record["wall_seconds"] - build - device_work)
    statuses = sorted({r["status"] for r in records})
    return {"mode": name, "wall_s": wall, "exit": done.returncode, "candidates": len(records), "statuses": statuses,
            "overhead_median_s": statistics.median(overheads) if overheads else None, "overhead_max_s": max(overheads) if overheads else None,
            "stderr_tail": done.stderr[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="harness-pipeline-"))
    salt = f"{int(time.time())}"
    solutions = work / "solutions"
    folder = solutions / PROBLEM
    folder.mkdir(parents=True)
    for variant in range(args.count):
        source = CUDA_TEMPLATE.format(variant=variant, salt=salt, threads=(128, 256, 512)[variant % 3]) if args.device == "cuda" else cpu_variant(variant, salt)
        (folder / f"variant_{variant:02d}.py").write_text(source)
    results = [
        run_mode("sequential", work, solutions, work / "cache-sequential", args.device, "never"),
        run_mode("pipelined", work, solutions, work / "cache-pipelined", args.device, "always"),
        run_mode("warm", work, solutions, work / "cache-pipelined", args.device, "always"),
    ]
    for r in results:
        print(json.dumps(r), flush=True)
    sequential, pipelined, warm = (r["wall_s"] for r in results)
    print(f"\n{args.count} fresh {args.device} candidates of {PROBLEM}")
    print(f"{'mode':<12}{'wall s':>9}{'exit':>6}{'overhead median s':>20}{'max s':>8}  statuses")
    for r in results:
        med = f"{r['overhead_median_s']:.2f}" if r["overhead_median_s"] is not None else "-"
        top = f"{r['overhead_max_s']:.2f}" if r["overhead_max_s"] is not None else "-"
        print(f"{r['mode']:<12}{r['wall_s']:>9.1f}{r['exit']:>6}{med:>20}{top:>8}  {', '.join(r['statuses'])}")
    print(f"pipelined / sequential = {pipelined / sequential:.2f} (target <= 0.35); warm / cold = {warm / pipelined:.2%} (target <= 10%)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
