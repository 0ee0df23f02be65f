"""Problems: KernelBench-style files under problems/<level>/, found by name, unique prefix or path.

The parent never imports a problem either: it only reads the file and hashes it. The reference
worker runs it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
from pathlib import Path
from typing import Any

from harness.errors import UserError


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str  # file stem, e.g. "37_Matmul_Swish_Sum_GroupNorm"
    level: str  # the folder it sits in, e.g. "level2" ("" for a file given by path elsewhere)
    path: Path  # the problem file

    @property
    def hash(self) -> str:
        return file_hash(self.path)

    @functools.cached_property
    def settings(self) -> dict[str, object]:
        """The problem's HARNESS_* declarations (see declared_settings), read once."""
        return declared_settings(self.path)


DECLARABLE: dict[str, type[Any]] = {
    "HARNESS_INPUT_DISTRIBUTIONS": list,  # e.g. ["given"] for inputs with a domain (probabilities, indices)
    "HARNESS_RANDOMIZE_WEIGHTS": bool,  # False when parameters must keep their initialisation (e.g. positive scales)
    "HARNESS_EXTRA_SIZES": list,  # e.g. [{"batch_size": 7}] for the other-size trial
    "HARNESS_TOLERANCES": dict,  # e.g. {"float32": {"atol": 1e-3, "rtol": 1e-3}}, over check.tolerances
    "HARNESS_BACKWARD": bool,  # True: gradients are part of the contract (check.gradients fail); False: off
    "HARNESS_FLAGS": dict,  # e.g. {"own-share-low": "fail"}: this problem's policy for integrity flags
}


def declared_settings(path: Path) -> dict[str, object]:
    """Module-level HARNESS_* constants of a problem file, read from its syntax tree (the parent
    never imports a problem). Only literal values count; a wrong type is a usage error."""
    import ast

    from harness.config import DISTRIBUTIONS, FlagPolicies
    from harness.errors import UserError
    from harness.flags import POLICIES

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}  # the reference worker reports an unreadable problem
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id in DECLARABLE:
            name = node.targets[0].id
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise UserError(f"{path}: {name} must be a literal {DECLARABLE[name].__name__}") from None
            if not isinstance(value, DECLARABLE[name]):
                raise UserError(f"{path}: {name} must be a {DECLARABLE[name].__name__}, got {value!r}")
            if name == "HARNESS_INPUT_DISTRIBUTIONS" and (not value or any(v not in DISTRIBUTIONS for v in value)):
                raise UserError(f"{path}: {name} must be a non-empty list of {list(DISTRIBUTIONS)}, got {value!r}")
            if name == "HARNESS_TOLERANCES" and not _tolerances_ok(value):
                raise UserError(f"{path}: {name} must map dtype names to {{'atol': number >= 0, 'rtol': number >= 0}}, got {value!r}")
            codes = [f.name.replace("_", "-") for f in dataclasses.fields(FlagPolicies)]
            if name == "HARNESS_FLAGS" and not all(c in codes and p in POLICIES for c, p in value.items()):
                raise UserError(f"{path}: {name} must map flag codes ({', '.join(codes)}) to fail, flag or ignore, got {value!r}")
            found[name] = value
    return found


def _tolerances_ok(value: dict[Any, Any]) -> bool:
    return all(isinstance(dtype, str) and isinstance(t, dict) and set(t) == {"atol", "rtol"} and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in t.values()) for dtype, t in value.items())


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def discover_problems(problems_dir: Path) -> list[Problem]:
    found = []
    for path in sorted(problems_dir.rglob("*.py")):
        if path.name.startswith("_"):
            continue
        level = path.parent.name if path.parent != problems_dir else ""
        found.append(Problem(name=path.stem, level=level, path=path))
    return found


UNSUPPORTED_LEVELS = {
    "level4": "KernelBench's level 4 builds its models from configurations on a model hub, which an offline run cannot fetch; levels 1-3 run as they are",
}


def resolve_problem(query: str, problems_dir: Path) -> Problem:
    """A problem by exact name, unique prefix (of the name or of the part after its number) or path.
    KernelBench's ways of naming one work too: `level1/19_ReLU`, with or without `.py`, and
    `level1/19` (the problem id within its level)."""
    problem = _resolve(query, problems_dir)
    if problem.level in UNSUPPORTED_LEVELS:
        raise UserError(f"{problem.level}/{problem.name}: {UNSUPPORTED_LEVELS[problem.level]}")
    return problem


def _resolve(query: str, problems_dir: Path) -> Problem:
    as_path = Path(query)
    if as_path.suffix == ".py" and as_path.is_file():
        path = as_path.resolve()
        return Problem(name=path.stem, level=path.parent.name if path.parent.parent == problems_dir.resolve() else "", path=path)
    query = query.removesuffix(".py")
    problems = discover_problems(problems_dir)
    level, _, number = query.partition("/")
    if number.isdigit():  # a problem id within a level: the file whose name starts with "<id>_"
        numbered = [p for p in problems if p.level == level and p.name.split("_", 1)[0] == number]
        if len(numbered) == 1:
            return numbered[0]
    exact = [p for p in problems if p.name == query or f"{p.level}/{p.name}" == query]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [p for p in problems if p.name.startswith(query) or p.name.split("_", 1)[-1].startswith(query)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(f"{p.level}/{p.name}" for p in matches[:8])
        raise UserError(f"problem {query!r} is ambiguous: it matches {names} (give more of the name)")
    close = difflib.get_close_matches(query, [p.name for p in problems], n=5, cutoff=0.4)
    hint = f"; close matches: {', '.join(close)}" if close else f"; see {problems_dir} for the list"
    raise UserError(f"no problem named {query!r}{hint}")
