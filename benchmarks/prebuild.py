"""Fill the build cache for many candidates at once, each in its own process (no evaluation).

    python benchmarks/prebuild.py solutions/*/*.py [--jobs 8] [--cache DIR] [--header off|on|warm]

Uses the same content-addressed cache and build processes as `run.py`'s build-ahead pool
(`harness/parent/prebuild.py`), inside the same boundary (`sandbox.layer`, harness/parent/boundary.py: the
build processes write only their scratch and the build cache), so a later `python run.py` finds every build
finished. Builds that fail are only reported here; the evaluation reports them again as `build failed`.

--header says whether the builds use a precompiled torch/extension.h (harness/parent/pch.py): `off`, `on` (found,
or made once a build waits for a slot, as a run does) or `warm` (found or made before the first build starts; the
seconds that took are printed apart). Two passes over the same files into two empty caches, `off` and `warm`,
show what the header saves a build. The last line gives the builds' median and total seconds and their CPU
seconds (the compilers'; with `warm`, from after the header was ready).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
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
    parser.add_argument("--cache", type=Path, help="the build cache (default: the config's build_cache_dir)")
    parser.add_argument("--header", choices=("off", "on", "warm"), default="on", help="a precompiled torch/extension.h")
    args = parser.parse_args()
    cfg = load_config()
    cache = args.cache.resolve() if args.cache else cfg.path(cfg.build_cache_dir)
    with RunScratch.create() as scratch:
        boundary = open_boundary(cfg, scratch.path)
        print(f"boundary around the builds: {boundary.describe()}", flush=True)
        builds = BuildAhead(
            cache, gpu_arch() or "cpu", args.jobs, max(1, (os.cpu_count() or 1) // args.jobs),
            timeout=cfg.timeouts.load, env=boundary.env, nice=cfg.builds.nice,
            precompiled_header=args.header != "off" and boundary.cache_read_only,
        )
        started = time.perf_counter()
        if args.header == "warm" and builds.header is not None:  # made (or found) before the first build
            builds.header.make()
            print(f"precompiled header: {builds.header.note} ({builds.header.folder()})", flush=True)
            started = time.perf_counter()
        before = cpu_seconds()
        for path in args.files:
            builds.submit(path.resolve())
        seconds = []
        for path in args.files:
            ahead = builds.wait(path.resolve())
            seconds.append(ahead.seconds)
            print(f"{path}: {ahead.outcome} {ahead.detail} ({ahead.seconds:.1f} s)", flush=True)
        if builds.header is not None:
            print(f"precompiled header: {builds.header.note}", flush=True)
        builds.close()
        changes = boundary.watch.check() if boundary.watch is not None else []
        for change in changes:
            print(f"a build wrote outside its scratch: {change}", flush=True)
    median = statistics.median(seconds) if seconds else 0.0
    print(
        f"{time.perf_counter() - started:7.1f} s  total for {len(args.files)} files with {args.jobs} jobs; "
        f"header {args.header}; builds: median {median:.1f} s, sum {sum(seconds):.1f} s; "
        f"CPU {cpu_seconds() - before:.1f} s"
    )


def cpu_seconds() -> float:
    """User and system CPU seconds of this process's ended children and theirs (the build processes, ninja, the
    compilers): what the builds cost, which a build's wall hides when its two compiles run side by side."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


if __name__ == "__main__":
    main()
