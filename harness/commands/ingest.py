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
from harness.sources.candidate import check_name
from harness.sources.extract import Extraction, extract_code
from harness.sources.problem import resolve_problem
from harness.views.text import visible


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="raw completions (text)")
    parser.add_argument("--problem", required=True, metavar="NAME", help="problem the completions answer")
    parser.add_argument("--name", help="candidate name: letters, digits, _ . - (one FILE only; default: its stem)")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing candidate of the same name (its code or raw text)"
    )
    add_config_arguments(parser, example="solutions_dir=my_solutions")


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.name and len(args.files) != 1:
        raise UserError("--name works with one FILE only")
    cfg = load_config(args)
    return run(cfg, [Path(f) for f in args.files], args.problem, name=args.name, force=args.force)


def run(cfg: Config, files: list[Path], problem_query: str, *, name: str | None = None, force: bool = False) -> int:
    """Ingest each file as a candidate of the problem. Every name and every file is checked before
    anything is written: a name is a candidate's name (harness.sources.candidate.NAME), and a file
    of an existing candidate that the ingest would change is replaced only with `force`."""
    if name is not None:
        name = name.removesuffix(".py")  # `--name sample.py` names the candidate sample, written as sample.py
        check_name(name)
    problem = resolve_problem(problem_query, cfg.path(cfg.problems_dir))
    folder = cfg.path(cfg.solutions_dir) / problem.name
    plans = [_plan(path, name) for path in files]
    names = [stem for _, stem, _, _ in plans]
    for stem in names:
        if names.count(stem) > 1:
            raise UserError(f"several files would be ingested as {stem!r} (ingest them one at a time with --name)")
    for _, stem, text, extraction in plans:
        existing = _replaced(folder, stem, text, extraction.code)
        if existing is not None and not force:
            raise UserError(
                f"{existing} exists with other content (use --force to replace it, or --name to pick another name)"
            )
    refused = sum(_write(folder, *plan, force=force) for plan in plans)
    return int(ExitCode.CANDIDATES_FAILED if refused else ExitCode.OK)


def _plan(path: Path, name: str | None) -> tuple[Path, str, str, Extraction]:
    """(file, candidate name, raw text, extraction) for one file; UserError when it cannot be ingested."""
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    if name is None:
        try:
            check_name(path.stem)
        except UserError as exc:
            raise UserError(f"{path}: {exc}; pick one with --name") from None
    text = path.read_text(encoding="utf-8", errors="replace")
    return path, name or path.stem, text, extract_code(text)


def _replaced(folder: Path, stem: str, text: str, code: str | None) -> Path | None:
    """The existing candidate file (the code, or the raw text runs judge) that ingesting would change
    or remove; None when there is none, or it already holds what would be written."""
    planned = {folder / f"{stem}.py": code, folder / "raw" / f"{stem}.txt": text if code is not None else None}
    for path, content in planned.items():
        if path.exists() and (content is None or path.read_text(encoding="utf-8", errors="replace") != content):
            return path
    return None


def _write(folder: Path, path: Path, stem: str, text: str, extraction: Extraction, *, force: bool) -> bool:
    """Write one planned candidate (or keep its refused text apart); True when it was refused."""
    target = folder / f"{stem}.py"
    raw, refused_raw = folder / "raw" / f"{stem}.txt", folder / "raw" / "refused" / f"{stem}.txt"
    kept = raw if extraction.code is not None else refused_raw
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(text, encoding="utf-8")
    (refused_raw if kept is raw else raw).unlink(missing_ok=True)  # one raw text per name: the latest
    if extraction.code is None:
        if force:
            target.unlink(missing_ok=True)
        where = f"raw kept at {kept}, where runs do not judge it"
        print(visible(f"refused {path}: {extraction.kind}: {extraction.reason} ({where})"))
        return True
    target.write_text(extraction.code, encoding="utf-8")
    print(visible(f"ingested {path} -> {target} ({extraction.reason})"))
    return False
