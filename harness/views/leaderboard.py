"""Leaderboards are views of records: per-problem rankings and a cross-problem summary.

Written as CSV and GitHub-flavoured markdown, and shown as tables that fit the terminal, each
problem's reasons as notes under its table. Record text is shown literally everywhere
(harness.views.text); problems and candidates are in natural order (`l1_p2` before `l1_p10`).
"""

from __future__ import annotations

import math
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from harness.core import nullfloor
from harness.core.flags import column as flag_column
from harness.core.records import CandidateRecord, NullFloor, ReferenceRecord, latest_per_candidate
from harness.core.status import Status
from harness.sources.problem import natural_key
from harness.views.terminal import Column, fitted_table, left_out, notes
from harness.views.text import markdown_text, spreadsheet_safe

MEASURED = ["speedup", "protocol", "vs_compile", "sol_pct", "sol_floor", "own_share", "gradients"]
MEASURED += ["candidate_ms", "reference_ms", "compile_ms", "max_abs_error"]  # what each row measured, in every view
PROBLEM_COLUMNS = ["rank", "candidate", "status", "flags", "reason", *MEASURED]
NUMERIC = {
    "speedup",
    "vs_compile",
    "sol_pct",
    "own_share",
    "candidate_ms",
    "reference_ms",
    "compile_ms",
    "max_abs_error",
    "geomean_speedup",
    "geomean_vs_compile",
    "null_floor",
}
COMPILE_BASELINE = "torch.compile(default)"
# The terminal's view: headers with spaces (they wrap between words), and the order in which
# columns are left out when a table does not fit (highest first; 0: always shown).
TERMINAL_DROP = {
    "max_abs_error": 9,
    "sol_floor": 8,
    "compile_ms": 7,
    "reference_ms": 6,
    "own_share": 5,
    "gradients": 4,
    "candidate_ms": 3,
    "sol_pct": 2,
    "vs_compile": 1,
}
SUMMARY_DROP = {"candidates": 3, "geomean_vs_compile": 2, "evaluated": 1}


def _compile_name(names: Iterable[str]) -> str | None:
    """The torch.compile baseline the leaderboard compares with: default mode, else the first."""
    names = list(names)
    if COMPILE_BASELINE in names:
        return COMPILE_BASELINE
    return names[0] if names else None


def candidate_frame(records: Iterable[CandidateRecord]) -> pd.DataFrame:
    """One row per candidate; a later record for the same (problem, candidate) replaces an earlier one."""
    rows = []
    for r in latest_per_candidate(records).values():
        compile_name = _compile_name(r.timing.baseline_ms)
        rows.append(
            {
                "problem": r.identity.problem,
                "candidate": r.identity.candidate,
                "status": r.decision.status.value,
                "correct": r.decision.status is Status.CORRECT,
                "evaluated": r.decision.status is not Status.NEEDS_CUDA,
                "reason": f"[stricter than KernelBench: {r.decision.stricter.code}] {r.decision.reason}"
                if r.decision.stricter
                else r.decision.reason,
                "flags": flag_column(r.integrity.flags),
                "speedup": r.timing.speedup,
                "protocol": protocol_cell(r),
                "vs_compile": r.timing.speedups.get(compile_name) if compile_name else None,
                "sol_pct": r.timing.sol_fraction,
                "sol_floor": r.timing.sol_floor,
                "own_share": r.integrity.custom_kernel_share,
                "candidate_ms": r.timing.stats.median_ms
                if r.timing.stats and r.decision.status is Status.CORRECT
                else None,
                "reference_ms": r.timing.reference_ms,
                "compile_ms": r.timing.baseline_ms.get(compile_name) if compile_name else None,
                "max_abs_error": r.checks.max_abs_error,
                "gradients": r.checks.gradients,
                "device": r.identity.device,
                "run_id": r.identity.run_id,
            }
        )
    columns = [
        "problem",
        "candidate",
        "status",
        "correct",
        "evaluated",
        "reason",
        "flags",
        *MEASURED,
        "device",
        "run_id",
    ]
    return pd.DataFrame(rows, columns=columns)


def protocol_cell(record: CandidateRecord) -> Optional[str]:
    """How a ranked speedup was timed, so a problem's ratios under two protocols say so: `graph` or
    `eager`, and `eager, fallback` where the candidate could not be timed under its problem's mode
    (both sides were then re-timed eagerly: record.timing.stats.fallback says why). None when untimed."""
    stats = record.timing.stats
    if stats is None or record.timing.speedup is None:
        return None
    return f"{stats.timing_mode}, fallback" if stats.fallback else stats.timing_mode


_STATUS_ORDER = {s.value: i for i, s in enumerate(Status)}


def problem_table(frame: pd.DataFrame, problem: str) -> pd.DataFrame:
    """Correct candidates first, fastest first; then the rest by status, then name."""
    rows = frame[frame["problem"] == problem].copy()
    rows["_speed"] = rows["speedup"].fillna(-math.inf).where(rows["correct"], -math.inf)
    rows["_status"] = rows["status"].map(_STATUS_ORDER)
    rows["_name"] = rows["candidate"].map({name: i for i, name in enumerate(natural_order(rows["candidate"]))})
    rows = rows.sort_values(["correct", "_speed", "_status", "_name"], ascending=[False, False, True, True])
    ranks = []
    for position, correct in enumerate(rows["correct"], start=1):
        ranks.append(str(position) if correct else "-")
    rows.insert(0, "rank", ranks)
    return rows[PROBLEM_COLUMNS].reset_index(drop=True)


def natural_order(names: Iterable[str]) -> list[str]:
    """The distinct names (problems, or candidates) in natural order: `l1_p2` before `l1_p10`."""
    return sorted(set(names), key=natural_key)


def null_floors(frame: pd.DataFrame, references: Optional[Iterable[ReferenceRecord]]) -> dict[str, NullFloor]:
    """The worst null floor (furthest from 1.00 over the problem's lanes) of each problem in `frame`
    that has one."""
    if references is None:
        return {}
    shown = set(frame["problem"])
    return {p: f for p, f in nullfloor.by_problem(references).items() if p in shown}


def summary_table(
    frame: pd.DataFrame, fast_p: Sequence[float], references: Optional[Iterable[ReferenceRecord]] = None
) -> pd.DataFrame:
    """Per problem: counts, fast_p (KernelBench: share of evaluated candidates correct and > p x faster)
    and the geometric-mean speedup of correct candidates. When a reference has a null floor, a
    `null_floor` column: the null candidate's speedup (worst lane), empty where there is none, where
    it was not timed or where the null candidate failed."""
    floors = null_floors(frame, references)
    rows = []
    for problem in natural_order(frame["problem"]):
        group = frame[frame["problem"] == problem]
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
        if floors:
            row["null_floor"] = floors[problem].speedup if problem in floors else None
        rows.append(row)
    return pd.DataFrame(rows)


def _geomean(values: pd.Series) -> float | None:
    values = [float(v) for v in values.dropna() if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def cell_text(value: object, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        if column.startswith("fast_"):
            return f"{value:.0%}"
        if column in ("speedup", "vs_compile", "geomean_speedup", "geomean_vs_compile"):
            return f"{value:.2f}x"
        if column in ("sol_pct", "own_share"):
            return f"{value:.1%}"
        if column.endswith("_ms"):
            return f"{value:.4g}"
        return f"{value:.2g}"
    return str(value)


def summary_cells(summary: pd.DataFrame, floors: Mapping[str, NullFloor]) -> list[list[str]]:
    """The summary's cells as shown: the null floor as "1.00x [0.99, 1.01]" (its 95% interval) or
    "failed: <status>", the rest as `cell_text` writes them."""
    rows = []
    for row in summary.to_dict("records"):
        rows.append(
            [
                nullfloor.describe(floors.get(row["problem"])) if c == "null_floor" else cell_text(v, c)
                for c, v in row.items()
            ]
        )
    return rows


NAME_COLUMNS = ("problem", "candidate")


def markdown_table(table: pd.DataFrame, cells: Sequence[Sequence[str]] | None = None) -> str:
    """A GitHub-flavoured markdown table, each cell literal text (harness.views.text.markdown_text: one
    row per row, nothing in it read as a link, HTML or a cell break); `cells`: the rows as shown,
    when not `cell_text` of each value."""
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---:" if c in NUMERIC or c.startswith("fast_") else "---" for c in table.columns) + "|"
    lines = [header, rule]
    if cells is None:
        cells = [[cell_text(v, c) for v, c in zip(row, table.columns)] for row in table.itertuples(index=False)]
    names = [c in NAME_COLUMNS for c in table.columns]  # one word each: a line break in one is shown as `\n`
    for row_cells in cells:
        lines.append(
            "| " + " | ".join(markdown_text(cell, line_breaks=not name) for cell, name in zip(row_cells, names)) + " |"
        )
    return "\n".join(lines)


def render_markdown(
    frame: pd.DataFrame,
    fast_p: Sequence[float],
    title: str,
    charts: Mapping[str, str] | None = None,
    note: str = "",
    references: Optional[Iterable[ReferenceRecord]] = None,
) -> str:
    """The summary, then one table per problem; `charts` maps a problem to an image link shown
    under its heading, `note` is a line under the title, `references` give the null floors."""
    references = list(references) if references is not None else None
    summary = summary_table(frame, fast_p, references)
    summary_md = markdown_table(summary, summary_cells(summary, null_floors(frame, references)))
    parts = [f"# {markdown_text(title)}", ""] + ([note, ""] if note else []) + ["## Summary", "", summary_md, ""]
    for problem in natural_order(frame["problem"]):
        parts += [f"## {markdown_text(problem)}", ""]
        if charts and problem in charts:
            parts += [f"![{markdown_text(problem, brackets=True)}: speedups]({charts[problem]})", ""]
        parts += [markdown_table(problem_table(frame, problem)), ""]
    return "\n".join(parts)


def write_leaderboards(
    run_dir: Path,
    records: Iterable[CandidateRecord],
    fast_p: Sequence[float],
    *,
    plots: bool = True,
    references: Optional[Iterable[ReferenceRecord]] = None,
) -> tuple[Path, Path]:
    """leaderboard.csv and leaderboard.md in `run_dir`; with `plots` and matplotlib, also a chart per
    problem in run_dir/plots/, linked from the markdown. `references` (the run's ReferenceRecords,
    any number per problem) add the null floor to the summary."""
    frame = candidate_frame(records)
    csv_path = run_dir / "leaderboard.csv"
    md_path = run_dir / "leaderboard.md"
    names = natural_order(frame["problem"])
    tables = [problem_table(frame, p).assign(problem=p) for p in names]
    combined = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=PROBLEM_COLUMNS + ["problem"])
    combined = combined[["problem"] + PROBLEM_COLUMNS]
    spreadsheet_safe(combined).to_csv(csv_path, index=False, float_format="%.6g")
    charts: dict[str, str] = {}
    note = ""
    if plots:
        from harness.views import plots as plotting

        if plotting.available():
            written = plotting.write_plots(run_dir, {p: problem_table(frame, p) for p in names})
            charts = {p: "plots/" + urllib.parse.quote(path.name) for p, path in written.items()}
        else:
            note = f"Charts need matplotlib: `{plotting.INSTALL_HINT}`."
    md_path.write_text(render_markdown(frame, fast_p, f"Leaderboard: {run_dir.name}", charts, note, references) + "\n")
    return csv_path, md_path


def print_leaderboard(
    frame: pd.DataFrame, fast_p: Sequence[float], console: Any, references: Optional[Iterable[ReferenceRecord]] = None
) -> None:
    """Tables that fit `console`'s width: per problem, its ranking with the reasons as notes under
    it, then the summary (with the null floors of `references`). Every text is shown literally."""
    for problem in natural_order(frame["problem"]):
        _print_problem(problem_table(frame, problem), problem, console)
    references = list(references) if references is not None else None
    summary = summary_table(frame, fast_p, references)
    columns = [
        Column(column_header(c), numeric=c not in ("problem", "null_floor"), drop=SUMMARY_DROP.get(c, 0))
        for c in summary.columns
    ]
    table, dropped = fitted_table(
        "summary", columns, summary_cells(summary, null_floors(frame, references)), console.width
    )
    console.print(table)
    if dropped:
        console.print(left_out(dropped, console.width, "leaderboard.md"))


def column_header(column: str) -> str:
    """A column's header on the terminal: its words apart, so that it wraps between them (fast_p's
    thresholds keep their name)."""
    return column if column.startswith("fast_") else column.replace("_", " ")


def _print_problem(shown: pd.DataFrame, problem: str, console: Any) -> None:
    """One problem's table (no reason column) and its reasons under it, grouped by text."""
    status_style = {Status.CORRECT.value: "green", Status.NEEDS_CUDA.value: "yellow"}
    names = [c for c in shown.columns if c != "reason"]
    columns = [Column(column_header(c), numeric=c in NUMERIC, drop=TERMINAL_DROP.get(c, 0)) for c in names]
    rows: list[list[str]] = []
    styles: list[str] = []
    reasons: dict[str, list[str]] = {}
    for row in shown.to_dict("records"):
        rows.append([cell_text(row[c], c) for c in names])
        styles.append(
            "yellow"
            if row["status"] == Status.CORRECT.value and row["flags"]
            else status_style.get(row["status"], "red")
        )
        if row["reason"]:
            reasons.setdefault(str(row["reason"]), []).append(str(row["candidate"]))
    table, dropped = fitted_table(problem, columns, rows, console.width, styles)
    console.print(table)
    if reasons:
        console.print(notes("reasons", reasons))
    if dropped:
        console.print(left_out(dropped, console.width, "leaderboard.md"))
    console.print()
