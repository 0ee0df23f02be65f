"""`python run.py lint [PROBLEM...]`: check that problems can tell a right kernel from a wrong one."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from harness.commands import add_config_arguments, add_problems_dir_argument, load_config, problems_dir_override
from harness.core.config import DEFAULT_TOLERANCE, ROOT, Device, TimerSettings
from harness.core.errors import ExitCode, UserError
from harness.core.records import to_dict
from harness.judge.lint import LintCheck, LintOutcome
from harness.sources.problem import Problem, discover_problems, resolve_problem
from harness.views.text import markdown_text

LINT_TIMING_BUDGET_S = 2.0  # the timing config's budget, capped: the lint needs a median, not a fine one


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "problems", nargs="*", metavar="PROBLEM", help="problem names or unique prefixes (default: every problem)"
    )
    add_problems_dir_argument(parser, "the problem tree (config problems_dir), e.g. KernelBench's KernelBench/ folder")
    parser.add_argument("--device", choices=Device.words(), help="where to run the references (default: config device)")
    parser.add_argument(
        "--out", metavar="FILE", help="the markdown report (default: lint.md in the results folder, config results_dir)"
    )
    add_config_arguments(parser, section="the lint section", example="lint.memory_gb=80")


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    cfg = load_config(args, ([f"device={args.device}"] if args.device else []) + problems_dir_override(args))
    from harness.api import resolve_device

    device = resolve_device(cfg)
    problems_dir = cfg.path(cfg.problems_dir)
    problems = (
        [resolve_problem(name, problems_dir) for name in args.problems]
        if args.problems
        else discover_problems(problems_dir)
    )
    if not problems:
        raise UserError(f"no problems in {problems_dir}")
    timing = to_dict(
        dataclasses.replace(
            TimerSettings.from_config(cfg.timing), budget_s=min(cfg.timing.budget_s, LINT_TIMING_BUDGET_S)
        )
    )
    results: list[tuple[Problem, list[LintCheck]]] = []
    started = time.monotonic()
    for number, problem in enumerate(problems, 1):
        print(
            f"[{number}/{len(problems)}] {problem.name}: linting on {device} ({time.monotonic() - started:.0f} s so "
            "far)",
            file=sys.stderr,
            flush=True,
        )
        # what its candidates will face
        tolerance = cfg.for_problem(problem.settings).check.tolerances.get("float32", DEFAULT_TOLERANCE)
        settings = {
            "atol": tolerance.atol,
            "rtol": tolerance.rtol,
            "norm": tolerance.norm,
            "memory_gb": cfg.lint.memory_gb,
            "time_ms": list(cfg.lint.time_ms),
            "timing": timing,
        }
        checks = lint_in_subprocess(
            problem, Device.CUDA if device == Device.CUDA else Device.CPU, settings, cfg.lint.timeout_s
        )
        results.append((problem, checks))
        failed = [c.name for c in checks if c.verdict is LintOutcome.FAIL]
        print(
            f"[{number}/{len(problems)}] {problem.name}: {'FAIL (' + ', '.join(failed) + ')' if failed else 'ok'}",
            file=sys.stderr,
            flush=True,
        )
    text = report(results, device)
    out = Path(args.out) if args.out else cfg.path(cfg.results_dir) / "lint.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"wrote {out}", file=sys.stderr)
    return int(
        ExitCode.CANDIDATES_FAILED
        if any(c.verdict is LintOutcome.FAIL for _, checks in results for c in checks)
        else ExitCode.OK
    )


def lint_in_subprocess(problem: Problem, device: str, settings: dict, timeout: float) -> list[LintCheck]:
    """The problem's code runs in a process of its own, never in this one."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness.judge.lint", str(problem.path), device, json.dumps(settings)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return [LintCheck("runs", LintOutcome.FAIL, f"the checks ran past {timeout:g} s")]
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [LintCheck("runs", LintOutcome.FAIL, f"the lint process exited {done.returncode}: {last}"[:300])]
    return [LintCheck(**c) for c in json.loads(lines[-1])]


def report(results: list[tuple[Problem, list[LintCheck]]], device: str) -> str:
    """The markdown report; names and details (a problem's own error messages among them) as literal text."""
    failing = [markdown_text(p.name) for p, checks in results if any(c.verdict is LintOutcome.FAIL for c in checks)]
    lines = [
        "# Problem lint",
        "",
        f"{len(results)} problem(s) on {device}; {len(failing)} fail"
        + (f": {', '.join(failing)}" if failing else "")
        + ".",
        "",
    ]
    lines += ["| problem | check | verdict | detail |", "|---|---|---|---|"]
    for problem, checks in results:
        for check in checks:
            mark = "**fail**" if check.verdict is LintOutcome.FAIL else check.verdict.value
            lines.append(
                f"| {markdown_text(problem.name)} | {markdown_text(check.name)} | {mark} | "
                f"{markdown_text(check.detail)} |"
            )
    return "\n".join(lines) + "\n"
