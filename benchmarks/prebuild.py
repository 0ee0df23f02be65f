"""Fill the build cache for many candidates at once, each in its own process (no evaluation).

    python benchmarks/prebuild.py solutions/*/*.py [--jobs 8]

Uses the same content-addressed cache as the worker, so a later `python run.py` finds every
build finished and times nothing but the evaluation. Builds that fail are only reported here;
the evaluation reports them again as `build failed`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUILD_ONE = """
import os, sys, torch
from pathlib import Path
from harness.buildcache import BuildCache
from harness.worker import load_module, WorkerFailure
arch = "%d.%d" % torch.cuda.get_device_capability() if torch.cuda.is_available() else "cpu"
if arch != "cpu":
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
cache = BuildCache(Path(sys.argv[2]), arch)
cache.install()
try:
    load_module(Path(sys.argv[1]), "__candidate__")
    print("ok", [(e["name"], "cached" if e["cached"] else "built") for e in cache.events])
except WorkerFailure as failure:
    print(failure.status.value, failure.reason)
"""


def build(path: Path, cache: Path) -> tuple[Path, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", BUILD_ONE, str(path), str(cache)], capture_output=True, text=True, cwd=ROOT)
    lines = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()
    return path, time.perf_counter() - started, lines[-1]


def main() -> None:
    from harness.config import load_config

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    cfg = load_config()
    cache = cfg.path(cfg.build_cache_dir)
    started = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        for path, seconds, outcome in pool.map(lambda p: build(p, cache), args.files):
            print(f"{seconds:7.1f} s  {path}: {outcome}", flush=True)
    print(f"{time.perf_counter() - started:7.1f} s  total for {len(args.files)} files with {args.jobs} jobs")


if __name__ == "__main__":
    main()
