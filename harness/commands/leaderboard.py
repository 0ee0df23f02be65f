"""`python run.py leaderboard RUN...`: rebuild leaderboards from stored records, evaluating nothing.

The candidate records of one or more runs (a run folder, a run id under the results folder or a
records.jsonl file) are filtered and written as leaderboard.csv, leaderboard.md and charts; with
--kernelbench-baseline, also fast_p against KernelBench's published baseline timings.
Combined runs are read in the order given; a later record for the same (problem, candidate)
replaces an earlier one.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.commands import add_config_arguments, load_config
from harness.core.errors import ExitCode, UserError
from harness.core.records import CandidateRecord, ReferenceRecord, RunHeader, latest_per_candidate
from harness.core.status import Status
from harness.core.store import read_records, resolve_run
from harness.sources.problem import close_matches
from harness.views import kbtiming
from harness.views.leaderboard import candidate_frame, print_leaderboard, write_leaderboards


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folder, run id under the results folder, or records.jsonl file"
    )
    parser.add_argument(
        "--problem",
        metavar="NAME",
        action="append",
        default=[],
        help="keep this problem (exact name or prefix; repeatable)",
    )
    parser.add_argument(
        "--status",
        metavar="STATUS",
        action="append",
        default=[],
        help="keep candidates with this status, e.g. correct or 'build failed' (repeatable)",
    )
    parser.add_argument(
        "--run", metavar="ID", action="append", default=[], help="keep only records of this run id (repeatable)"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where leaderboard.csv, leaderboard.md and plots/ go (default: the run's folder, or RUN/views/<filters>/ "
        "when filtered; needed for several runs)",
    )
    add_config_arguments(parser, example="leaderboard.fast_p=[0,1,1.5]")
    parser.add_argument(
        "--results", metavar="DIR", help="results folder that run ids are looked up in (config results_dir)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write no charts")
    parser.add_argument(
        "--kernelbench-baseline",
        metavar="FILE",
        help="also fast_p against KernelBench's published baseline timings "
        "(results/timing/<hardware>/baseline_time_torch*.json): fast_p_kernelbench.md and .csv",
    )


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    cfg = load_config(args, [f"results_dir={args.results}"] if args.results else [])
    return run(
        [resolve_run(r, cfg.path(cfg.results_dir)) for r in args.runs],
        out=Path(args.out) if args.out else None,
        problems=args.problem,
        statuses=[parse_status(s) for s in args.status],
        run_ids=args.run,
        default_fast_p=cfg.leaderboard.fast_p,
        plots=not args.no_plots,
        kernelbench_baseline=Path(args.kernelbench_baseline) if args.kernelbench_baseline else None,
    )


def parse_status(value: str) -> Status:
    """A status by its value, in any case (`correct`, `build failed`, `needs cuda`)."""
    for status in Status:
        if value.strip().lower() in (status.value.lower(), status.name.lower()):
            return status
    raise UserError(f"--status {value!r} is not a status; one of: {', '.join(s.value for s in Status)}")


def select(
    records: list[CandidateRecord],
    *,
    problems: Sequence[str] = (),
    statuses: Sequence[Status] = (),
    run_ids: Sequence[str] = (),
) -> list[CandidateRecord]:
    """The latest record per (problem, candidate) among the records of `run_ids` (all when empty),
    kept when its problem matches one of `problems` and its status is one of `statuses`."""
    if run_ids:
        found = sorted({r.identity.run_id for r in records})
        for run_id in run_ids:
            if run_id not in found:
                raise UserError(f"--run {run_id!r}: no records of that run id; these records have {', '.join(found)}")
        records = [r for r in records if r.identity.run_id in run_ids]
    kept = list(latest_per_candidate(records).values())
    if problems:
        names = match_problems(problems, sorted({r.identity.problem for r in kept}))
        kept = [r for r in kept if r.identity.problem in names]
    if statuses:
        kept = [r for r in kept if r.decision.status in statuses]
    return kept


def match_problems(queries: Sequence[str], names: list[str]) -> set[str]:
    """Each query's exact name, else every name it is a prefix of (of the name or of the part after
    its number); a query that matches nothing is a usage error."""
    chosen: set[str] = set()
    for query in queries:
        matches = [n for n in names if n == query] or [
            n for n in names if n.startswith(query) or n.split("_", 1)[-1].startswith(query)
        ]
        if not matches:
            close = close_matches(query, names)
            listed = close or names[:8]
            raise UserError(
                f"--problem {query!r}: no records for such a problem; "
                f"{'close matches' if close else 'problems in these records'}: {', '.join(listed)}"
            )
        chosen.update(matches)
    return chosen


def view_folder(run_dir: Path, problems: Sequence[str], statuses: Sequence[Status], run_ids: Sequence[str]) -> Path:
    """Where a run's leaderboard goes by default: the run's own folder when nothing is filtered
    out (the same files, rebuilt), else a view beside them, views/<filters>/, so a filtered table
    never takes the place of the run's own (whose summary means something else)."""
    filters = (
        [f"problem-{p}" for p in problems] + [f"status-{s.value}" for s in statuses] + [f"run-{r}" for r in run_ids]
    )
    if not filters:
        return run_dir
    return run_dir / "views" / re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(filters)).strip("-")[:120]


def run_fast_p(headers: list[RunHeader], default: Sequence[float]) -> tuple[float, ...]:
    """The fast_p thresholds the runs were made with when they agree, else `default`."""
    seen = {tuple(h.config.get("leaderboard", {}).get("fast_p", ())) for h in headers}
    seen.discard(())
    return tuple(seen.pop()) if len(seen) == 1 else tuple(default)


def run(
    records_files: list[Path],
    *,
    default_fast_p: Sequence[float],
    out: Path | None = None,
    problems: Sequence[str] = (),
    statuses: Sequence[Status] = (),
    run_ids: Sequence[str] = (),
    plots: bool = True,
    console: Any = None,
    kernelbench_baseline: Path | None = None,
) -> int:
    # a bad file stops before anything is written
    baseline = kbtiming.load_baseline(kernelbench_baseline) if kernelbench_baseline is not None else None
    if out is None:
        if len(records_files) > 1:
            raise UserError(f"{len(records_files)} runs are combined: say where the leaderboard goes with --out DIR")
        out = view_folder(records_files[0].parent, problems, statuses, run_ids)
    loaded = [record for path in records_files for record in read_records(path)]
    candidates = [r for r in loaded if isinstance(r, CandidateRecord)]
    if not candidates:
        raise UserError(f"no candidate records in {', '.join(str(p) for p in records_files)}")
    chosen = select(candidates, problems=problems, statuses=statuses, run_ids=run_ids)
    if not chosen:
        filters = (
            [f"--problem {p}" for p in problems]
            + [f"--status '{s.value}'" for s in statuses]
            + [f"--run {r}" for r in run_ids]
        )
        raise UserError(f"no candidate records left after {' '.join(filters)}")
    used_runs = {r.identity.run_id for r in chosen}
    fast_p = run_fast_p([r for r in loaded if isinstance(r, RunHeader) and r.run_id in used_runs], default_fast_p)
    shown = {(r.identity.problem, r.identity.run_id) for r in chosen}
    # the shown runs' null floors
    references = [
        r for r in loaded if isinstance(r, ReferenceRecord) and (r.identity.problem, r.identity.run_id) in shown
    ]
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = write_leaderboards(out, chosen, fast_p, plots=plots, references=references)
    if console is None:
        from harness.views.terminal import terminal_console

        console = terminal_console()
    print_leaderboard(candidate_frame(chosen), fast_p, console, references)
    charts = out / "plots"
    written = f"{csv_path}, {md_path}" + (f", {charts}/" if plots and any(charts.glob("*.png")) else "")
    if baseline is not None:
        table = kbtiming.fast_p_against(chosen, references, baseline, fast_p)
        written += ", " + ", ".join(
            str(p) for p in kbtiming.write_report(out, table, f"fast_p against KernelBench's baseline: {out.name}")
        )
        kbtiming.print_report(table, console)
    print(f"wrote {written} ({len(chosen)} candidate(s) of {len(used_runs)} run(s))", file=sys.stderr)
    return int(ExitCode.OK)
