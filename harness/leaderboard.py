"""Leaderboards are views of records: per-problem rankings and a cross-problem summary.

Written as CSV and GitHub-flavoured markdown, and shown as a rich table on the terminal.
"""
from __future__ import annotations

import math
import urllib.parse
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd

from harness.records import CandidateRecord
from harness.status import Status

PROBLEM_COLUMNS = ["rank", "candidate", "status", "reason", "speedup", "vs_compile", "sol_pct", "gradients", "candidate_ms", "reference_ms", "compile_ms", "max_abs_error"]
NUMERIC = {"speedup", "vs_compile", "sol_pct", "candidate_ms", "reference_ms", "compile_ms", "max_abs_error", "geomean_speedup", "geomean_vs_compile"}
COMPILE_BASELINE = "torch.compile(default)"


def _compile_name(names: Iterable[str]) -> str | None:
    """The torch.compile baseline the leaderboard compares with: default mode, else the first."""
    names = list(names)
    if COMPILE_BASELINE in names:
        return COMPILE_BASELINE
    return names[0] if names else None


def candidate_frame(records: Iterable[CandidateRecord]) -> pd.DataFrame:
    """One row per candidate; a later record for the same (problem, candidate) replaces an earlier one."""
    rows = {}
    for r in records:
        compile_name = _compile_name(r.baseline_ms)
        rows[(r.problem, r.candidate)] = {
            "problem": r.problem,
            "candidate": r.candidate,
            "status": r.status.value,
            "correct": r.status is Status.CORRECT,
            "evaluated": r.status is not Status.NEEDS_CUDA,
            "reason": r.reason,
            "speedup": r.speedup,
            "vs_compile": r.speedups.get(compile_name) if compile_name else None,
            "sol_pct": r.sol_fraction,
            "candidate_ms": r.timing.median_ms if r.timing and r.status is Status.CORRECT else None,
            "reference_ms": r.reference_ms,
            "compile_ms": r.baseline_ms.get(compile_name) if compile_name else None,
            "max_abs_error": r.max_abs_error,
            "gradients": r.gradients,
            "device": r.device,
            "run_id": r.run_id,
        }
    columns = ["problem", "candidate", "status", "correct", "evaluated", "reason", "speedup", "vs_compile", "sol_pct", "gradients", "candidate_ms", "reference_ms", "compile_ms", "max_abs_error", "device", "run_id"]
    return pd.DataFrame(list(rows.values()), columns=columns)


_STATUS_ORDER = {s.value: i for i, s in enumerate(Status)}


def problem_table(frame: pd.DataFrame, problem: str) -> pd.DataFrame:
    """Correct candidates first, fastest first; then the rest by status, then name."""
    rows = frame[frame["problem"] == problem].copy()
    rows["_speed"] = rows["speedup"].fillna(-math.inf).where(rows["correct"], -math.inf)
    rows["_status"] = rows["status"].map(_STATUS_ORDER)
    rows = rows.sort_values(["correct", "_speed", "_status", "candidate"], ascending=[False, False, True, True])
    ranks = []
    for position, correct in enumerate(rows["correct"], start=1):
        ranks.append(str(position) if correct else "-")
    rows.insert(0, "rank", ranks)
    return rows[PROBLEM_COLUMNS].reset_index(drop=True)


def summary_table(frame: pd.DataFrame, fast_p: Sequence[float]) -> pd.DataFrame:
    """Per problem: counts, fast_p (KernelBench: share of evaluated candidates correct and > p x faster)
    and the geometric-mean speedup of correct candidates."""
    rows = []
    for problem, group in frame.groupby("problem", sort=True):
        evaluated = group[group["evaluated"]]
        n = len(evaluated)
        row = {"problem": problem, "candidates": len(group), "evaluated": n, "correct": int(evaluated["correct"].sum())}
        for p in fast_p:
            if p == 0:
                hits = evaluated["correct"]
            else:
                hits = evaluated["correct"] & (evaluated["speedup"].fillna(0) > p)
            row[f"fast_{p:g}"] = (float(hits.sum()) / n) if n else None
        row["geomean_speedup"] = _geomean(evaluated.loc[evaluated["correct"], "speedup"])
        row["geomean_vs_compile"] = _geomean(evaluated.loc[evaluated["correct"], "vs_compile"])
        rows.append(row)
    return pd.DataFrame(rows)


def _geomean(values: pd.Series) -> float | None:
    values = [float(v) for v in values.dropna() if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _cell(value: object, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        if column.startswith("fast_"):
            return f"{value:.0%}"
        if column in ("speedup", "vs_compile", "geomean_speedup", "geomean_vs_compile"):
            return f"{value:.2f}x"
        if column == "sol_pct":
            return f"{value:.1%}"
        if column.endswith("_ms"):
            return f"{value:.4g}"
        return f"{value:.2g}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table (pipes in cells escaped)."""
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---:" if c in NUMERIC or c.startswith("fast_") else "---" for c in table.columns) + "|"
    lines = [header, rule]
    for row in table.itertuples(index=False):
        cells = [_cell(v, c).replace("|", "\\|") for v, c in zip(row, table.columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(frame: pd.DataFrame, fast_p: Sequence[float], title: str, charts: Mapping[str, str] | None = None, note: str = "") -> str:
    """The summary, then one table per problem; `charts` maps a problem to an image link shown
    under its heading, `note` is a line under the title."""
    parts = [f"# {title}", ""] + ([note, ""] if note else []) + ["## Summary", "", markdown_table(summary_table(frame, fast_p)), ""]
    for problem in sorted(frame["problem"].unique()):
        parts += [f"## {problem}", ""]
        if charts and problem in charts:
            parts += [f"![{problem}: speedups]({charts[problem]})", ""]
        parts += [markdown_table(problem_table(frame, problem)), ""]
    return "\n".join(parts)


def write_leaderboards(run_dir: Path, records: Iterable[CandidateRecord], fast_p: Sequence[float], *, plots: bool = True) -> tuple[Path, Path]:
    """leaderboard.csv and leaderboard.md in `run_dir`; with `plots` and matplotlib, also a chart per
    problem in run_dir/plots/, linked from the markdown."""
    frame = candidate_frame(records)
    csv_path = run_dir / "leaderboard.csv"
    md_path = run_dir / "leaderboard.md"
    problems = sorted(frame["problem"].unique())
    tables = [problem_table(frame, p).assign(problem=p) for p in problems]
    combined = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=PROBLEM_COLUMNS + ["problem"])
    combined = combined[["problem"] + PROBLEM_COLUMNS]
    combined.to_csv(csv_path, index=False, float_format="%.6g")
    charts: dict[str, str] = {}
    note = ""
    if plots:
        from harness import plots as plotting

        if plotting.available():
            written = plotting.write_plots(run_dir, {p: problem_table(frame, p) for p in problems})
            charts = {p: "plots/" + urllib.parse.quote(path.name) for p, path in written.items()}
        else:
            note = f"Charts need matplotlib: `{plotting.INSTALL_HINT}`."
    md_path.write_text(render_markdown(frame, fast_p, f"Leaderboard: {run_dir.name}", charts, note) + "\n")
    return csv_path, md_path


def print_leaderboard(frame: pd.DataFrame, fast_p: Sequence[float], console: object) -> None:
    """Rich tables for the terminal."""
    from rich.table import Table

    status_style = {Status.CORRECT.value: "green", Status.NEEDS_CUDA.value: "yellow"}
    for problem in sorted(frame["problem"].unique()):
        table = Table(title=problem, title_justify="left")
        shown = problem_table(frame, problem)
        for column in shown.columns:
            table.add_column(column, justify="right" if column in NUMERIC else "left", overflow="fold", max_width=60 if column == "reason" else None)
        for row in shown.itertuples(index=False):
            cells = [_cell(v, c) for v, c in zip(row, shown.columns)]
            style = status_style.get(row.status, "red")
            table.add_row(*cells, style=style)
        console.print(table)  # type: ignore[attr-defined]
    summary = summary_table(frame, fast_p)
    table = Table(title="summary", title_justify="left")
    for column in summary.columns:
        table.add_column(column)
    for row in summary.itertuples(index=False):
        table.add_row(*[_cell(v, c) for v, c in zip(row, summary.columns)])
    console.print(table)  # type: ignore[attr-defined]
