"""Two trees' verdicts side by side (benchmarks/verdicts_gpu.sh wrote them): the same statuses, flags and
reasons? Figures in reasons (errors, percentages, times) are masked, since they move with every secret
draw; each problem's null floor is listed with both intervals.

    python3 benchmarks/verdicts_diff.py BEFORE_DIR AFTER_DIR [--labels before after]

Prints a markdown report; exit 1 when a status, a flag or a masked reason differs on a kernel both judged.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.core.schema import upgrade  # noqa: E402

FIGURE = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?%?")


def masked(reason: str) -> str:
    """A reason with its figures replaced by #."""
    return FIGURE.sub("#", reason or "")


def corpus(path: Path) -> dict[str, dict[str, Any]]:
    """kernel -> its state line (kbcorpus.py's), judged kernels only."""
    if not path.exists():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {line["kernel"]: line for line in lines if line.get("status") != "no record"}


def seeds(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(problem/candidate -> status, flags, reason; problem -> its null floor) from a run's records."""
    candidates: dict[str, dict[str, Any]] = {}
    floors: dict[str, Any] = {}
    if not path.exists():
        return candidates, floors
    for text in path.read_text().splitlines():
        try:
            record = upgrade(json.loads(text))
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "candidate":
            identity, decision = record["identity"], record["decision"]
            flags = [f["code"] for f in record["integrity"].get("flags") or []]
            key = f"{identity['problem']}/{identity['candidate']}"
            candidates[key] = {"status": decision["status"], "flags": flags, "reason": decision["reason"]}
        elif record.get("kind") == "reference" and record["timing"].get("null_floor"):
            floors[record["identity"]["problem"]] = record["timing"]["null_floor"]
    return candidates, floors


def verdict(line: dict[str, Any]) -> str:
    flags = [f["code"] if isinstance(f, dict) else f for f in line.get("flags") or []]
    return line["status"] + (f" ({', '.join(flags)})" if flags else "")


def table(title: str, before: dict[str, Any], after: dict[str, Any], labels: list[str]) -> tuple[list[str], int]:
    rows = [f"### {title}", "", f"| kernel | {labels[0]} | {labels[1]} | same status, flags and reason |", "|---|---|---|---|"]
    differ = 0
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            same = "not judged by both"
        elif (verdict(a), masked(a["reason"])) == (verdict(b), masked(b["reason"])):
            same = "yes"
        else:
            same = "NO: " + (masked(a["reason"])[:80] + " / " + masked(b["reason"])[:80])
            differ += 1
        rows.append(f"| {key} | {verdict(a) if a else '-'} | {verdict(b) if b else '-'} | {same} |")
    return rows + [""], differ


def floor_text(floor: Any) -> str:
    paired = (floor or {}).get("paired") or {}
    if not paired:
        return (floor or {}).get("status", "-")
    return f"{paired['speedup']:.2f}x [{paired['low']:.2f}, {paired['high']:.2f}] ({paired.get('protocol', '')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--labels", nargs=2, default=["before", "after"])
    args = parser.parse_args()
    labels = args.labels
    rows, differ = table(
        "Corpus draw", corpus(args.before / f"{labels[0]}-corpus.jsonl"), corpus(args.after / f"{labels[1]}-corpus.jsonl"), labels
    )
    (seeds_before, floors_before), (seeds_after, floors_after) = (
        seeds(args.before / f"{labels[0]}-seeds.jsonl"),
        seeds(args.after / f"{labels[1]}-seeds.jsonl"),
    )
    more, differ_seeds = table("Seed problems", seeds_before, seeds_after, labels)
    rows += more
    rows += ["### Null floor", "", f"| problem | {labels[0]} | {labels[1]} |", "|---|---|---|"]
    for problem in sorted(set(floors_before) | set(floors_after)):
        rows.append(f"| {problem} | {floor_text(floors_before.get(problem))} | {floor_text(floors_after.get(problem))} |")
    print("\n".join(rows))
    return 1 if differ + differ_seeds else 0


if __name__ == "__main__":
    sys.exit(main())
