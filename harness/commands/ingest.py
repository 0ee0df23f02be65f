"""`python run.py ingest FILE... --problem X`: raw LLM completions -> candidate files.

The raw text is kept beside the candidate (solutions/<problem>/raw/<name>.txt) for provenance. A
completion with no code, or whose code is cut off, is refused with the reason and exit code 2; its
raw text is kept apart, in solutions/<problem>/raw/refused/, where runs do not look: the refusal is
the verdict, given once, and later runs judge only what was ingested. (A raw text put straight into
raw/ with no candidate beside it is still judged by every run, as `extract failed` when it has no
usable code.)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from harness.commands import add_config_arguments, load_config
from harness.core.config import Config
from harness.core.errors import ExitCode, UserError
from harness.sources.extract import extract_code
from harness.sources.problem import resolve_problem
from harness.views.text import visible


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="raw completions (text)")
    parser.add_argument("--problem", required=True, metavar="NAME", help="problem the completions answer")
    parser.add_argument("--name", help="candidate name (one FILE only; default: the file's stem)")
    parser.add_argument("--force", action="store_true", help="replace a different existing candidate of the same name")
    add_config_arguments(parser, example="solutions_dir=my_solutions")


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.name and len(args.files) != 1:
        raise UserError("--name works with one FILE only")
    cfg = load_config(args)
    return run(cfg, [Path(f) for f in args.files], args.problem, name=args.name, force=args.force)


def run(cfg: Config, files: list[Path], problem_query: str, *, name: str | None = None, force: bool = False) -> int:
    problem = resolve_problem(problem_query, cfg.path(cfg.problems_dir))
    folder = cfg.path(cfg.solutions_dir) / problem.name
    for path in files:
        if not path.is_file():
            raise UserError(f"no such file: {path}")
    refused = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        stem = name or path.stem
        extraction = extract_code(text)
        target = folder / f"{stem}.py"
        if extraction.code is not None and target.exists() and target.read_text() != extraction.code and not force:
            raise UserError(f"{target} exists with other code (use --force to replace it, or --name to pick another name)")
        raw, refused_raw = folder / "raw" / f"{stem}.txt", folder / "raw" / "refused" / f"{stem}.txt"
        kept = raw if extraction.code is not None else refused_raw
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(text, encoding="utf-8")
        (refused_raw if kept is raw else raw).unlink(missing_ok=True)  # one raw text per name: the latest
        if extraction.code is None:
            refused += 1
            if target.exists() and force:
                target.unlink()
            print(visible(f"refused {path}: {extraction.kind}: {extraction.reason} (raw kept at {kept}, where runs do not judge it)"))
            continue
        target.write_text(extraction.code, encoding="utf-8")
        print(visible(f"ingested {path} -> {target} ({extraction.reason})"))
    return int(ExitCode.CANDIDATES_FAILED if refused else ExitCode.OK)
