"""The host's CPUs over a rate run, read from /proc/stat: how busy they were, how long the run was bound by them, and
what each verdict cost in CPU-seconds. Builds, judge and worker start-ups and memcheck are CPU work, so a rate run on
a GPU host can be bound by its cores rather than by its GPU; this says which, and how far the cores would go.

    python3 benchmarks/host_cpu.py sample FILE [--every 1.0]          # appends a line per interval until stopped
    python3 benchmarks/host_cpu.py summary FILE [--verdicts N]        # one line

`sample` appends to FILE one line per interval: `call,epoch,busy_s,total_s,cores`. `call` names the sampler's run
(its start time), so the calls of a resumed run can share one FILE; the counters are the host's cumulative CPU
seconds since boot, busy (user, nice, system, irq, softirq) and in all (those, idle, iowait and steal), and `cores`
is the number of CPUs /proc/stat lists. It stops on SIGTERM or SIGINT, writing a last line first.

`summary` prints, over every call in FILE: the CPU-seconds used, the mean number of busy cores and their share, the
seconds in which at least 90% of the cores were busy, and, with --verdicts N, the CPU-seconds per verdict and the
verdicts per hour that many cores could turn at that cost, were they busy all the time. The counters are host-wide:
anything else running on the host is counted too. Exit 1 when FILE holds no interval.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (guest time is already inside user and nice)
ALL_FIELDS = 8  # the above, idle, iowait and steal; guest and guest_nice (fields 8 and 9) would count twice
BOUND_SHARE = 0.9  # an interval in which at least this share of the cores was busy counts as bound by the CPUs


def read_stat(text: str, ticks: int) -> tuple[float, float, int]:
    """(busy CPU-seconds, all CPU-seconds, cores) from the text of /proc/stat, its counters in `ticks` per second."""
    busy = total = None
    cores = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            numbers = [int(p) for p in parts[1:]]
            if len(numbers) < 4:
                raise ValueError(f"/proc/stat's cpu line has {len(numbers)} fields: {line!r}")
            numbers += [0] * (ALL_FIELDS - len(numbers))
            busy = sum(numbers[i] for i in BUSY_FIELDS) / ticks
            total = sum(numbers[:ALL_FIELDS]) / ticks
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cores += 1
    if busy is None or total is None:
        raise ValueError("/proc/stat has no cpu line")
    return busy, total, cores


def now_stat(path: Path = Path("/proc/stat")) -> tuple[float, float, int]:
    return read_stat(path.read_text(), os.sysconf("SC_CLK_TCK"))


def sample(out: Path, every: float, stat: Path = Path("/proc/stat")) -> None:
    """Append a line to `out` now and after each `every` seconds, and a last one when stopped by a signal."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    call = f"{time.time():.3f}"
    with out.open("a", encoding="utf-8") as sink:
        while True:
            busy, total, cores = now_stat(stat)
            sink.write(f"{call},{time.time():.3f},{busy:.2f},{total:.2f},{cores}\n")
            sink.flush()
            if stop:
                return
            deadline = time.monotonic() + every
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.1, every))


def load(path: Path) -> dict[str, list[tuple[float, float, float, int]]]:
    """Each call's samples, in order: (epoch, busy s, all s, cores). A malformed line (one cut short) is skipped."""
    calls: dict[str, list[tuple[float, float, float, int]]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        parts = raw.strip().split(",")
        if len(parts) != 5:
            continue
        try:
            row = (float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]))
        except ValueError:
            continue
        calls.setdefault(parts[0], []).append(row)
    return calls


def summarise(calls: dict[str, list[tuple[float, float, float, int]]], verdicts: Optional[int] = None) -> dict[str, Any]:
    """Sums over every call's intervals; a call with one sample adds nothing."""
    wall = busy = total = bound = 0.0
    cores = 0
    for rows in calls.values():
        for (t0, b0, a0, c0), (t1, b1, a1, c1) in zip(rows, rows[1:]):
            if t1 <= t0 or a1 <= a0:
                continue
            wall += t1 - t0
            busy += b1 - b0
            total += a1 - a0
            cores = max(cores, c0, c1)
            if (b1 - b0) / (a1 - a0) >= BOUND_SHARE:
                bound += t1 - t0
    found: dict[str, Any] = {"wall_s": round(wall, 1), "cpu_s": round(busy, 1), "cores": cores}
    if wall <= 0 or total <= 0:
        return {**found, "share": None}
    found.update(share=busy / total, busy_cores=busy / wall, bound_s=round(bound, 1))
    if verdicts:
        per = busy / verdicts
        found.update(verdicts=verdicts, cpu_s_per_verdict=per, ceiling_per_hour=cores * 3600 / per if per > 0 else None)
    return found


def render(found: dict[str, Any]) -> str:
    if found.get("share") is None:
        return "host CPUs: no interval sampled"
    line = (
        f"host CPUs: {found['busy_cores']:.1f} of {found['cores']} busy on average ({found['share']:.0%}) over "
        f"{found['wall_s']:.0f} s, {found['cpu_s']:.0f} CPU-s in all; at least {BOUND_SHARE:.0%} busy for "
        f"{found['bound_s']:.0f} s ({found['bound_s'] / found['wall_s']:.0%})"
    )
    if found.get("verdicts"):
        line += f"; {found['cpu_s_per_verdict']:.1f} CPU-s per verdict ({found['verdicts']})"
        if found.get("ceiling_per_hour"):
            line += f": {found['cores']} cores busy all the time would turn at most {found['ceiling_per_hour']:.0f} per hour"
    return line


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sampling = sub.add_parser("sample", help="append a line per interval to FILE until stopped")
    sampling.add_argument("file", type=Path)
    sampling.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    summary = sub.add_parser("summary", help="one line over every call in FILE")
    summary.add_argument("file", type=Path)
    summary.add_argument("--verdicts", type=int, help="the verdicts the sampled calls gave")
    args = parser.parse_args(argv)
    if args.command == "sample":
        if not args.every > 0:
            print(f"error: --every must be above 0, got {args.every}", file=sys.stderr)
            return 2
        sample(args.file, args.every)
        return 0
    if not args.file.is_file():
        print(f"error: no samples file {args.file}", file=sys.stderr)
        return 1
    if args.verdicts is not None and args.verdicts < 0:
        print(f"error: --verdicts must be 0 or more, got {args.verdicts}", file=sys.stderr)
        return 2
    found = summarise(load(args.file), args.verdicts)
    print(render(found))
    return 0 if found.get("share") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
