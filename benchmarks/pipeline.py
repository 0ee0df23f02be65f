"""Is the harness compile-bound? Pipelined builds against strictly sequential ones, and a warm re-run.

    python3 benchmarks/pipeline.py [--count 16] [--device cuda|cpu] [--modes sequential,pipelined,warm]
                                   [--warm-also KEY=VALUE ...] [--out FILE|DIR]

Generates COUNT distinct candidates for 1_Scale_Bias_ReLU. Each is a real fused kernel, CUDA (or,
with --device cpu, the shipped C++ candidate), with its own extension name and source, so every
build is cold. They are evaluated in up to three modes, each with `python3 run.py` in its own
process:

  sequential  fresh build cache, builds.ahead=never, workers.prestart=never: every candidate is
              built inside its worker, then evaluated, one at a time
  pipelined   fresh build cache, the defaults (builds ahead in a CPU pool while the GPU
              evaluates, workers prestarted)
  warm        the pipelined run again, every build already in the cache

It prints the wall time of each, pipelined / sequential, warm / cold, the median worker phases
and the per-candidate harness overhead beyond build and GPU work: a candidate's wall time as the
parent saw it, minus the time its worker spent building (inside load) and checking and timing.
Targets (issue: scale): pipelined <= 0.35x sequential, warm <= 10% of cold, overhead <= 2 s.
A sequential run of many CUDA candidates can outlast one command's time limit; run it in parts
with --modes sequential and add their wall times (each part also evaluates the reference once).
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


def run_mode(name: str, work: Path, solutions: Path, cache: Path, device: str, ahead: str, extra: tuple[str, ...] = ()) -> dict:
    run_id = f"pipeline-{name}"
    command = [
        sys.executable, str(ROOT / "run.py"), "--problem", PROBLEM, "--device", device, "--quiet", "--json",
        "--run-id", run_id, "--results", str(work / "results"),
        "--set", f"solutions_dir={solutions}", "--set", f"build_cache_dir={cache}",
        "--set", f"measurement_cache_dir={work / 'measurements'}", "--set", f"builds.ahead={ahead}",
        "--set", f"workers.prestart={'never' if ahead == 'never' else 'auto'}",
        "--set", "baselines.compile_modes=[]", "--set", "timing.budget_s=1",
        *[arg for setting in extra for arg in ("--set", setting)],
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]  # candidate records in their parts (this checkout's run.py)
    overheads = []
    phases: dict[str, list[float]] = {}
    for record in records:
        provenance = record["provenance"]
        seconds = provenance.get("phase_seconds", {})
        device_work = seconds.get("check", 0.0) + seconds.get("time", 0.0)
        build = sum(b["seconds"] for b in provenance.get("builds", []) if not b["cached"])
        overheads.append(provenance["wall_seconds"] - build - device_work)
        for phase, value in seconds.items():
            phases.setdefault(phase, []).append(value)
        phases.setdefault("build", []).append(build)
        phases.setdefault("wall", []).append(provenance["wall_seconds"])
    statuses = sorted({r["decision"]["status"] for r in records})
    return {"mode": name, "wall_s": wall, "exit": done.returncode, "candidates": len(records), "statuses": statuses,
            "overhead_median_s": statistics.median(overheads) if overheads else None, "overhead_max_s": max(overheads) if overheads else None,
            "phase_median_s": {k: round(statistics.median(v), 3) for k, v in sorted(phases.items())},
            "stderr_tail": done.stderr[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--modes", default="sequential,pipelined,warm", help="comma-separated: sequential, pipelined, warm (warm needs pipelined)")
    parser.add_argument("--warm-also", metavar="KEY=VALUE", action="append", default=[], help="one more warm run with this config setting (e.g. workers.gpus=[0]); repeatable")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON (a folder gets pipeline.json)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"sequential", "pipelined", "warm"} or ("warm" in modes and "pipelined" not in modes):
        parser.error("--modes: a comma-separated choice of sequential, pipelined, warm; warm needs pipelined")
    work = Path(tempfile.mkdtemp(prefix="harness-pipeline-"))
    salt = f"{int(time.time())}"
    solutions = work / "solutions"
    folder = solutions / PROBLEM
    folder.mkdir(parents=True)
    for variant in range(args.count):
        source = CUDA_TEMPLATE.format(variant=variant, salt=salt, threads=(128, 256, 512)[variant % 3]) if args.device == "cuda" else cpu_variant(variant, salt)
        (folder / f"variant_{variant:02d}.py").write_text(source)
    plan = {"sequential": ("cache-sequential", "never"), "pipelined": ("cache-pipelined", "always"), "warm": ("cache-pipelined", "always")}
    results = [run_mode(mode, work, solutions, work / plan[mode][0], args.device, plan[mode][1]) for mode in ("sequential", "pipelined", "warm") if mode in modes]
    if "pipelined" in modes:
        results += [run_mode(f"warm {setting}", work, solutions, work / "cache-pipelined", args.device, "always", (setting,)) for setting in args.warm_also]
    for r in results:
        print(json.dumps(r), flush=True)
    print(f"\n{args.count} fresh {args.device} candidates of {PROBLEM}")
    width = max(12, *(len(r["mode"]) + 2 for r in results))
    print(f"{'mode':<{width}}{'wall s':>9}{'exit':>6}{'overhead median s':>20}{'max s':>8}  statuses")
    for r in results:
        med = f"{r['overhead_median_s']:.2f}" if r["overhead_median_s"] is not None else "-"
        top = f"{r['overhead_max_s']:.2f}" if r["overhead_max_s"] is not None else "-"
        print(f"{r['mode']:<{width}}{r['wall_s']:>9.1f}{r['exit']:>6}{med:>20}{top:>8}  {', '.join(r['statuses'])}")
    for r in results:
        print(f"{r['mode']:<{width}}median seconds per candidate: " + ", ".join(f"{k} {v:g}" for k, v in r["phase_median_s"].items()))
    walls = {r["mode"]: r["wall_s"] for r in results}
    if "sequential" in walls and "pipelined" in walls:
        print(f"pipelined / sequential = {walls['pipelined'] / walls['sequential']:.2f} (target <= 0.35)")
    if "warm" in walls:
        cold = ", ".join(f"{walls['warm'] / walls[m]:.1%} of {m}" for m in ("sequential", "pipelined") if m in walls)
        print(f"warm = {cold} (target <= 10% of cold)")
    if args.out:
        out = args.out / "pipeline.json" if args.out.is_dir() else args.out
        out.write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
