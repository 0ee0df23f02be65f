"""How close is each timer to what the GPU itself reports, and how much does it move run to run?

Ground truth: the sum of the GPU activity durations of one call (CUPTI, through the PyTorch
profiler), with the L2 cache flushed before the call; the median over GT_CALLS calls. Taken two
ways: "isolated" (the device synchronised before and after each call, as KernelBench's timer
runs) and "queued" (flush and call queued back to back with no host wait, as the harness timer
and do_bench run). A GPU runs some kernels measurably faster in the second condition.
Timers compared:
  harness        harness.device.timing.time_forward with the default config (eager, stream end event,
                 empty-region overhead subtracted)
  harness-graph  the same in CUDA-graph mode (timing.mode=graph)
  kernelbench    3 warm-up calls, then 100 calls each timed by an event pair after a 256 MB
                 buffer write, mean
  do_bench       triton.testing.do_bench(..., return_mode="median")
Each timer (and the ground truth) runs ROUNDS times per workload, interleaved round by round so
that clock drift hits all of them alike. Reported per timer: the median of its rounds, its error
against the ground truth, and its spread, (max - min) / median over the rounds.

    python3 benchmarks/timer_fidelity.py [--rounds 5] [--only NAME...] [--json OUT.json]

Needs a CUDA GPU; candidates under solutions/ are built through the build cache (prebuild first).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.core.config import load_config  # noqa: E402
from harness.device.profile import profile_calls  # noqa: E402
from harness.device.timing import flush_buffer, time_forward  # noqa: E402

GT_CALLS = 20
INPUT_SETS = 3
TIMERS = ("harness", "harness-graph", "kernelbench", "do_bench")


def kernelbench_style(fn, args, device):
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device)
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize(device)
    times = []
    for _ in range(100):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))
    return statistics.fmean(times)


def do_bench(fn, args, device):
    import triton.testing

    return triton.testing.do_bench(lambda: fn(*args), return_mode="median")


def ground_truth(fn, arg_sets, device, flush, isolated):
    profiles = profile_calls(fn, arg_sets, device, flush, calls=GT_CALLS, tail_s=0.0, isolated=isolated)
    return statistics.median(p.kernel_ms for p in profiles), profiles[0].launches


def harness_timer(mode):
    cfg = load_config(overrides=[f"timing.mode={mode}"]).timing
    namespace = types.SimpleNamespace(**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__})

    def run(fn, arg_sets, device):
        return time_forward(fn, arg_sets, device, namespace).median_ms

    return run


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def workloads(device, with_candidates, only=None):
    """Yield (name, kind, callable, input sets), from ~20 us single kernels to ~11 ms fused
    problems, building each only when its name contains one of `only` (all when None)."""
    def wanted(name):
        return not only or any(o in name for o in only)

    def sets(make):
        return [make() for _ in range(INPUT_SETS)]

    for n in (1024, 2048, 4096):
        if wanted(f"matmul {n}x{n}"):
            yield f"matmul {n}x{n}", "kernel", torch.mm, sets(lambda n=n: [torch.randn(n, n, device=device), torch.randn(n, n, device=device)])
    if wanted("softmax 4096x4096"):
        yield "softmax 4096x4096", "kernel", lambda x: torch.softmax(x, -1), sets(lambda: [torch.randn(4096, 4096, device=device)])
    for millions in (8, 32):
        if wanted(f"relu {millions}M"):
            yield f"relu {millions}M", "kernel", torch.relu, sets(lambda n=millions << 20: [torch.randn(n, device=device)])
    if wanted("add 16M"):
        yield "add 16M", "kernel", torch.add, sets(lambda: [torch.randn(16 << 20, device=device), torch.randn(16 << 20, device=device)])
    from harness.device.buildcache import BuildCache

    major, minor = torch.cuda.get_device_capability(device)
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # as the worker and prebuild.py build: same flags, cache hit
    BuildCache(ROOT / ".cache" / "builds", f"{major}.{minor}").install()
    for path in sorted((ROOT / "problems" / "level2").glob("*.py")):
        number = path.stem.split("_")[0]
        candidate = ROOT / "solutions" / path.stem / "team_fused.py"
        use_candidate = with_candidates and candidate.is_file() and wanted(f"{number} team_fused")
        if not (wanted(f"{number} eager") or use_candidate):
            continue
        problem = load_module(path, f"problem_{path.stem}")
        torch.manual_seed(0)
        model = problem.Model(*problem.get_init_inputs()).to(device).eval()
        inputs = sets(lambda: [t.to(device) for t in problem.get_inputs()])
        if wanted(f"{number} eager"):
            yield f"{number} eager", "problem", model, inputs
        if use_candidate:
            module = load_module(candidate, f"candidate_{path.stem}")
            torch.manual_seed(0)
            new = module.ModelNew(*problem.get_init_inputs()).to(device).eval()
            new.load_state_dict(model.state_dict())
            yield f"{number} team_fused", "candidate", new, inputs


def gpu_now():
    """SM clock, power draw and active clock-event reasons (power cap 0x4, thermal 0x20/0x40, ...)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active", "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    return [v.strip() for v in out.split(",")] if out else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="workload names containing any of these")
    parser.add_argument("--no-candidates", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timers = {
        "harness": harness_timer("eager"),
        "harness-graph": harness_timer("graph"),
        "kernelbench": lambda fn, sets, dev: kernelbench_style(fn, sets[0], dev),
        "do_bench": lambda fn, sets, dev: do_bench(fn, sets[0], dev),
    }
    flush = flush_buffer(device)
    results = []
    with torch.no_grad():
        for name, kind, fn, arg_sets in workloads(device, not args.no_candidates, args.only):
            for a in arg_sets:
                fn(*a)
            torch.cuda.synchronize(device)
            rounds = {"ground_truth": [], "queued_truth": [], **{t: [] for t in TIMERS}}
            clocks = []
            launches = 0
            started = time.time()
            for r in range(args.rounds):
                order = list(TIMERS[r % len(TIMERS):] + TIMERS[:r % len(TIMERS)])  # rotate who goes first
                gt, launches = ground_truth(fn, arg_sets, device, flush, isolated=True)
                rounds["ground_truth"].append(gt)
                rounds["queued_truth"].append(ground_truth(fn, arg_sets, device, flush, isolated=False)[0])
                for timer in order:
                    rounds[timer].append(timers[timer](fn, arg_sets, device))
                    clocks.append(gpu_now())
            reasons = {c[2] for c in clocks if len(c) == 3}
            row = {"workload": name, "kind": kind, "launches": launches, "rounds": rounds, "gpu_after_each_timer": clocks,
                   "capped": any(r not in ("0x0000000000000000", "0x0000000000000001") for r in reasons), "seconds": round(time.time() - started, 1)}
            gt = statistics.median(rounds["ground_truth"])
            queued = statistics.median(rounds["queued_truth"])
            row["ground_truth_ms"] = gt
            row["queued_truth_ms"] = queued
            for key, values in rounds.items():
                med = statistics.median(values)
                row[key] = {"median_ms": med, "error": med / gt - 1, "error_vs_queued": med / queued - 1, "spread": (max(values) - min(values)) / med}
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print_table(results)


def print_table(results):
    print("\nerror vs isolated-call ground truth (spread over rounds); q: harness error vs queued ground truth; cap: clocks capped")
    head = f"{'workload':<20}{'n':>3}{'truth ms':>10}{'spread':>8}{'queued':>8}" + "".join(f"{t:>20}" for t in TIMERS) + f"{'q:harness':>11}{'cap':>4}"
    print(head)
    for row in results:
        cells = "".join(f"{row[t]['error']:>+10.2%} ({row[t]['spread']:>5.2%})" for t in TIMERS)
        print(f"{row['workload']:<20}{row['launches']:>3}{row['ground_truth_ms']:>10.4f}{row['ground_truth']['spread']:>8.2%}"
              f"{row['queued_truth']['error']:>+8.2%}{cells}{row['harness']['error_vs_queued']:>+11.2%}{'yes' if row['capped'] else '':>4}")


if __name__ == "__main__":
    main()
