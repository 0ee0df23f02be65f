"""Fairness: does identical code read 1.00x, and how far does a real candidate's speedup move run to run?

    python3 benchmarks/fairness.py [--repeats N] [--variants V] [--root DIR] [--set KEY=VALUE ...]
                                   [--out DIR] [--timeout S] PROBLEM...

PROBLEM is one of ours by name (problems/), or a problem file (KernelBench's, benchmarks/problems/).
Each repeat gives each problem a `run.py --all` run of its own, on a scratch tree holding:
  - the problem, with its candidates: `null` (the problem file with Model renamed ModelNew) and the
    real ones shipped for it (solutions/<name>/*.py, benchmarks/solutions/<name>/*.py);
  - with --variants V > 0, a second problem (1_Scale_Bias_ReLU) with V fresh CUDA candidates
    (benchmarks/pipeline.py's generator: cold builds), evaluated after the first, so that its builds
    run in the pool while the first problem is checked and timed.
Printed (and written to --out as fairness.json and fairness.md): per problem and repeat, the run's
built-in null floor with its interval (when the harness records one), the explicit null's speedup
and each real candidate's; then per candidate over the repeats, the median and the spread
((max - min) / median).

--root runs another checkout of the harness (e.g. an earlier commit, for today's figures) on the
same scratch trees and candidates.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pipeline import CUDA_TEMPLATE  # noqa: E402
from pipeline import PROBLEM as BUILDS_PROBLEM

from harness.core.schema import upgrade  # noqa: E402


def null_candidate(text: str) -> str:
    return re.sub(r"\bModel\b", "ModelNew", text)


def problem_file(spec: str) -> Path:
    path = Path(spec)
    if path.suffix == ".py" and path.is_file():
        return path.resolve()
    found = sorted((ROOT / "problems").rglob(f"{spec}.py"))
    if len(found) != 1:
        sys.exit(f"error: {spec}: not a problem file, nor one problem name under problems/")
    return found[0]


def shipped(name: str) -> list[Path]:
    return sorted(p for folder in (ROOT / "solutions" / name, ROOT / "benchmarks" / "solutions" / name) if folder.is_dir() for p in folder.glob("*.py") if not p.name.startswith("_"))


def stage(problem: Path, scratch: Path, variants: int, salt: str) -> None:
    """problems/a_target/<name>.py with its candidates; problems/z_builds/ with fresh variants."""
    name = problem.stem
    (scratch / "problems" / "a_target").mkdir(parents=True)
    shutil.copyfile(problem, scratch / "problems" / "a_target" / problem.name)
    solutions = scratch / "solutions" / name
    solutions.mkdir(parents=True)
    (solutions / "null.py").write_text(null_candidate(problem.read_text(encoding="utf-8")), encoding="utf-8")
    for candidate in shipped(name):
        shutil.copyfile(candidate, solutions / candidate.name)
    if variants:
        (scratch / "problems" / "z_builds").mkdir(parents=True)
        shutil.copyfile(next((ROOT / "problems").rglob(f"{BUILDS_PROBLEM}.py")), scratch / "problems" / "z_builds" / f"{BUILDS_PROBLEM}.py")
        folder = scratch / "solutions" / BUILDS_PROBLEM
        folder.mkdir(parents=True)
        for k in range(variants):
            (folder / f"variant_{k:02d}.py").write_text(CUDA_TEMPLATE.format(variant=k, salt=salt, threads=128 << (k % 3)), encoding="utf-8")


def read_run(results: Path, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"floor": None, "candidates": {}, "warnings": []}
    for records in results.glob("*/records.jsonl"):
        for line in records.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            record = upgrade(record)  # a line of an earlier version (a --root checkout's) in this harness's layout
            if (
                record.get("kind") == "reference"
                and record["identity"].get("problem") == name
                and record["timing"].get("null_floor")
            ):
                floor = record["timing"]["null_floor"]
                paired = floor.get("paired") or {}
                out["floor"] = {"status": floor["status"], "speedup": paired.get("speedup"), "low": paired.get("low"), "high": paired.get("high"), "protocol": paired.get("protocol")}
            elif record.get("kind") == "candidate" and record["identity"].get("problem") == name:
                identity, decision, timing = record["identity"], record["decision"], record["timing"]
                paired = timing.get("paired") or {}
                out["candidates"][identity["candidate"]] = {
                    "status": decision["status"], "speedup": timing.get("speedup"), "low": paired.get("low"), "high": paired.get("high"),
                    "protocol": paired.get("protocol") or (timing.get("stats") or {}).get("sync", ""), "reason": decision["reason"][:120],
                }
                out["warnings"] += [f"{identity['candidate']}: {w[:160]}" for w in decision.get("warnings", []) if "launch-bound" in w or "synchronise" in w]
    return out


def one_run(root: Path, problem: Path, args: argparse.Namespace, repeat: int) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix=f"fairness-{problem.stem[:20]}-"))
    try:
        stage(problem, scratch, args.variants, f"{os.getpid()}_{repeat}_{int(time.time())}")
        command = [sys.executable, "run.py", "--all", "--set", f"problems_dir={scratch / 'problems'}", "--set", f"solutions_dir={scratch / 'solutions'}",
                   "--set", f"build_cache_dir={ROOT / '.cache' / 'fairness-builds'}", "--results", str(scratch / "results"), "--device", args.device, "--quiet"]
        for override in args.set:
            command += ["--set", override]
        expected = len(list((scratch / "solutions" / problem.stem).glob("*.py")))
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env={**os.environ, "TMPDIR": str(scratch)})
        errors: list[str] = []
        drain = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        exit_code: Optional[int] = None
        stopped = ""
        while proc.poll() is None:
            time.sleep(1.0)
            if time.perf_counter() - started > args.timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                stopped = "timeout"
            elif args.variants and len(read_run(scratch / "results", problem.stem)["candidates"]) >= expected:
                # The problem is done; the variants only had to build meanwhile: end the run (exit 130).
                os.killpg(proc.pid, signal.SIGTERM)
                stopped = "ended after the problem"
                proc.wait(timeout=60)
        exit_code = proc.returncode
        drain.join(timeout=5)
        tail = [stopped] if stopped else [line.strip() for line in errors[-3:]]
        result = read_run(scratch / "results", problem.stem)
        result.update(problem=problem.stem, repeat=repeat, exit=exit_code, wall_s=round(time.perf_counter() - started, 1), tail=tail)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _x(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.3f}x"


def _with_interval(entry: Optional[dict[str, Any]]) -> str:
    if not entry:
        return ""
    if entry.get("speedup") is None:
        return entry.get("status", "")
    interval = f" [{entry['low']:.3f}, {entry['high']:.3f}]" if entry.get("low") is not None else ""
    return f"{entry['speedup']:.3f}x{interval}"


def report(runs: list[dict[str, Any]]) -> str:
    lines = ["| problem | repeat | null floor (built-in) | null.py | real candidates | wall s | exit |", "|---|---:|---|---|---|---:|---:|"]
    for run in runs:
        real = "; ".join(f"{name} {_with_interval(c) or c['status']}" for name, c in sorted(run["candidates"].items()) if name != "null")
        lines.append(f"| {run['problem']} | {run['repeat']} | {_with_interval(run['floor'])} | {_with_interval(run['candidates'].get('null'))} | {real} | {run['wall_s']} | {run['exit']} |")
    lines += ["", "| problem | candidate | runs | median | min | max | spread |", "|---|---|---:|---:|---:|---:|---:|"]
    series: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        if run["floor"] and run["floor"].get("speedup") is not None:
            series.setdefault((run["problem"], "(null floor)"), []).append(run["floor"]["speedup"])
        for name, c in run["candidates"].items():
            if c.get("speedup") is not None:
                series.setdefault((run["problem"], name), []).append(c["speedup"])
    for (problem, name), values in sorted(series.items()):
        middle = statistics.median(values)
        spread = (max(values) - min(values)) / middle if middle else float("nan")
        lines.append(f"| {problem} | {name} | {len(values)} | {_x(middle)} | {_x(min(values))} | {_x(max(values))} | {spread:.1%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--variants", type=int, default=8, help="fresh CUDA candidates built while the problem is timed (0: none)")
    parser.add_argument("--root", default=str(ROOT), help="the harness checkout to run (default: this one)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test of the script)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    files = [problem_file(p) for p in args.problems]
    runs = []
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for repeat in range(args.repeats):
        for problem in files:
            run = one_run(root, problem, args, repeat)
            runs.append(run)
            floor = _with_interval(run["floor"])
            print(f"{run['problem']} #{repeat}: floor {floor or '-'}; " + "; ".join(f"{n} {_with_interval(c) or c['status']}" for n, c in sorted(run["candidates"].items())) + f" ({run['wall_s']} s, exit {run['exit']})", flush=True)
            for warning in sorted(set(run["warnings"]))[:3]:
                print(f"    {warning}", flush=True)
            if run["exit"] not in (0, 1, 130) and run["tail"]:
                print("    " + " | ".join(run["tail"]), flush=True)
            if out:
                (out / "fairness.json").write_text(json.dumps(runs, indent=1))
    table = report(runs)
    print(table)
    if out:
        (out / "fairness.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
