"""The verdict corpus: honest kernels that must pass and wrong ones that must fail, on KernelBench's
own problem files, under our default checks and under KernelBench's profile.

    python3 benchmarks/verdict_corpus.py [--out DIR] [--profiles default,kernelbench] [--set KEY=VALUE ...] [PROBLEM ...]

Each file in benchmarks/corpus/<problem>/ opens with `Honest:` or `Wrong:` and one line of what it
does, then `Expect:` (its verdict under configs/default.yaml) and `KernelBench:` (under
configs/kernelbench.yaml), as benchmarks/cheats.py reads them. The problems are KernelBench's files,
found under --problems-dir (default benchmarks/kernelbench: `python3 benchmarks/kernelbench_levels.py
--fetch-from KERNELBENCH_GIT_DIR` fills it). One `run.py --all` per profile runs every folder through
the real CLI; the script writes the records and verdicts.md (one row per kernel, both profiles side by
side, with the check that made the difference where ours is stricter) and exits 1 when a verdict
differs from its expectation, or an honest kernel is flagged implausible-time. GPU only.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cheats import candidate_records, expectations, matches  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "corpus"
PROFILES = {"default": ("Expect", None), "kernelbench": ("KernelBench", ROOT / "configs" / "kernelbench.yaml")}


def kinds(folder: Path) -> dict[str, str]:
    """Candidate name -> Honest | Wrong, from the docstring's first word."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        match = re.match(r'\s*"""(Honest|Wrong):', path.read_text())
        if not path.name.startswith("_"):
            found[path.stem] = match.group(1) if match else "?"
    return found


def run_profile(profile: str, problems: list[str], out: Path, problems_dir: Path, overrides: list[str]) -> tuple[dict[tuple[str, str], dict], float]:
    """Every corpus folder through run.py under one profile: (problem, candidate) -> record, and the wall time."""
    _, config = PROFILES[profile]
    shutil.rmtree(out / "results" / profile, ignore_errors=True)  # a run id is used once
    solutions = CORPUS
    if problems:  # only these folders: a solutions tree of links to them
        solutions = out / "solutions"
        shutil.rmtree(solutions, ignore_errors=True)
        solutions.mkdir()
        for name in problems:
            (solutions / name).symlink_to(CORPUS / name, target_is_directory=True)
    command = [sys.executable, "run.py", "--all", "--set", f"solutions_dir={solutions}", "--problems-dir", str(problems_dir),
               "--results", str(out / "results"), "--run-id", profile, "--json", "--quiet"]
    command += ["--config", str(config)] if config else []
    for item in overrides:
        command += ["--set", item]
    started = time.monotonic()
    saved = out / f"{profile}.jsonl"  # the records, kept beside the table as they come (a run cut short keeps its part)
    with saved.open("w") as stdout, (out / f"{profile}.stderr.txt").open("w") as stderr:
        subprocess.run(command, cwd=ROOT, stdout=stdout, stderr=stderr, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return by_kernel(candidate_records(saved.read_text())), time.monotonic() - started


def by_kernel(records: list[dict]) -> dict[tuple[str, str], dict]:
    """Candidate records (in their parts) by (problem, candidate)."""
    return {(r["identity"]["problem"], r["identity"]["candidate"]): r for r in records}


def error(record: dict) -> str:
    """The failing check's max abs error, else the largest over the checks."""
    checks = [c for c in record["checks"].get("results", []) if c.get("max_abs_error") is not None]
    failing = [c for c in checks if not c["passed"]]
    values = [failing[-1]["max_abs_error"]] if failing else [c["max_abs_error"] for c in checks]
    return f"{max(values):.2g}" if values else ""


def cell(record: dict | None, options: list[tuple[str, str]], honest: bool) -> tuple[str, bool]:
    if record is None:
        return "(no record)", False
    codes = [f["code"] for f in record["integrity"].get("flags", [])]
    ok = matches(record, options) and not (honest and "implausible-time" in codes)
    text = record["decision"]["status"] + (f" ({', '.join(dict.fromkeys(codes))})" if codes else "")
    return (text if ok else f"**{text}**"), ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "corpus")
    parser.add_argument("--problems-dir", type=Path, default=ROOT / "benchmarks" / "kernelbench")
    parser.add_argument("--profiles", default="default,kernelbench")
    parser.add_argument("--set", action="append", default=[], help="a config override for both runs")
    parser.add_argument("--reuse", action="store_true", help="take a profile's records from --out where an earlier call left them")
    parser.add_argument("problems", nargs="*", help="corpus folders to run (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folders = [CORPUS / p for p in args.problems] if args.problems else [p for p in sorted(CORPUS.iterdir()) if p.is_dir() and not p.name.startswith("_")]
    profiles = args.profiles.split(",")
    results, walls = {}, {}
    for profile in profiles:
        saved = args.out / f"{profile}.jsonl"
        if args.reuse and saved.is_file():  # a profile run earlier (a call cut short goes on from here)
            results[profile], walls[profile] = by_kernel(candidate_records(saved.read_text())), 0.0
            continue
        results[profile], walls[profile] = run_profile(profile, args.problems, args.out, args.problems_dir, args.set)
        print(f"{profile}: {len(results[profile])} records in {walls[profile]:.0f} s", flush=True)
    header = "| problem | kernel | kind | " + " | ".join(f"{p}: expected | {p}: verdict" for p in profiles) + " | stricter than KernelBench | max abs error | speedup |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    wrong = total = 0
    for folder in folders:
        kind = kinds(folder)
        expected = {profile: expectations(folder, PROFILES[profile][0]) for profile in profiles}  # every file states every profile's verdict
        for name in kind:
            row = [folder.name, name, kind[name]]
            default = results.get("default", {}).get((folder.name, name)) or {}
            for profile in profiles:
                options = expected[profile][name]
                text, ok = cell(results[profile].get((folder.name, name)), options, kind[name] == "Honest")
                wrong += not ok
                total += 1
                row += [" or ".join(f"{s} + {c}" if c else s for s, c in options), text]
            stricter = (default.get("decision") or {}).get("stricter") or {}
            speedup = (default.get("timing") or {}).get("speedup")
            row += [f"{stricter['code']}: {stricter['detail']}" if stricter else "", error(default) if default else "", f"{speedup:.2f}" if speedup else ""]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    summary = f"{total - wrong} of {total} verdicts as expected ({', '.join(f'{p} {walls[p]:.0f} s' for p in profiles)})"
    (args.out / "verdicts.md").write_text(summary + "\n\n" + "\n".join(lines) + "\n")
    print(summary + "\n\n" + "\n".join(lines), flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
