"""How fast this host's CPUs are now, so that two rate runs can be compared: a run on a slower host (its builds and
judge start-ups are CPU work) is not a measure of a change. The same fixed pure-Python work runs on one core alone,
then on every usable core at once; then a fresh interpreter imports torch.

    python3 benchmarks/host_probe.py [--out FILE.json] [--loops N] [--cores N]

Prints one line, e.g. "host: one core 38.1 M loops/s; 16 at once 36.9 each (97% of one alone); import torch 2.1 s",
and with --out writes its numbers as JSON. It takes about two seconds. benchmarks/verdict_rate_gpu.sh runs it before
each call's run and keeps the line in its log.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.parent.prebuild import usable_cores  # noqa: E402 - the cores the build pool counts

LOOPS = 3_000_000  # about 0.1 s on one core of a current server


def loops_per_second(loops: int) -> float:
    """The fixed work, timed on this process's clock: `loops` iterations of a small integer loop."""
    started = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i & 7
    seconds = time.perf_counter() - started
    return loops / seconds if seconds > 0 else 0.0


def import_seconds(module: str = "torch") -> Optional[float]:
    """A fresh interpreter's wall time to import `module`; None when it cannot."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return round(time.perf_counter() - started, 2) if done.returncode == 0 else None


def probe(loops: int = LOOPS, cores: Optional[int] = None, module: str = "torch") -> dict[str, Any]:
    """The numbers: one core's rate (best of three), each core's rate with `cores` running at once (their median
    and slowest), and `module`'s import time."""
    cores = cores or usable_cores()
    alone = max(loops_per_second(loops) for _ in range(3))
    with multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn").Pool(cores) as pool:
        together = pool.map(loops_per_second, [loops] * cores)
    return {
        "cores": cores,
        "one_core_mloops_s": round(alone / 1e6, 2),
        "each_at_once_mloops_s": round(statistics.median(together) / 1e6, 2),
        "slowest_at_once_mloops_s": round(min(together) / 1e6, 2),
        "at_once_share": round(statistics.median(together) / alone, 3) if alone else None,
        "import_s": import_seconds(module),
        "import_module": module,
    }


def line(found: dict[str, Any]) -> str:
    share = found["at_once_share"]
    imported = found["import_s"]
    return (
        f"host: one core {found['one_core_mloops_s']:.1f} M loops/s; {found['cores']} at once "
        f"{found['each_at_once_mloops_s']:.1f} each"
        + (f" ({share:.0%} of one alone)" if share is not None else "")
        + f"; import {found['import_module']} "
        + (f"{imported:.1f} s" if imported is not None else "failed")
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the numbers here, as JSON")
    parser.add_argument("--loops", type=int, default=LOOPS, help=f"the fixed work per core (default {LOOPS})")
    parser.add_argument("--cores", type=int, help="processes at once (default: every usable core)")
    parser.add_argument("--module", default="torch", help="the module a fresh interpreter imports (default torch)")
    args = parser.parse_args(argv)
    if args.loops < 1 or (args.cores is not None and args.cores < 1):
        print("error: --loops and --cores must be at least 1", file=sys.stderr)
        return 2
    found = probe(args.loops, args.cores, args.module)
    print(line(found))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
