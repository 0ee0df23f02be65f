"""`python run.py gate --baseline OLD --current NEW`: fail when a candidate regressed, a correct one is
missing or a new one is not correct."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.commands import add_config_arguments, load_config
from harness.core.config import Config
from harness.core.errors import ExitCode
from harness.views.gate import GateResult, GateRules, Side, gate, load_side, print_report, report


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline",
        required=True,
        metavar="OLD",
        help="baseline: a baseline file, run folder, run id or records.jsonl",
    )
    parser.add_argument(
        "--current", required=True, metavar="NEW", help="current run: run folder, run id or records.jsonl"
    )
    add_gate_options(parser)
    add_config_arguments(parser, section="the gate section", example="gate.alpha=0.01")
    parser.add_argument(
        "--report",
        metavar="FILE",
        help="where to write the markdown report (default: gate.md in the current run folder, else ./gate.md)",
    )


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fail-on",
        metavar="RULES",
        help="what fails the gate: e.g. median:5%%,geomean:3%%,missing,incomparable, or none (default: config "
        "gate.fail_on; correctness always counts unless none)",
    )
    parser.add_argument(
        "--across-changes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare the times of a candidate whose source changed, so that an edit that makes it slower fails "
        "(default); --no-across-changes reports those times as not comparable (correctness is compared either "
        "way)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="a baseline candidate that was correct and is absent from a problem this run evaluated fails nothing "
        "(default: it fails the gate)",
    )


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    cfg = load_config(args)
    current = Path(args.current)
    folder = (
        current
        if current.is_dir()
        else current.parent
        if current.is_file()
        else cfg.path(cfg.results_dir) / args.current
    )
    out = Path(args.report) if args.report else (folder / "gate.md" if folder.is_dir() else Path("gate.md"))
    baseline, rules = prepare_gate(cfg, args.baseline, args.fail_on, args.allow_missing)
    return run_gate(cfg, baseline, rules, args.current, args.across_changes, out)


def prepare_gate(
    cfg: Config, baseline: str, fail_on: str | None, allow_missing: bool = False
) -> tuple[Side, GateRules]:
    """The baseline's records and the rules, read (and checked) before anything else happens."""
    rules = GateRules.parse(fail_on if fail_on is not None else cfg.gate.fail_on, cfg.gate.threshold, allow_missing)
    return load_side(baseline, cfg.path(cfg.results_dir)), rules


def run_gate(
    cfg: Config, baseline: Side, rules: GateRules, current: str, across_changes: bool, out: Path, echo: bool = True
) -> int:
    """Compare, write the report (file, stdout, and $GITHUB_STEP_SUMMARY when set), then the exit code."""
    result = gate(baseline, load_side(current, cfg.path(cfg.results_dir)), rules, cfg.gate.alpha, across_changes)
    publish(result, out, echo)
    return int(ExitCode.OK if result.passed else ExitCode.REGRESSION)


def publish(result: GateResult, out: Path, echo: bool = True) -> None:
    """The markdown report to `out` (and $GITHUB_STEP_SUMMARY), the same as tables that fit the
    terminal on stdout (`echo`), and the verdict in one line on stderr."""
    text = report(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    if echo:
        from harness.views.terminal import terminal_console

        print_report(result, terminal_console(), out.name)
    verdict = "gate passed" if result.passed else "gate FAILED: " + "; ".join(result.failures)
    print(f"{verdict} (report: {out})", file=sys.stderr)
