"""The null floor with the host busy: each problem's null candidate (the file with Model renamed ModelNew) judged by
run.py with the hold on and off (timing.hold), with and without every core kept busy, so what moves a launch-bound
null shows beside what does not move a GPU-bound one.

    python3 benchmarks/null_floor.py --out DIR [--repeats N] [--load N] [--holds on,off] [--set KEY=VALUE ...] [PROBLEM ...]

PROBLEM: a problem name or file (default: 1_Scale_Bias_ReLU and linear_relu_256x1024, launch-bound graph replays of
a few microseconds, and 37_Matmul_Swish_Sum_GroupNorm, GPU-bound). Each pass is one run.py over every problem, with
the smoke's short timing; the load is --load busy processes (default: one per core) started before the pass and
stopped after it. Writes DIR/nulls.md and DIR/nulls.jsonl (one line per problem and pass: hold, load, repeat, the
null candidate's ratio and interval, its timing mode, held_ms and host_waits, and the reference's own null floor),
and each pass's log and records. Needs a CUDA GPU for the hold to mean anything; on a CPU it runs, unheld.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from harness.core.records import CandidateRecord, ReferenceRecord  # noqa: E402
from harness.core.store import read_records  # noqa: E402
from harness.sources.problem import resolve_problem  # noqa: E402
from kernelbench_levels import null_candidate  # noqa: E402

PROBLEMS = ["1_Scale_Bias_ReLU", "benchmarks/problems/linear_relu_256x1024.py", "37_Matmul_Swish_Sum_GroupNorm"]
SHORT = [  # the smoke's timing: a few short paired rounds
    "timing.warmup_ms=10",
    "timing.budget_s=1.5",
    "timing.rounds=4",
    "timing.max_rounds=8",
    "baselines.compile_modes=[]",
    "timing.null_candidate=on",
    "sanitizer.enabled=off",
    "flags.no_custom_kernel=flag",  # a null candidate is torch, and runs every kernel the reference does
    "flags.wraps_reference=flag",
]


def stage(problems: list[str], solutions: Path) -> list[Path]:
    """Each problem's null candidate in `solutions`/<name>/null.py; the problem files."""
    files = []
    for name in problems:
        problem = resolve_problem(name, ROOT / "problems")
        folder = solutions / problem.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "null.py").write_text(null_candidate(problem.path.read_text(encoding="utf-8")), encoding="utf-8")
        files.append(problem.path)
    return files


def busy(count: int) -> list[subprocess.Popen]:
    """`count` processes that spin on a core each until stopped."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def run_pass(files: list[Path], work: Path, run_id: str, sets: list[str], log: Path, limit: float) -> int:
    command = [sys.executable, str(ROOT / "run.py"), "--run-id", run_id, "--results", str(work / "results")]
    for path in files:
        command += ["--problem", str(path)]
    for setting in sets:
        command += ["--set", setting]
    with log.open("w") as out:
        try:
            return subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            return 124


def _paired(paired: Any) -> dict[str, Any]:
    if paired is None:
        return {"ratio": None, "low": None, "high": None}
    return {"ratio": paired.speedup, "low": paired.low, "high": paired.high}


def rows(records_file: Path, hold: bool, load: int, repeat: int, code: int) -> list[dict[str, Any]]:
    """One row per problem of a pass: its null candidate's record and its reference's null floor."""
    if not records_file.exists():
        return []
    records = read_records(records_file)
    floors = {r.identity.problem: r.timing.null_floor for r in records if isinstance(r, ReferenceRecord)}
    found = []
    for record in records:
        if not isinstance(record, CandidateRecord):
            continue
        stats: Optional[Any] = record.timing.stats
        floor = floors.get(record.identity.problem)
        found.append(
            {
                "problem": record.identity.problem,
                "hold": hold,
                "load": load,
                "repeat": repeat,
                "exit": code,
                "status": record.decision.status,
                **_paired(record.timing.paired),
                "mode": stats.timing_mode if stats else "",
                "held_ms": stats.held_ms if stats else 0.0,
                "host_waits": stats.host_waits if stats else 0,
                "floor": _paired(floor.paired if floor else None)["ratio"],
            }
        )
    return found


def _figure(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(lines: list[dict[str, Any]]) -> str:
    out = [
        "| problem | hold | busy processes | pass | null candidate | interval | mode | longest hold | host waits dropped "
        "| reference's own null floor |",
        "|---|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for line in lines:
        interval = f"[{_figure(line['low'])}, {_figure(line['high'])}]"
        out.append(
            f"| {line['problem']} | {'on' if line['hold'] else 'off'} | {line['load']} | {line['repeat']} "
            f"| {_figure(line['ratio'])}x ({line['status']}) | {interval} | {line['mode']} "
            f"| {line['held_ms']:.2f} ms | {line['host_waits']} | {_figure(line['floor'])}x |"
        )
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", default=PROBLEMS)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy processes in a loaded pass")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--limit", type=float, default=240.0, help="seconds for one pass")
    parser.add_argument("--holds", default="on,off", help="the timing.hold settings to run, in order: on,off")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="null-floor-") as scratch:
        work = Path(scratch)
        files = stage(args.problems, work / "solutions")
        base = [*SHORT, f"solutions_dir={work / 'solutions'}", f"build_cache_dir={work / 'builds'}", *args.sets]
        for repeat in range(1, args.repeats + 1):
            for load in (args.load, 0):
                for hold in [word == "on" for word in args.holds.split(",")]:
                    run_id = f"hold-{'on' if hold else 'off'}-load{load}-{repeat}"
                    spinning = busy(load)
                    started = time.monotonic()
                    try:
                        sets = [*base, f"timing.hold={'true' if hold else 'false'}"]
                        code = run_pass(files, work, run_id, sets, args.out / f"{run_id}.log", args.limit)
                    finally:
                        stop(spinning)
                    records = work / "results" / run_id / "records.jsonl"
                    if records.exists():
                        shutil.copy(records, args.out / f"{run_id}.records.jsonl")
                    found = rows(records, hold, load, repeat, code)
                    print(f"{run_id}: exit {code} after {time.monotonic() - started:.0f} s, {len(found)} rows", flush=True)
                    lines += found
                    (args.out / "nulls.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
                    (args.out / "nulls.md").write_text(table(lines))
    print(table(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
