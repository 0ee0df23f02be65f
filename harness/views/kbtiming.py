"""KernelBench's published baseline timings (`results/timing/<hardware>/baseline_time_torch*.json`)
and fast_p computed against them.

The file is `{"level1": {"19_ReLU.py": {"mean", "std", "min", "max", "num_trials", "hardware",
"device"}}}`, times in milliseconds. KernelBench's own scoring (scripts/benchmark_eval_analysis.py
with kernelbench.score.fastp) divides the baseline's `mean` by the candidate's `runtime`, which its
eval sets to the mean of the candidate's trials: mean over mean. So here too: the baseline's `mean`
over the candidate's `timing.mean_ms`.

This is a view for comparison with KernelBench's published numbers. The leaderboard's own fast_p,
over the same run's reference timed in turns on the same GPU, is the honest one (docs/kernelbench.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pandas as pd

from harness.core.errors import UserError
from harness.core.records import CandidateRecord, ReferenceRecord, latest_per_candidate
from harness.core.status import Status
from harness.views.leaderboard import cell_text, column_header, markdown_table, natural_order
from harness.views.terminal import Column, fitted_table, notes
from harness.views.text import markdown_code, markdown_text, spreadsheet_safe, terminal_text

STATISTIC = "mean"  # the baseline entry's field KernelBench's scoring divides by the candidate's mean
LEVEL = re.compile(r"level\d+")
SHAPE = '{"level1": {"19_ReLU.py": {"mean": <ms>, ...}}}'
HONEST_NOTE = (
    "fast_p against KernelBench's published timings mixes in another machine, torch and timer; the leaderboard's "
    "fast_p (this run's reference, timed in turns on the same GPU) is the honest one"
)


@dataclasses.dataclass(frozen=True)
class BaselineTime:
    """One problem's entry in a KernelBench baseline timing file."""

    level: str  # "level1"
    file: str  # the problem's file name, "19_ReLU.py"
    mean_ms: float  # mean over its trials: what KernelBench's scoring uses
    num_trials: Optional[int] = None  # trials behind the mean (100 in the published files)
    hardware: str = ""  # the GPU it was measured on, e.g. "NVIDIA H100 80GB HBM3"

    def __post_init__(self) -> None:
        if not (self.mean_ms > 0 and math.isfinite(self.mean_ms)):
            raise ValueError("a baseline time is positive and finite")


@dataclasses.dataclass(frozen=True)
class KernelBenchBaseline:
    """A whole baseline timing file, validated."""

    source: str  # shown name: the hardware folder and the file, "H100_Modal/baseline_time_torch.json"
    hardware: str  # the GPU names its entries give, comma-separated ("" when none does)
    times: dict[tuple[str, str], BaselineTime]  # (level, file name) -> entry

    def find(self, problem: str, level: str) -> Optional[BaselineTime]:
        """The entry of `problem` (a file stem) in `level`; with no level known, the entry of that
        file name when exactly one level has it."""
        file = f"{problem}.py"
        if level:
            return self.times.get((level, file))
        found = [t for (_, name), t in self.times.items() if name == file]
        return found[0] if len(found) == 1 else None


def load_baseline(path: Path | str) -> KernelBenchBaseline:
    """Read and validate a KernelBench baseline timing file; anything else is a one-line UserError
    naming the file and what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such KernelBench baseline timing file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot be read ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc}); expected KernelBench's baseline timing file, {SHAPE}") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{path}: expected an object of levels, {SHAPE}")
    times = {}
    for level, entries in data.items():
        if not LEVEL.fullmatch(level) or not isinstance(entries, dict):
            raise UserError(f"{path}: {level!r} is not a level of problems; expected {SHAPE}")
        for file, entry in entries.items():
            times[(level, file)] = _entry(path, level, file, entry)
    if not times:
        raise UserError(f"{path}: no problem timings in it; expected {SHAPE}")
    hardware = ", ".join(sorted({t.hardware for t in times.values() if t.hardware}))
    return KernelBenchBaseline(source=f"{path.parent.name}/{path.name}", hardware=hardware, times=times)


def _entry(path: Path, level: str, file: str, entry: Any) -> BaselineTime:
    where = f"{path}: {level}/{file}"
    if not file.endswith(".py") or not isinstance(entry, dict):
        raise UserError(f"{where}: expected a problem file name mapped to its timing object, {SHAPE}")
    mean = entry.get(STATISTIC)
    if isinstance(mean, bool) or not isinstance(mean, (int, float)):
        raise UserError(f"{where}: {STATISTIC!r} is {'missing' if mean is None else f'not a number ({mean!r})'}")
    if not (mean > 0 and math.isfinite(mean)):
        raise UserError(f"{where}: {STATISTIC!r} must be a positive time in ms, got {mean!r}")
    trials = entry.get("num_trials")
    hardware = entry.get("hardware")
    return BaselineTime(
        level=level,
        file=file,
        mean_ms=float(mean),
        num_trials=trials if isinstance(trials, int) else None,
        hardware=hardware if isinstance(hardware, str) else "",
    )


def level_of(problem_path: str) -> str:
    """The KernelBench level of a problem file, its folder's name ("level1"); "" when the folder is
    not named like a level."""
    folder = Path(problem_path).parent.name
    return folder if LEVEL.fullmatch(folder) else ""


@dataclasses.dataclass(frozen=True)
class ProblemAgainstBaseline:
    """One problem's fast_p over KernelBench's baseline time, and how far the two reference times are apart."""

    problem: str  # file stem
    level: str  # the level matched in the baseline (or from the problem's path when it is missing)
    evaluated: int  # candidates evaluated (not `needs CUDA`)
    correct: int  # of those, correct
    baseline_ms: Optional[float]  # KernelBench's mean for the problem; None when the baseline lacks it
    reference_ms: Optional[float]  # this run's eager reference, mean (median over lanes and runs); None when not timed
    fast_p: dict[float, Optional[float]]  # p -> share of evaluated candidates correct and > p x faster than baseline_ms
    missing: str = ""  # why there is no baseline time, "" when there is one

    @property
    def reference_vs_baseline(self) -> Optional[float]:
        """This run's reference time over KernelBench's: 1.00 when the two measurements agree."""
        if self.reference_ms is None or self.baseline_ms is None:
            return None
        return self.reference_ms / self.baseline_ms


@dataclasses.dataclass(frozen=True)
class FastPAgainstBaseline:
    """fast_p of every problem in the records against one KernelBench baseline file."""

    baseline: KernelBenchBaseline
    thresholds: tuple[float, ...]
    devices: tuple[str, ...]  # the GPUs (or CPUs) this run's references ran on
    problems: tuple[ProblemAgainstBaseline, ...]  # by problem name


def fast_p_against(
    records: Iterable[CandidateRecord],
    references: Iterable[ReferenceRecord],
    baseline: KernelBenchBaseline,
    thresholds: Sequence[float],
) -> FastPAgainstBaseline:
    """Per problem and p: the share of evaluated candidates (not `needs CUDA`) that are correct and
    whose KernelBench speedup, baseline mean / candidate mean, is above p (p = 0: correct). A
    problem's level comes from its references' problem paths; a problem the baseline lacks is kept,
    with `missing` saying so and no fast_p."""
    latest = latest_per_candidate(records)
    references = list(references)
    levels = {r.identity.problem: level_of(r.identity.problem_path) for r in references}
    rows = []
    for problem in natural_order(p for p, _ in latest):
        candidates = [r for (p, _), r in latest.items() if p == problem and r.decision.status is not Status.NEEDS_CUDA]
        level = levels.get(problem, "")
        found = baseline.find(problem, level)
        reference_ms = _reference_mean(r for r in references if r.identity.problem == problem)
        shares: dict[float, Optional[float]] = {
            p: _share(candidates, found.mean_ms, p) if found else None for p in thresholds
        }
        rows.append(
            ProblemAgainstBaseline(
                problem=problem,
                level=found.level if found else level,
                evaluated=len(candidates),
                correct=sum(r.decision.status is Status.CORRECT for r in candidates),
                baseline_ms=found.mean_ms if found else None,
                reference_ms=reference_ms,
                fast_p=shares,
                missing="" if found else _missing(problem, level, baseline),
            )
        )
    devices = tuple(sorted({r.identity.device_name for r in references if r.identity.device_name}))
    return FastPAgainstBaseline(baseline=baseline, thresholds=tuple(thresholds), devices=devices, problems=tuple(rows))


def _share(candidates: Sequence[CandidateRecord], baseline_ms: float, p: float) -> Optional[float]:
    if not candidates:
        return None
    hits = 0
    for r in candidates:
        if r.decision.status is not Status.CORRECT:
            continue  # an incorrect candidate never counts, however fast
        if p == 0 or (
            r.timing.stats is not None and r.timing.stats.mean_ms > 0 and baseline_ms / r.timing.stats.mean_ms > p
        ):
            hits += 1
    return hits / len(candidates)


def _reference_mean(references: Iterable[ReferenceRecord]) -> Optional[float]:
    means = [r.timing.stats.mean_ms for r in references if r.timing.stats is not None]
    return statistics.median(means) if means else None


def _missing(problem: str, level: str, baseline: KernelBenchBaseline) -> str:
    if level:
        return f"{level}/{problem}.py is not in {baseline.source}"
    levels = sorted(lvl for lvl, name in baseline.times if name == f"{problem}.py")
    if levels:
        return f"{problem}.py is in {', '.join(levels)} of {baseline.source} and its level is not known"
    return f"{problem}.py is not in {baseline.source}"


def frame(table: FastPAgainstBaseline) -> pd.DataFrame:
    """One row per problem: counts, fast_<p> over the baseline, both reference means, their ratio, why missing."""
    rows = []
    for row in table.problems:
        cells: dict[str, Any] = {
            "problem": row.problem,
            "level": row.level,
            "evaluated": row.evaluated,
            "correct": row.correct,
        }
        cells.update({f"fast_{p:g}": share for p, share in row.fast_p.items()})
        cells.update(
            {
                "kb_mean_ms": row.baseline_ms,
                "reference_mean_ms": row.reference_ms,
                "reference_vs_kb": row.reference_vs_baseline,
                "missing": row.missing,
            }
        )
        rows.append(cells)
    return pd.DataFrame(rows)


def _cells(shown: pd.DataFrame) -> list[list[str]]:
    def cell(value: Any, column: str) -> str:
        if column == "reference_vs_kb" and isinstance(value, float) and not math.isnan(value):
            return f"{value:.2f}x"
        return cell_text(value, column)

    return [[cell(v, c) for v, c in zip(row, shown.columns)] for row in shown.itertuples(index=False)]


def render_markdown(table: FastPAgainstBaseline, title: str) -> str:
    """The table with what was compared above it."""
    shown = frame(table)
    hardware = table.baseline.hardware or "hardware not given"
    lines = [
        f"# {markdown_text(title)}",
        "",
        f"Baseline: {markdown_code(table.baseline.source)} ({markdown_text(hardware)}), its `{STATISTIC}`; this run: "
        f"{markdown_text(', '.join(table.devices) or 'no reference records')}.",
        f"Speedup here: KernelBench's {STATISTIC} / the candidate's {STATISTIC} time. `reference_vs_kb`: this run's "
        "reference / KernelBench's.",
        "",
        f"Note: {HONEST_NOTE} (docs/kernelbench.md).",
        "",
        markdown_table(shown, _cells(shown)) if len(shown) else "No candidate records.",
        "",
    ]
    return "\n".join(lines)


def write_report(out: Path, table: FastPAgainstBaseline, title: str) -> tuple[Path, Path]:
    """fast_p_kernelbench.csv and fast_p_kernelbench.md in `out`."""
    csv_path, md_path = out / "fast_p_kernelbench.csv", out / "fast_p_kernelbench.md"
    spreadsheet_safe(frame(table)).to_csv(csv_path, index=False, float_format="%.6g")
    md_path.write_text(render_markdown(table, title))
    return csv_path, md_path


def print_report(table: FastPAgainstBaseline, console: Any) -> None:
    """A table that fits the terminal (fast_p, the ratio of the references), why a problem has no
    baseline time as notes under it, and the note."""
    shown = frame(table)
    if not len(shown):
        return
    missing: dict[str, list[str]] = {}
    for problem, why in zip(shown["problem"], shown["missing"]):
        if why:
            missing.setdefault(why, []).append(problem)
    shown = shown[["problem"] + [c for c in shown.columns if c.startswith("fast_")] + ["reference_vs_kb"]]
    columns = [Column(column_header(c), numeric=c != "problem") for c in shown.columns]
    rich_table, _ = fitted_table(
        f"fast_p against KernelBench's {table.baseline.source}", columns, _cells(shown), console.width
    )
    console.print(rich_table)
    if missing:
        console.print(notes("no baseline time", missing))
    console.print(terminal_text(f"note: {HONEST_NOTE}"))
