"""How long a judge takes to be ready, started on its own against forked from a zygote (`workers.judge_zygote`).

    python3 benchmarks/judge_start.py [--n 5] [--prewarm cuda] [--out FILE.json]

Each judge is a real one (harness.parent.supervise.JudgeClient): started as `python -m harness.judge.service`, or
forked from a zygote that has imported torch and the judge's modules. It is ready when it answers its first request
(an Open before any Start, which a judge refuses at once). With --prewarm cuda each judge first readies its CUDA
context and profiler, as a judge started ahead does on a GPU run, so the figure is what a lane waits for there. The
judges run one at a time; the zygote's own start (its imports) is given apart, as a run pays it once per lane.

Prints one line, e.g. "judge ready: on its own median 7.9 s (5); forked median 2.6 s (5); the zygote's start 5.4 s",
and with --out writes the seconds as JSON. Needs a GPU for --prewarm cuda.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.core import protocol as P  # noqa: E402
from harness.parent.supervise import JudgeClient, JudgeFailed  # noqa: E402
from harness.parent.zygote import Zygote  # noqa: E402


def ready_seconds(folder: Path, env: dict[str, str], zygote: Optional[Zygote], index: int) -> float:
    """Seconds from asking for a judge to its first answer; the judge is ended after it."""
    started = time.perf_counter()
    client = JudgeClient(log_path=folder / f"judge-{index}.log", cwd=folder, env=env, zygote=zygote)
    try:
        client.request(P.Open(P.Role.CANDIDATE), 300)
    except JudgeFailed:  # "a request before Start": it answered
        pass
    seconds = time.perf_counter() - started
    client.kill()
    client.close()
    return seconds


def measure(n: int, prewarm: str) -> dict[str, Any]:
    env = {"HARNESS_PREWARM": prewarm} if prewarm else {}
    folder = Path(tempfile.mkdtemp(prefix="judge-start-"))
    try:
        alone = [ready_seconds(folder, env, None, i) for i in range(n)]
        started = time.perf_counter()
        zygote = Zygote(env, folder / "zygote.out")
        try:
            while zygote.ready is None and zygote.running() and time.perf_counter() - started < 300:
                time.sleep(0.01)  # its imports
            zygote_s = time.perf_counter() - started
            forked = [ready_seconds(folder, env, zygote, n + i) for i in range(n)]
        finally:
            zygote.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"prewarm": prewarm, "alone_s": alone, "forked_s": forked, "zygote_start_s": zygote_s}


def render(found: dict[str, Any]) -> str:
    return (
        f"judge ready{' (prewarm ' + found['prewarm'] + ')' if found['prewarm'] else ''}: on its own median "
        f"{statistics.median(found['alone_s']):.2f} s ({len(found['alone_s'])}); forked median "
        f"{statistics.median(found['forked_s']):.2f} s ({len(found['forked_s'])}); the zygote's start "
        f"{found['zygote_start_s']:.2f} s"
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="judges of each kind (default 5)")
    parser.add_argument("--prewarm", choices=["", "cuda"], default="", help="cuda: each judge readies CUDA first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.n < 1:
        print(f"error: --n must be at least 1, got {args.n}", file=sys.stderr)
        return 2
    found = measure(args.n, args.prewarm)
    print(render(found))
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
