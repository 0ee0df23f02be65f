"""Fill the build cache for many candidates at once, each in its own process (no evaluation).

    python benchmarks/prebuild.py solutions/*/*.py [--jobs 8]

Uses the same content-addressed cache and build processes as `run.py`'s build-ahead pool
(`harness/parent/prebuild.py`), inside the same boundary (`sandbox.layer`, harness/parent/boundary.py: the
build processes write only their scratch and the build cache), so a later `python run.py` finds every build
finished. Builds that fail are only reported here; the evaluation reports them again as `build failed`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from harness.core.config import load_config
    from harness.parent.boundary import open_boundary
    from harness.parent.prebuild import BuildAhead, gpu_arch
    from harness.parent.scratch import RunScratch

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=8, help="concurrent builds")
    args = parser.parse_args()
    cfg = load_config()
    with RunScratch.create() as scratch:
        boundary = open_boundary(cfg, scratch.path)
        print(f"boundary around the builds: {boundary.describe()}", flush=True)
        builds = BuildAhead(
            cfg.path(cfg.build_cache_dir), gpu_arch() or "cpu", args.jobs, max(1, (os.cpu_count() or 1) // args.jobs),
            timeout=cfg.timeouts.load, env=boundary.env,
        )
        started = time.perf_counter()
        for path in args.files:
            builds.submit(path.resolve())
        for path in args.files:
            ahead = builds.wait(path.resolve())
            print(f"{path}: {ahead.outcome} {ahead.detail} ({ahead.seconds:.1f} s)", flush=True)
        builds.close()
        changes = boundary.watch.check() if boundary.watch is not None else []
        for change in changes:
            print(f"a build wrote outside its scratch: {change}", flush=True)
    print(f"{time.perf_counter() - started:7.1f} s  total for {len(args.files)} files with {args.jobs} jobs")


if __name__ == "__main__":
    main()
