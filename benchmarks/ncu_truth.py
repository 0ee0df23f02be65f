"""A second ground truth from Nsight Compute: per-call kernel durations of chosen workloads.

    python3 benchmarks/ncu_truth.py WORKLOAD [--calls 10]

runs itself under `ncu --clock-control none --cache-control none` (the GPU's own clocks, and
the L2 flushed by our 2x-L2 buffer write before every call, as in the timer), keeps only the
kernels inside the NVTX range around each call, and prints the median per-call sum of
`gpu__time_duration.sum`. WORKLOAD names one workload of timer_fidelity.py (substring match).
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
from pathlib import Path

RANGE = "harness_call"


def child(workload: str, calls: int) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from timer_fidelity import workloads

    from harness.device.timing import flush_buffer

    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    (name, _, fn, arg_sets), *_ = list(workloads(device, True, [workload]))
    flush = flush_buffer(device)
    with torch.no_grad():
        for index in range(3 + calls):
            flush.zero_()
            torch.cuda.synchronize(device)
            if index >= 3:
                torch.cuda.nvtx.range_push(RANGE)
            fn(*arg_sets[index % len(arg_sets)])
            torch.cuda.synchronize(device)
            if index >= 3:
                torch.cuda.nvtx.range_pop()
    print(f"profiled {name}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.workload, args.calls)
        return
    command = ["ncu", "--clock-control", "none", "--cache-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/",
               "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
               sys.executable, __file__, args.workload, "--calls", str(args.calls), "--child"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
        sys.exit(1)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    rows = [r for r in rows if r.get("gpu__time_duration.sum", "").replace(".", "", 1).replace(",", "").isdigit()]
    durations = [float(r["gpu__time_duration.sum"].replace(",", "")) for r in rows]  # ns
    per_call = len(durations) // args.calls
    sums = [sum(durations[i * per_call:(i + 1) * per_call]) / 1e6 for i in range(args.calls)]
    print(f"{args.workload}: {len(durations)} kernels, {per_call} per call; median per-call kernel sum {statistics.median(sums):.5f} ms "
          f"(min {min(sums):.5f}, max {max(sums):.5f})")


if __name__ == "__main__":
    main()
