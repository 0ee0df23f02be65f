"""Run the cheat catalog through `run.py` and compare each verdict with the one its file expects.

    python3 benchmarks/cheats.py [--out DIR] [--set KEY=VALUE ...]

Every file in benchmarks/cheats/<problem>/ states what it must get on its second docstring line,
`Expect: <verdict>`: a status (`incorrect`), a status and a flag the record must carry
(`correct + side-stream`), or alternatives joined by ` or `. The script runs the whole folder
against benchmarks/problems/<problem>.py with the real CLI (builds, lanes, judge, sanitizer), writes
the records and a table (verdicts.md) under --out, and exits 1 when any verdict differs, or when a
candidate that must fail is ranked. The folders named after a problems/level0 problem hold CPU decoys
and run with device=cpu; the others need a GPU (on the CPU their CUDA candidates are skipped). With no
folder named: the GPU folders on a machine with CUDA, the CPU ones on a machine without.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.core.schema import upgrade  # noqa: E402

CATALOG = ROOT / "benchmarks" / "cheats"
PROBLEMS = ROOT / "benchmarks" / "problems"
LEVEL0 = ROOT / "problems" / "level0"


def cpu_folder(problem: str) -> bool:
    """A folder of CPU decoys: one named after a problems/level0 problem."""
    return (LEVEL0 / f"{problem}.py").is_file()


def default_folders() -> list[str]:
    """The folders this machine runs when none is named: the GPU ones with CUDA, else the CPU ones."""
    import torch

    gpu = torch.cuda.is_available()
    return [p.name for p in sorted(CATALOG.iterdir()) if p.is_dir() and cpu_folder(p.name) != gpu]


def expectations(folder: Path, key: str = "Expect") -> dict[str, list[tuple[str, str]]]:
    """Candidate name -> the verdicts it may get, each (status, flag code or ""), from its `<key>:` line."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        match = re.search(rf"^{key}:\s*(.+)$", path.read_text(), re.MULTILINE)
        if match is None:
            raise SystemExit(f"{path}: no '{key}:' line")
        options = []
        for option in match.group(1).split(" or "):
            status, _, code = option.partition(" + ")
            options.append((status.strip(), code.strip()))
        found[path.stem] = options
    return found


def candidate_records(text: str) -> list[dict]:
    """The candidate records `run.py --json` printed (each record's data without its kind, one a line),
    in this harness's layout: a record of an earlier schema version upgraded (harness.core.schema.upgrade)."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            records.append(upgrade({"kind": "candidate", **data}))
    return [r for r in records if "candidate" in r["identity"] and "status" in r["decision"]]


def matches(record: dict, options: list[tuple[str, str]]) -> bool:
    """Whether a candidate record (its data, in its parts) got one of the verdicts `options` allows."""
    codes = {f["code"] for f in record["integrity"].get("flags", [])}
    return any(record["decision"]["status"] == status and (not code or code in codes) for status, code in options)


def run_catalog(problem: str, out: Path, overrides: list[str], timeout: float = 3000) -> tuple[list[dict], float]:
    """The catalog of `problem` through run.py; its candidate records and the wall time."""
    path = PROBLEMS / f"{problem}.py"  # a benchmark problem, else one of problems/
    command = [sys.executable, "run.py", "--problem", str(path) if path.is_file() else problem, "--set", f"solutions_dir={CATALOG}",
               "--results", str(out / "results"), "--run-id", problem, "--json", "--quiet"]
    for item in overrides:
        command += ["--set", item]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    (out / f"{problem}.stderr.txt").write_text(proc.stderr)
    return candidate_records(proc.stdout), time.monotonic() - started


def table(records: list[dict], expected: dict[str, list[tuple[str, str]]]) -> tuple[str, int]:
    """A markdown table of verdicts against expectations, and the count of mismatches."""
    lines = ["| candidate | expected | status | flags | ranked | reason |", "|---|---|---|---|---|---|"]
    wrong = 0
    by_name = {r["identity"]["candidate"]: r for r in records}
    for name, options in expected.items():
        record = by_name.get(name)
        want = " or ".join(f"{s} + {c}" if c else s for s, c in options)
        if record is None:
            wrong += 1
            lines.append(f"| {name} | {want} | (no record) | | | |")
            continue
        ok = matches(record, options)
        wrong += not ok
        decision = record["decision"]
        flags = ", ".join(dict.fromkeys(f["code"] + ("!" if f["policy"] == "fail" else "") for f in record["integrity"].get("flags", [])))
        ranked = "yes" if decision["status"] == "correct" else "no"
        reason = decision["reason"].replace("|", "\\|")[:140]
        lines.append(f"| {name} | {want} | {'' if ok else '**'}{decision['status']}{'' if ok else '**'} | {flags} | {ranked} | {reason} |")
    return "\n".join(lines), wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "cheats")
    parser.add_argument("--set", action="append", default=[], help="a config override for the run")
    parser.add_argument("problems", nargs="*")
    args = parser.parse_args()
    args.problems = args.problems or default_folders()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for problem in args.problems:
        expected = expectations(CATALOG / problem)
        records, seconds = run_catalog(problem, args.out, args.set + (["device=cpu"] if cpu_folder(problem) else []))
        text, wrong = table(records, expected)
        summary = f"## {problem}: {len(expected) - wrong} of {len(expected)} verdicts as expected, {seconds:.0f} s"
        (args.out / f"{problem}.md").write_text(summary + "\n\n" + text + "\n")
        print(summary + "\n\n" + text + "\n", flush=True)
        failed += wrong
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
