"""Charts of a leaderboard: per problem, a PNG of the correct candidates' speedups.

Needs matplotlib (`pip install '.[plots]'`); without it no chart is drawn. Figures are drawn with
the non-interactive Agg canvas, never through pyplot, so no global backend state is touched.
Names from records (problem, candidates, flags) are drawn as they are: never read as mathtext
(`$...$`), their control characters written as escapes (harness.views.text.visible).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.core.status import Status
from harness.views.text import visible

INSTALL_HINT = "pip install '.[plots]'"
MAX_BARS = 40  # candidates drawn per chart; the rest are counted in the note
LABEL_CHARS = 36  # candidate names longer than this are shortened on the axis
EAGER_COLOR = "#4C72B0"
COMPILE_COLOR = "#DD8452"
SOL_COLOR = "#55A868"
CORRECT = Status.CORRECT.value
SKIPPED = Status.NEEDS_CUDA.value


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _value(v: object) -> float | None:
    """A finite, positive number, else None."""
    if v is None:
        return None
    v = float(v)  # type: ignore[arg-type]
    return v if math.isfinite(v) and v > 0 else None


def _label(name: str) -> str:
    name = visible(name)
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def _percent(fraction: float) -> str:
    return f"{fraction:.1%}" if fraction >= 0.01 or fraction == 0 else f"{fraction * 100:.2g}%"


def caption(table: pd.DataFrame, drawn: int, plottable: int) -> str:
    """What the chart leaves out: candidates that are not correct (by status), skipped ones, correct
    ones without a time, and those past MAX_BARS."""
    parts = []
    others = Counter(s for s in table["status"] if s not in (CORRECT, SKIPPED))
    if others:
        total = sum(others.values())
        detail = ", ".join(f"{n} {status}" for status, n in sorted(others.items(), key=lambda x: (-x[1], x[0])))
        parts.append(f"{total} not correct ({detail})")
    skipped = int((table["status"] == SKIPPED).sum())
    if skipped:
        parts.append(f"{skipped} skipped ({SKIPPED})")
    untimed = int((table["status"] == CORRECT).sum()) - plottable
    if untimed:
        parts.append(f"{untimed} correct but not timed")
    if drawn < plottable:
        parts.append(f"showing the fastest {drawn} of {plottable} correct")
    return "; ".join(parts)


def plot_problem(table: pd.DataFrame, problem: str, path: Path) -> bool:
    """Write the chart of one problem's leaderboard table (harness.views.leaderboard.problem_table: correct
    candidates first, fastest first) to `path`. False, and nothing written, when no correct candidate
    has a speedup."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib is optional: imported only to draw
    from matplotlib.figure import Figure

    timed = table[(table["status"] == CORRECT) & table["speedup"].map(lambda v: _value(v) is not None)]
    shown = timed.head(MAX_BARS)
    if shown.empty:
        return False
    flagged = shown["flags"] if "flags" in shown else [""] * len(shown)
    names = [
        _label(str(n)) + (f"\n[{visible(f)}]" if isinstance(f, str) and f else "")
        for n, f in zip(shown["candidate"], flagged)
    ]
    eager = [float(v) for v in shown["speedup"]]
    compiled = [_value(v) for v in shown["vs_compile"]]
    sol = [_value(v) for v in shown["sol_pct"]]
    has_compile = any(v is not None for v in compiled)
    has_sol = any(v is not None for v in sol)

    rows = len(shown)
    row_height = 0.62 if has_compile else 0.4
    fig = Figure(figsize=(11.0 if has_sol else 8.0, 1.7 + row_height * rows), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    if has_sol:
        speed_ax, sol_ax = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [2.2, 1]})
    else:
        speed_ax, sol_ax = fig.subplots(1, 1), None
    _draw_speedups(speed_ax, names, eager, compiled if has_compile else None)
    if sol_ax is not None:
        _draw_sol(sol_ax, sol)
    fig.suptitle(visible(problem), fontsize=11, fontweight="bold", parse_math=False)
    note = caption(table, len(shown), len(timed))
    if note:
        fig.supxlabel(note, fontsize=8, color="0.35", ha="left", x=0.01, parse_math=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return True


def _draw_speedups(
    speed_ax: Any, names: list[str], eager: list[float], compiled: Optional[list[Optional[float]]]
) -> None:
    """Bars of the speedups over the eager reference (and over torch.compile, when any)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    rows = len(names)
    values = eager + [v for v in compiled or [] if v is not None]
    log = max(values) / max(min(values), 1e-12) > 20
    base = 1.0 if log else 0.0  # log axes have no zero: bars then grow from the 1.0x line
    thickness = 0.38 if compiled is not None else 0.6
    offset = thickness / 2 if compiled is not None else 0.0
    series: list[tuple[str, list[Any], str, float]] = [("vs eager reference", list(eager), EAGER_COLOR, -offset)]
    if compiled is not None:
        series.append(("vs torch.compile", compiled, COMPILE_COLOR, offset))
    for label, data, color, shift in series:
        positions = [i + shift for i, v in enumerate(data) if v is not None]
        widths = [v - base for v in data if v is not None]
        speed_ax.barh(positions, widths, left=base, height=thickness, color=color, label=label)
        for pos, v in zip(positions, (v for v in data if v is not None)):
            outward = v >= base or not log
            speed_ax.annotate(
                f"{v:.2f}x",
                (v, pos),
                xytext=(3 if outward else -3, 0),
                textcoords="offset points",
                ha="left" if outward else "right",
                va="center",
                fontsize=8,
            )
    speed_ax.axvline(1.0, color="0.25", linestyle="--", linewidth=1)
    if log:
        speed_ax.set_xscale("log")
        low, high = min(values + [1.0]), max(values + [1.0])
        speed_ax.set_xlim(low / 2.2, high * 2.2)
        speed_ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        speed_ax.set_xlim(0, max(values + [1.0]) * 1.18)
    speed_ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    speed_ax.set_yticks(list(range(rows)), names, fontsize=9, parse_math=False)
    speed_ax.set_ylim(rows - 0.5, -0.5)  # fastest on top
    speed_ax.set_xlabel("speedup, higher is faster (dashed: 1x" + (", log scale)" if log else ")"), fontsize=9)
    speed_ax.tick_params(axis="x", labelsize=8)
    speed_ax.grid(axis="x", color="0.9", linewidth=0.8)
    speed_ax.set_axisbelow(True)
    speed_ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False, fontsize=8, borderaxespad=0.2)


def _draw_sol(sol_ax: Any, sol: list[Optional[float]]) -> None:
    """Bars of each candidate's share of the speed-of-light."""
    from matplotlib.ticker import FuncFormatter

    fractions = [v if v is not None else 0.0 for v in sol]
    sol_ax.barh(list(range(len(sol))), [v * 100 for v in fractions], height=0.6, color=SOL_COLOR)
    for i, v in enumerate(sol):
        sol_ax.annotate(
            _percent(v) if v is not None else "n/a",
            (fractions[i] * 100, i),
            xytext=(3, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=8,
        )
    sol_ax.set_xlim(0, max(100.0, max(fractions) * 100) * 1.18)
    sol_ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
    sol_ax.set_xlabel("speed-of-light (roofline floor / time)", fontsize=9)
    sol_ax.tick_params(axis="x", labelsize=8)
    sol_ax.tick_params(axis="y", left=False)
    sol_ax.grid(axis="x", color="0.9", linewidth=0.8)
    sol_ax.set_axisbelow(True)


def write_plots(out_dir: Path, tables: dict[str, pd.DataFrame]) -> dict[str, Path]:
    """`out_dir/plots/<problem>.png` for each problem table that has something to draw, by problem."""
    written = {}
    for problem, table in tables.items():
        path = out_dir / "plots" / f"{problem}.png"
        if plot_problem(table, problem, path):
            written[problem] = path
        elif path.exists():
            path.unlink()  # a chart from an earlier write that no longer applies
    return written
