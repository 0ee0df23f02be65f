"""Candidates: files under solutions/<problem>/ that define ModelNew, plus raw completions kept in
solutions/<problem>/raw/ whose extraction failed (so they still get a verdict)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Optional

from harness.core.errors import UserError
from harness.sources.extract import extract_code
from harness.sources.problem import file_hash, natural_key

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # a candidate's name: a file stem, never a path
# the name of tensor.cuda() and module.cuda() as a candidate's source calls them: torch's spelling, not a device setting
CUDA_METHOD = "cuda"


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str  # file stem
    path: Path  # the candidate .py, or the raw completion when extraction failed
    extraction_failure: Optional[str] = None  # why no code could be extracted, if so

    @property
    def hash(self) -> str:
        return file_hash(self.path)


def check_name(name: str) -> str:
    """The name, if it can name a candidate (a file stem in its problem's folder); else UserError."""
    if not NAME.fullmatch(name):
        rule = "use letters, digits, '_', '.' or '-' (at most 100), starting with a letter or digit"
        raise UserError(f"candidate name {name!r}: {rule}")
    return name


def discover_candidates(folder: Path) -> list[Candidate]:
    """Every candidate of one problem, in natural name order (sample_2 before sample_10)."""
    if not folder.is_dir():
        return []
    candidates = {p.stem: Candidate(p.stem, p) for p in folder.glob("*.py") if not p.name.startswith("_")}
    raw_folder = folder / "raw"
    if raw_folder.is_dir():
        for raw in raw_folder.glob("*.txt"):
            if raw.stem in candidates:
                continue
            extraction = extract_code(raw.read_text(encoding="utf-8", errors="replace"))
            reason = (
                extraction.reason
                if extraction.code is None
                else "raw completion was never ingested (run `python run.py ingest`)"
            )
            candidates[raw.stem] = Candidate(raw.stem, raw, extraction_failure=reason)
    return [candidates[name] for name in sorted(candidates, key=natural_key)]


def needs_cuda_statically(path: Path) -> Optional[str]:
    """Why the file plainly needs CUDA, read from its syntax tree without running it (None if not plain).

    Used only on CPU-only runs, to skip starting a worker that could only report "needs CUDA".
    Anything this misses is still caught when the worker runs the file.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "load_inline":
                for keyword in node.keywords:
                    if keyword.arg == "cuda_sources" and not (
                        isinstance(keyword.value, ast.Constant) and not keyword.value.value
                    ):
                        return f"compiles CUDA sources (load_inline cuda_sources=..., line {node.lineno})"
                    if (
                        keyword.arg == "with_cuda"
                        and isinstance(keyword.value, ast.Constant)
                        and keyword.value.value is True
                    ):
                        return f"builds with CUDA (load_inline with_cuda=True, line {node.lineno})"
            if name == CUDA_METHOD and isinstance(func, ast.Attribute) and not node.args:
                return f"moves tensors to CUDA (.cuda(), line {node.lineno})"
    return None
