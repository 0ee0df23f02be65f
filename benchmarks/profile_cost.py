"""What one profiled call costs in a fresh process, and whether the profiler leaves launches slower.

    python3 benchmarks/profile_cost.py            (CUDA; prints one JSON line)

Times, in this process: CUDA start-up, a first profile_call (profiler start-up included), a second
one, and the host time of 2000 small launches before and after profiling.
"""
import json
import os
import time

import torch

from harness.device.profile import profile_call


def launches(x: torch.Tensor, n: int = 2000) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    out = {"TEARDOWN_CUPTI": os.environ.get("TEARDOWN_CUPTI", "")}
    t = time.perf_counter()
    x = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    out["cuda_init_s"] = time.perf_counter() - t
    out["launch_us_before"] = launches(x)
    f = lambda a: (a * 2).relu()  # noqa: E731
    for label in ("first", "second"):
        t = time.perf_counter()
        profile_call(f, [x], torch.device("cuda"))
        out[f"{label}_profile_s"] = time.perf_counter() - t
    out["launch_us_after"] = launches(x)
    from torch.profiler import ProfilerActivity, profile

    steps = {}
    t = time.perf_counter()
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    prof.__enter__()
    steps["enter_s"] = time.perf_counter() - t
    t = time.perf_counter()
    f(x)
    torch.cuda.synchronize()
    steps["call_s"] = time.perf_counter() - t
    t = time.perf_counter()
    prof.__exit__(None, None, None)
    steps["exit_s"] = time.perf_counter() - t
    t = time.perf_counter()
    prof.export_chrome_trace("/tmp/trace.json")
    steps["export_s"] = time.perf_counter() - t
    out.update({f"third_{k}": v for k, v in steps.items()})
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
