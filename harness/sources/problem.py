"""Problems: KernelBench-style files under problems/<level>/, found by name, unique prefix or path.

The parent never imports a problem either: it only reads the file and hashes it. The reference
worker runs it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import re
from pathlib import Path
from typing import Any

from harness.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class Problem:
    """A problem file, pinned: its bytes are read once, when it is found, and the judge loads the
    reference from those bytes, never from disk again (a file changed on disk since is reported by
    `changed_on_disk`, and the pinned version is still the one judged)."""

    name: str  # file stem, e.g. "37_Matmul_Swish_Sum_GroupNorm"
    level: str  # the folder it sits in, e.g. "level2" ("" for a file given by path elsewhere)
    path: Path  # the problem file
    source: bytes = dataclasses.field(default=b"", compare=False, repr=False)  # its bytes when found (read then)

    def __post_init__(self) -> None:
        if not self.source:
            try:
                object.__setattr__(self, "source", self.path.read_bytes())
            except OSError:
                pass  # the judge reports an unreadable problem

    @functools.cached_property
    def hash(self) -> str:
        """sha256 of the pinned bytes."""
        return hashlib.sha256(self.source).hexdigest()

    @property
    def text(self) -> str:
        """The pinned source, as the judge loads it."""
        return self.source.decode("utf-8", errors="replace")

    @functools.cached_property
    def global_names(self) -> frozenset[str]:
        """The names the problem file binds at its top level (assignments, functions, classes, imports)."""
        import ast

        try:
            tree = ast.parse(self.text)
        except (SyntaxError, ValueError):
            return frozenset()
        names: set[str] = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        return frozenset(names)

    def changed_on_disk(self) -> bool:
        """Whether the file on disk no longer holds the pinned bytes."""
        try:
            return self.path.read_bytes() != self.source
        except OSError:
            return True

    @functools.cached_property
    def settings(self) -> dict[str, object]:
        """The problem's HARNESS_* declarations (see declared_settings), read once."""
        return declared_settings(self.path, self.text)


DECLARABLE: dict[str, type[Any]] = {
    "HARNESS_INPUT_DISTRIBUTIONS": list,  # e.g. ["given"] for inputs with a domain (probabilities, indices)
    "HARNESS_RANDOMIZE_WEIGHTS": bool,  # False when parameters must keep their initialisation (e.g. positive scales)
    "HARNESS_EXTRA_SIZES": list,  # e.g. [{"batch_size": 7}] for the other-size trial
    "HARNESS_TOLERANCES": dict,  # e.g. {"float32": {"atol": 1e-3, "rtol": 1e-3}}, over check.tolerances
    "HARNESS_ALLOW_TF32": bool,  # True: TF32 matmul and convolution count as float32 here (both sides run with it)
    "HARNESS_BACKWARD": bool,  # True: gradients are part of the contract (check.gradients fail); False: off
    "HARNESS_FLAGS": dict,  # e.g. {"own-share-low": "fail"}: this problem's policy for integrity flags
}


def declared_settings(path: Path, text: str | None = None) -> dict[str, object]:
    """Module-level HARNESS_* constants of a problem file, read from its syntax tree (the parent
    never imports a problem). Only literal values count; a wrong type is a usage error."""
    import ast

    from harness.core.config import Distribution, FlagPolicies, Policy
    from harness.core.errors import UserError

    try:
        tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    except (OSError, SyntaxError, ValueError):
        return {}  # the judge reports an unreadable problem
    found: dict[str, object] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in DECLARABLE
        ):
            name = node.targets[0].id
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise UserError(f"{path}: {name} must be a literal {DECLARABLE[name].__name__}") from None
            if not isinstance(value, DECLARABLE[name]):
                raise UserError(f"{path}: {name} must be a {DECLARABLE[name].__name__}, got {value!r}")
            if name == "HARNESS_INPUT_DISTRIBUTIONS" and (
                not value or any(v not in Distribution.words() for v in value)
            ):
                raise UserError(
                    f"{path}: {name} must be a non-empty list of {list(Distribution.words())}, got {value!r}"
                )
            if name == "HARNESS_TOLERANCES" and not _tolerances_ok(value):
                raise UserError(
                    f"{path}: {name} must map dtype names to {{'atol': number >= 0, 'rtol': number >= 0}}, got "
                    f"{value!r}"
                )
            codes = [f.name.replace("_", "-") for f in dataclasses.fields(FlagPolicies)]
            if name == "HARNESS_FLAGS" and not all(c in codes and p in Policy.words() for c, p in value.items()):
                raise UserError(
                    f"{path}: {name} must map flag codes ({', '.join(codes)}) to fail, flag or ignore, got {value!r}"
                )
            found[name] = value
    return found


def _tolerances_ok(value: dict[Any, Any]) -> bool:
    return all(
        isinstance(dtype, str)
        and isinstance(t, dict)
        and set(t) == {"atol", "rtol"}
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in t.values())
        for dtype, t in value.items()
    )


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders the numbers inside a name by value: `l1_p2` before `l1_p10`,
    `level1/9_X` before `level1/10_Y`. Case is ignored, then used to break ties."""
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p) + (name,)


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def discover_problems(problems_dir: Path) -> list[Problem]:
    found = []
    for path in sorted(problems_dir.rglob("*.py"), key=lambda p: natural_key(p.relative_to(problems_dir).as_posix())):
        if path.name.startswith("_"):
            continue
        level = path.parent.name if path.parent != problems_dir else ""
        found.append(Problem(name=path.stem, level=level, path=path))
    return found


UNSUPPORTED_LEVELS = {
    "level4": "KernelBench's level 4 builds its models from configurations on a model hub, which an offline run cannot "
    "fetch; levels 1-3 run as they are",
}


class UnknownProblem(UserError):
    """No problem has the name asked for; `close` holds the names it may have meant."""

    def __init__(self, message: str, close: list[str]) -> None:
        super().__init__(message)
        self.close = close


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
        return Problem(
            name=path.stem, level=path.parent.name if path.parent.parent == problems_dir.resolve() else "", path=path
        )
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
    close = close_matches(query, [f"{p.level}/{p.name}" if "/" in query else p.name for p in problems])
    hint = f"; close matches: {', '.join(close)}" if close else f"; see {problems_dir} for the list"
    raise UnknownProblem(f"no problem named {query!r}{hint}", close)


def close_matches(query: str, names: list[str], n: int = 5) -> list[str]:
    """Names a mistyped `query` may have meant: those that contain it, in any case (`relu` finds
    `1_Scale_Bias_ReLU`), then those spelt alike, in any case; at most `n`, each once."""
    lowered = {name.lower(): name for name in names}
    within = [name for name in sorted(names, key=natural_key) if query.lower() in name.lower()]
    alike = [lowered[m] for m in difflib.get_close_matches(query.lower(), list(lowered), n=n, cutoff=0.4)]
    return list(dict.fromkeys(within + alike))[:n]


def resolve_named_problem(query: str, problems_dir: Path, allow_dir: Path | None = None) -> Problem:
    """A problem for a caller that may only name one (the HTTP service): the problem is the trusted
    reference, so a client never brings its own. A name is what `resolve_problem` takes (`19_ReLU`,
    a unique prefix, `level1/19_ReLU`, `level1/19`, with or without `.py`): at most a level and a
    stem of letters, digits, `_`, `.` and `-`, so it is never read as a path; the file it finds
    must lie inside `problems_dir` once symlinks are resolved. Anything else (an absolute path,
    `..`, a link out of the tree) is refused, unless `allow_dir` is given: then a `.py` file inside
    that one directory, symlinks resolved, is taken too (a relative path is read from `allow_dir`).
    A refusal names the problem as `query` gives it, and neither directory: the caller is a client."""
    shown = repr(query[:200])
    name = query.removesuffix(".py")
    parts = name.split("/")
    named = (
        len(parts) <= 2
        and all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}", part) for part in parts)
        and Path(name).suffix != ".py"
    )
    refusal = UserError(
        f"problem {shown} is not a problem name: problems are named as in the problem tree, e.g. level1/7_GELU, and "
        "files are not taken"
    )
    if named:
        try:
            problem = resolve_problem(name, problems_dir)  # no ".py" suffix left: never opened as a path
        except UnknownProblem as exc:
            hint = f"; close matches: {', '.join(exc.close)}" if exc.close else ""
            refusal = UserError(f"no problem named {shown} in the problem tree{hint}")
        except UserError as exc:
            refusal = exc
        else:
            try:
                inside = problem.path.resolve().is_relative_to(problems_dir.resolve())
            except (OSError, RuntimeError):  # a link loop
                inside = False
            if inside:
                return problem
            refusal = UserError(f"problem {shown} links out of the problem tree: refused")
    if allow_dir is None or "\0" in query:
        raise refusal
    root = allow_dir.resolve()
    try:
        path = (root / query).resolve()  # an absolute query replaces root; resolving follows every link
    except (OSError, RuntimeError):  # a link loop
        path = root
    if path.suffix != ".py" or not path.is_relative_to(root) or not path.is_file():
        taken = "a .py file inside the directory problem files are taken from (serve --allow-problem-dir)"
        raise UserError(
            f"{refusal}; nor is it {taken}" if named else f"problem {shown} is neither a problem name nor {taken}"
        )
    level = path.parent.name if path.parent != root else ""
    if level in UNSUPPORTED_LEVELS:
        raise UserError(f"{level}/{path.stem}: {UNSUPPORTED_LEVELS[level]}")
    return Problem(name=path.stem, level=level, path=path)
