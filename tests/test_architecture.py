"""Structure targets for harness/, as executable specifications.

- no class over MAX_CLASS_STATEMENTS statements, no function over MAX_FUNCTION_STATEMENTS statements (statements,
  not lines: the formatter's line breaks do not change a definition's size);
- no import cycle among harness modules, imports inside functions included;
- no block of DUPLICATE_WINDOW or more (normalized) lines that occurs twice in harness/;
- every import between harness's packages follows an arrow of ALLOWED (no allowlist of exceptions);
- no chain of imports deeper than MAX_IMPORT_DEPTH modules;
- only the packages of RUNS_USER_CODE execute a problem's or a candidate's code;
- no comparison (==, !=, in, not in) spells a Vocabulary's word as a string literal: it names the member
  (`device == Device.CUDA`, never `device == "cuda"`); a literal tested `in` a string is a substring test.
- no two module-level classes share a name, and no module imports another's private (`_name`) name.
- no line over MAX_LINE_LENGTH characters (ruff's line-length in pyproject.toml).

Each check fails on any offender, named with its file and line. Each detector takes a package folder, so the
self-tests run it on a synthetic package in tmp_path. `python3 tests/test_architecture.py` prints the current
offenders.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"

MAX_CLASS_STATEMENTS = 160
MAX_FUNCTION_STATEMENTS = 45
DUPLICATE_WINDOW = 6
# 10 until a candidate's compared pass left the lane's judge for a module of its own (harness.parent.compared_pass,
# which the reference pass imports for its null candidate and baselines): one level more, the least that split costs
MAX_IMPORT_DEPTH = 11
MAX_LINE_LENGTH = 120

# The packages by process and trust, and which of them each may import (besides itself and the root
# package, which holds only the version). The entry points at the top (api, __main__) and
# the commands may import anything.
ALLOWED: dict[str, set[str]] = {
    "core": set(),  # vocabularies, records, messages, config: no torch, nothing of ours
    "device": {"core"},  # runs models: in the judge and in the worker alike
    "sources": {"core"},  # what a user brings, read as text
    "judge": {"core", "device"},  # the trusted judge process: never the worker's code
    "worker": {"core", "device"},  # the untrusted worker process: never the judge's code
    "parent": {"core", "device", "sources"},  # starts the processes; never runs the judge's or the worker's code
    "views": {"core", "sources"},  # reads records; never a device or a process
}
ENTRY_POINTS = {"api", "__main__", "commands"}

# The packages whose code executes a problem file or a candidate (the judge, the worker and the
# device helpers both call). The parent, the views and the sources only read them as text.
RUNS_USER_CODE = {"judge", "worker", "device"}
LOADERS = {"load_module", "exec_module", "run_path", "run_module"}  # called as a function or a method
BUILTIN_LOADERS = {"exec", "eval"}  # Python's own, called by name (`model.eval()` is a module's mode)

def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


@functools.lru_cache(maxsize=None)
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


@functools.lru_cache(maxsize=None)
def _on_harness(detector: Callable[[Path], dict]) -> dict:
    """A detector's findings on harness/, computed once for the checks and the allowlist test."""
    return detector(PACKAGE)


def _name(root: Path, path: Path) -> str:
    return path.relative_to(root.parent).as_posix()


# -- long classes and functions ------------------------------------------------------------------------------


def long_definitions(root: Path, max_class: int = MAX_CLASS_STATEMENTS, max_function: int = MAX_FUNCTION_STATEMENTS) -> dict[str, tuple[int, int]]:
    """Every class over max_class statements and function over max_function statements under root:
    {"pkg/file.py::Outer.name": (line, size)}, size counted as the statements inside the definition, nested ones
    included (a method's def and each statement of its body count in its class)."""
    found: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                qualified = prefix + child.name
                size = sum(isinstance(n, ast.stmt) for n in ast.walk(child)) - 1
                limit = max_class if isinstance(child, ast.ClassDef) else max_function
                key = f"{path}::{qualified}"
                if size > limit and size > found.get(key, (0, 0))[1]:
                    found[key] = (child.lineno, size)
                visit(child, path, qualified + ".")
            else:
                visit(child, path, prefix)

    for file in _files(root):
        visit(_parse(file.read_text(encoding="utf-8")), _name(root, file), "")
    return found


# -- import cycles -------------------------------------------------------------------------------------------


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """{module: {imported module: first line}} for every import of a module under root, wherever it stands
    (module level, in a function, under a condition). `from pkg.sub import name` counts as an import of
    pkg.sub.name when that is a module, else of pkg.sub."""
    files = {_module_name(root, f): f for f in _files(root)}
    graph: dict[str, dict[str, int]] = {}

    def add(edges: dict[str, int], target: str, line: int) -> None:
        while target and target not in files:  # `import pkg.sub.name` with name not a module: its module
            target = target.rpartition(".")[0]
        if target:
            edges.setdefault(target, line)

    for module, file in files.items():
        is_package = file.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(_parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(edges, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module if is_package else module.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    add(edges, submodule if submodule in files else base, node.lineno)
        edges.pop(module, None)
        graph[module] = edges
    return graph


def _components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _cycle_path(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as the modules along it (first repeated last)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if successor in members and successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected component


def import_cycles(root: Path) -> dict[str, tuple[int, str]]:
    """{"a, b, c" (the component's sorted modules): (module count, one cycle as "a (file:line) -> b ...")}."""
    graph = import_graph(root)
    files = {_module_name(root, f): _name(root, f) for f in _files(root)}
    found = {}
    for component in _components(graph):
        path = _cycle_path(graph, component)
        steps = [f"{a} ({files[a]}:{graph[a][b]})" for a, b in zip(path, path[1:])]
        found[", ".join(component)] = (len(component), " -> ".join([*steps, path[-1]]))
    return found


# -- package arrows and import depth ------------------------------------------------------------------------


def package_of(module: str) -> str:
    """The package right under the root a module belongs to ("" for the root package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def forbidden_imports(root: Path, allowed: dict[str, set[str]], free: set[str]) -> dict[str, str]:
    """{"a.b -> a.c": "file:line"} for every import from one package into another that `allowed` has no
    arrow for. Packages in `free` may import anything; a package missing from `allowed` is an offence."""
    files = {_module_name(root, f): _name(root, f) for f in _files(root)}
    found = {}
    for module, edges in import_graph(root).items():
        source = package_of(module)
        if source in free:
            continue
        for target, line in edges.items():
            goal = package_of(target)
            if goal in ("", source):
                continue
            if source not in allowed or goal not in allowed[source]:
                found[f"{module} -> {target}"] = f"{files[module]}:{line}"
    return found


def deepest_chain(root: Path) -> list[str]:
    """The longest chain of imports among root's modules (the graph has no cycle), first module first."""
    graph = import_graph(root)
    longest: dict[str, list[str]] = {}

    def chain(module: str) -> list[str]:
        if module not in longest:
            tails = [chain(t) for t in sorted(graph[module]) if t in graph]
            longest[module] = [module, *max(tails, key=len, default=[])]
        return longest[module]

    return max((chain(m) for m in sorted(graph)), key=len, default=[])


# -- who runs user code ------------------------------------------------------------------------------------


def code_runners(root: Path, allowed: set[str]) -> dict[str, str]:
    """{"pkg/file.py:line": "call"} for every call of a loader (LOADERS: executing a file's or a string's
    code) in a module outside the packages `allowed`."""
    found = {}
    for file in _files(root):
        if package_of(_module_name(root, file)) in allowed:
            continue
        for node in ast.walk(_parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute) and node.func.attr in LOADERS:
                    found[f"{_name(root, file)}:{node.lineno}"] = node.func.attr
                elif isinstance(node.func, ast.Name) and node.func.id in LOADERS | BUILTIN_LOADERS:
                    found[f"{_name(root, file)}:{node.lineno}"] = node.func.id
    return found


# -- duplicated blocks ---------------------------------------------------------------------------------------

# Lines left out before comparing: blank lines, comments, docstrings (string-only statements), lines of
# brackets and punctuation alone (the tail of a wrapped call), and import statements: every module starts
# with much the same imports, and that is not duplicated logic.
_PUNCTUATION_ONLY = re.compile(r"^[\s()\[\]{},:;]*$")


def _normalized_lines(source: str) -> list[tuple[int, str]]:
    """(line number, stripped text) for each line that counts, comments removed."""
    lines = source.splitlines()
    dropped: set[int] = set()
    for node in ast.walk(_parse(source)):
        string_only = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if string_only or isinstance(node, (ast.Import, ast.ImportFrom)):
            dropped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    comments: dict[int, int] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    kept = []
    for number, line in enumerate(lines, start=1):
        if number in dropped:
            continue
        text = line[: comments[number]] if number in comments else line
        text = text.strip()
        if text and not _PUNCTUATION_ONLY.match(text):
            kept.append((number, text))
    return kept


def duplicate_blocks(root: Path, window: int = DUPLICATE_WINDOW) -> dict[str, tuple[int, list[str]]]:
    """Blocks of at least `window` normalized lines found twice under root, as
    {"file <> file": (duplicated lines in all, ["file:line and file:line, N lines", ...])}."""
    normalized = {_name(root, f): _normalized_lines(f.read_text(encoding="utf-8")) for f in _files(root)}
    places: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, lines in normalized.items():
        for start in range(len(lines) - window + 1):
            digest = hashlib.sha1("\n".join(text for _, text in lines[start : start + window]).encode()).hexdigest()
            places[digest].append((name, start))
    # each pair of matching windows; consecutive pairs (both sides one line further) make one longer block
    pairs: set[tuple[str, int, str, int]] = set()
    for occurrences in places.values():
        for i, (a, i_a) in enumerate(occurrences):
            for b, i_b in occurrences[i + 1 :]:
                if a == b and abs(i_a - i_b) < window:
                    continue  # a run of repeated lines overlapping itself
                pairs.add((a, i_a, b, i_b) if (a, i_a) <= (b, i_b) else (b, i_b, a, i_a))
    found: dict[str, tuple[int, list[str]]] = {}
    for a, i_a, b, i_b in sorted(pairs):
        if (a, i_a - 1, b, i_b - 1) in pairs:
            continue  # inside a block that starts earlier
        length = window
        while (a, i_a + length - window + 1, b, i_b + length - window + 1) in pairs:
            length += 1
        key = f"{a} <> {b}"
        total, blocks = found.get(key, (0, []))
        found[key] = (total + length, [*blocks, f"{a}:{normalized[a][i_a][0]} and {b}:{normalized[b][i_b][0]}, {length} lines"])
    return found


# -- vocabulary words compared as strings -------------------------------------------------------------------


def _base_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def vocabulary_words(root: Path) -> dict[str, list[str]]:
    """{word: [the Vocabulary classes under root that have it]}: the string values of the members of every
    class deriving from `Vocabulary` (by name: `Vocabulary` or `module.Vocabulary`)."""
    words: dict[str, list[str]] = defaultdict(list)
    for file in _files(root):
        for node in ast.walk(_parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(_base_name(b) == "Vocabulary" for b in node.bases):
                for statement in node.body:
                    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str):
                        words[statement.value.value].append(node.name)
    return dict(words)


def _literal_strings(node: ast.expr) -> Optional[list[str]]:
    """The strings of a str literal, or of a tuple, set or list of str literals; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return None


def string_twins(root: Path) -> dict[str, str]:
    """{"pkg/file.py:line": "word (Vocab1, Vocab2)"} for each ==, !=, in or not in comparison under root
    with an operand that is a str literal, or a tuple, set or list of them, spelling a Vocabulary's word
    (`vocabulary_words`). `"literal" in text`, a literal on the left of in or not in and no tuple, set or
    list display on the right, is a substring test, not a word compared, and is skipped."""
    words = vocabulary_words(root)
    found: dict[str, dict[str, None]] = defaultdict(dict)  # place -> the words spelled there, each once, in order
    for file in _files(root):
        for node in ast.walk(_parse(file.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(left, ast.Constant) and not isinstance(right, (ast.Tuple, ast.Set, ast.List)):
                    continue  # a substring test
                for word in [*(_literal_strings(left) or ()), *(_literal_strings(right) or ())]:
                    if word in words:
                        found[f"{_name(root, file)}:{node.lineno}"][word] = None
    return {place: "; ".join(f"{w} ({', '.join(sorted(words[w]))})" for w in spelled) for place, spelled in found.items()}


# -- one class per name, and private names kept private ------------------------------------------------------


def twin_classes(root: Path) -> dict[str, list[str]]:
    """{class name: [where, ...]} for every name that two module-level classes under root share."""
    found: dict[str, list[str]] = defaultdict(list)
    for file in _files(root):
        for node in _parse(file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{_name(root, file)}:{node.lineno}")
    return {name: places for name, places in found.items() if len(places) > 1}


def private_imports(root: Path) -> dict[str, str]:
    """{"pkg/file.py:line": name} for every `from module import _name` under root (dunders aside):
    a name its module keeps private, used by another."""
    found: dict[str, str] = {}
    for file in _files(root):
        for node in ast.walk(_parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found[f"{_name(root, file)}:{node.lineno}"] = alias.name
    return found


# -- line length ---------------------------------------------------------------------------------------------


def long_lines(root: Path, limit: int = MAX_LINE_LENGTH) -> dict[str, int]:
    """{"pkg/file.py:line": length} for every line under root over limit characters."""
    found: dict[str, int] = {}
    for file in _files(root):
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if len(line) > limit:
                found[f"{_name(root, file)}:{number}"] = len(line)
    return found


# -- the checks on harness/ ----------------------------------------------------------------------------------


def test_no_class_or_function_over_the_limit() -> None:
    found = _on_harness(long_definitions)
    bad = [f"{key.split('::')[0]}:{line} {key.split('::')[1]}: {size} lines" for key, (line, size) in sorted(found.items())]
    assert not bad, f"over {MAX_CLASS_STATEMENTS} statements (class) or {MAX_FUNCTION_STATEMENTS} (function):\n" + "\n".join(bad)


def test_no_import_cycle() -> None:
    found = _on_harness(import_cycles)
    bad = [f"{len(key.split(', '))} modules: {path}" for key, (_, path) in sorted(found.items())]
    assert not bad, "import cycles among harness modules:\n" + "\n".join(bad)


def test_every_import_between_packages_follows_an_allowed_arrow() -> None:
    found = forbidden_imports(PACKAGE, ALLOWED, ENTRY_POINTS)
    bad = [f"{edge} ({where})" for edge, where in sorted(found.items())]
    assert not bad, "imports against the package arrows (tests/test_architecture.py: ALLOWED):\n" + "\n".join(bad)


def test_every_module_sits_in_a_package_with_arrows_or_is_an_entry_point() -> None:
    packages = {package_of(_module_name(PACKAGE, f)) for f in _files(PACKAGE)} - {""}
    assert packages <= set(ALLOWED) | ENTRY_POINTS, f"packages or top-level modules with no arrows: {sorted(packages - set(ALLOWED) - ENTRY_POINTS)}"


def test_no_chain_of_imports_is_deeper_than_the_limit() -> None:
    chain = deepest_chain(PACKAGE)
    assert len(chain) <= MAX_IMPORT_DEPTH, f"{len(chain)} modules deep: " + " -> ".join(chain)


def test_only_the_judge_and_the_worker_run_a_problem_or_a_candidate() -> None:
    found = code_runners(PACKAGE, RUNS_USER_CODE)
    bad = [f"{where}: {call}()" for where, call in sorted(found.items())]
    assert not bad, f"code executed outside {sorted(RUNS_USER_CODE)} (a child process that runs user code belongs in worker/ or judge/):\n" + "\n".join(bad)


def test_no_duplicated_block() -> None:
    found = _on_harness(duplicate_blocks)
    bad = [f"{key}: {total} lines: " + "; ".join(blocks) for key, (total, blocks) in sorted(found.items())]
    assert not bad, f"duplicated blocks of {DUPLICATE_WINDOW} or more lines:\n" + "\n".join(bad)


def test_no_comparison_spells_a_vocabulary_word_as_a_string() -> None:
    found = _on_harness(string_twins)
    bad = [f"{where}: {words}" for where, words in sorted(found.items(), key=lambda item: (item[0].rpartition(":")[0], int(item[0].rpartition(":")[2])))]
    assert not bad, "vocabulary words compared as strings (compare the Vocabulary's member instead):\n" + "\n".join(bad)


def test_no_two_classes_share_a_name() -> None:
    twins = twin_classes(PACKAGE)
    assert not twins, "classes that share a name: " + "; ".join(f"{name} ({', '.join(places)})" for name, places in sorted(twins.items()))


def test_the_run_command_and_the_api_never_read_back_the_records_they_wrote() -> None:
    """What a session wrote comes back from Session.close() (a RunSummary); only a resume reads the
    file, through RunStore.earlier(), for what an earlier process wrote."""
    for module in ("api.py", "commands/run.py"):
        tree = _parse((PACKAGE / module).read_text(encoding="utf-8"))
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "read_records" not in named, f"harness/{module} reads records.jsonl back"


def test_no_module_imports_a_private_name_of_another() -> None:
    found = private_imports(PACKAGE)
    assert not found, "private names imported: " + ", ".join(f"{name} at {where}" for where, name in sorted(found.items()))


def test_no_line_in_harness_is_longer_than_120_characters() -> None:
    found = long_lines(PACKAGE)
    bad = [f"{where}: {length} characters" for where, length in sorted(found.items(), key=lambda item: (item[0].rpartition(":")[0], int(item[0].rpartition(":")[2])))]
    assert not bad, f"lines over {MAX_LINE_LENGTH} characters:\n" + "\n".join(bad)


# -- the detectors on synthetic packages ---------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "__init__.py").touch()
    return root


def test_long_definitions_finds_a_46_statement_function_and_a_162_statement_class(tmp_path: Path) -> None:
    def function(name: str, statements: int) -> str:  # one statement a line, however long the call
        return f"def {name}():\n" + "".join(f"    x{i} = f(\n        {i},\n    )\n" for i in range(statements)) + "\n\n"

    def klass(name: str, statements: int) -> str:  # methods of two statements each: the def and its return
        return f"class {name}:\n" + "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(statements // 2)) + "\n"

    source = function("long", 46) + function("limit", 45) + klass("Big", 162) + klass("Fits", 160)
    found = long_definitions(_package(tmp_path, {"mod.py": source}))
    assert found == {"pkg/mod.py::long": (1, 46), "pkg/mod.py::Big": (280, 162)}


def test_import_cycles_finds_a_cycle_of_imports_inside_functions(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a.py": "def f():\n    from pkg import b\n    return b\n",
            "b.py": "def g():\n    import pkg.a\n    return pkg.a\n",
            "c.py": "from pkg.sub import d\nimport pkg.a\n",
            "sub/__init__.py": "",
            "sub/d.py": "from . import e\n",
            "sub/e.py": "from ..sub.d import something\n",
        },
    )
    assert import_graph(root)["pkg.c"] == {"pkg.sub.d": 1, "pkg.a": 2}
    assert import_cycles(root) == {
        "pkg.a, pkg.b": (2, "pkg.a (pkg/a.py:2) -> pkg.b (pkg/b.py:2) -> pkg.a"),
        "pkg.sub.d, pkg.sub.e": (2, "pkg.sub.d (pkg/sub/d.py:1) -> pkg.sub.e (pkg/sub/e.py:1) -> pkg.sub.d"),
    }


def test_forbidden_imports_names_an_import_against_the_arrows_and_passes_the_allowed_ones(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/a.py": "",
            "judge/__init__.py": "",
            "judge/j.py": "from pkg.core import a\n",
            "worker/__init__.py": "",
            "worker/w.py": "import pkg.core.a\n\ndef f():\n    from pkg.judge import j\n",
            "cli.py": "from pkg.worker import w\nfrom pkg.judge import j\n",
        },
    )
    allowed = {"core": set(), "judge": {"core"}, "worker": {"core"}}
    assert forbidden_imports(root, allowed, {"cli"}) == {"pkg.worker.w -> pkg.judge.j": "pkg/worker/w.py:4"}
    assert deepest_chain(root) == ["pkg.cli", "pkg.worker.w", "pkg.judge.j", "pkg.core.a"]


def test_code_runners_finds_a_module_loaded_outside_the_sandbox_and_passes_the_worker(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "parent/__init__.py": "",
            "parent/build.py": "from pkg.device.failures import load_module\n\ndef main(path):\n    load_module(path, 'c')\n",
            "parent/ok.py": "def f(text, model):\n    model.eval()\n    return text.count('exec')\n",
            "parent/run.py": "def f(text):\n    exec(text)\n",
            "views/v.py": "import importlib.util\n\ndef f(spec, m):\n    spec.loader.exec_module(m)\n",
            "worker/__init__.py": "",
            "worker/build.py": "from pkg.device.failures import load_module\n\ndef main(path):\n    load_module(path, 'c')\n",
        },
    )
    assert code_runners(root, {"worker", "device"}) == {"pkg/parent/build.py:4": "load_module", "pkg/parent/run.py:2": "exec", "pkg/views/v.py:4": "exec_module"}


def test_duplicate_blocks_finds_a_6_line_block_and_ignores_imports_comments_and_brackets(tmp_path: Path) -> None:
    block = "    total = 0\n    for item in items:\n        total += item.size\n    if total > limit:\n        raise ValueError(total)\n    return total\n"
    five = "".join(block.splitlines(keepends=True)[:5])
    imports = "import os\nimport sys\nfrom pathlib import Path\nimport re\nimport json\nimport ast\n"
    root = _package(
        tmp_path,
        {
            "one.py": f'{imports}\n\ndef size(items, limit):\n    """Sum."""\n{block}',
            "two.py": f"{imports}\n\ndef other(items, limit):\n    # the same, commented\n{block.replace('item.size', 'item.size  # each')}",
            "three.py": f"{imports}\n\ndef five(items, limit):\n{five}    return (\n        None\n    )\n",
        },
    )
    assert duplicate_blocks(root) == {"pkg/one.py <> pkg/two.py": (6, ["pkg/one.py:11 and pkg/two.py:11, 6 lines"])}


def test_string_twins_finds_a_word_compared_as_a_string_and_skips_substring_tests(tmp_path: Path) -> None:
    words = """import enum
from pkg.core import base


class Vocabulary(str, enum.Enum):
    pass


class Device(Vocabulary):
    CUDA = "cuda"
    CPU = "cpu"


class Switch(base.Vocabulary):
    AUTO = "auto"
    OFF = "off"


class Ahead(Vocabulary):
    AUTO = "auto"
"""
    use = """from pkg.core.words import Device, Switch


def run(device, setting, message, name):
    if device == "cuda" or name == "other":  # a word, then a string that is no word
        return setting in ("auto", "sometimes")
    if "cpu" != device:  # the literal on the left
        return "off" not in {setting}
    if "out of memory" in message.lower() or "auto" in message:  # substring tests, one of a word
        return device == Device.CUDA and setting != Switch.OFF  # members
    return name in ("exec", "eval") and setting not in [Switch.AUTO, "never"]
"""
    root = _package(tmp_path, {"core/__init__.py": "", "core/base.py": "", "core/words.py": words, "use.py": use})
    assert vocabulary_words(root) == {"cuda": ["Device"], "cpu": ["Device"], "auto": ["Switch", "Ahead"], "off": ["Switch"]}
    assert string_twins(root) == {
        "pkg/use.py:5": "cuda (Device)",
        "pkg/use.py:6": "auto (Ahead, Switch)",
        "pkg/use.py:7": "cpu (Device)",
        "pkg/use.py:8": "off (Switch)",
    }


def test_twin_classes_and_private_imports_find_them_on_a_synthetic_package(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "a.py": "class Rules:\n    pass\n\n\nclass Alone:\n    class Rules:  # nested: not module level\n        pass\n",
        "b.py": "from pkg.a import _hidden, __version__, Alone\n\n\nclass Rules:\n    pass\n",
    })
    assert twin_classes(root) == {"Rules": ["pkg/a.py:1", "pkg/b.py:4"]}
    assert private_imports(root) == {"pkg/b.py:1": "_hidden"}


def test_long_lines_finds_a_121_character_line_and_passes_120(tmp_path: Path) -> None:
    root = _package(tmp_path, {"a.py": "x = 1\n" + "#" * 120 + "\n" + "#" * 121 + "\n", "sub/b.py": "y = '" + "é" * 116 + "'\n"})
    assert long_lines(root) == {"pkg/a.py:3": 121, "pkg/sub/b.py:1": 122}


if __name__ == "__main__":  # print today's offenders: python3 tests/test_architecture.py
    for key, (line, size) in sorted(long_definitions(PACKAGE).items()):
        print(f"long: {key} (line {line}): {size} lines")
    for key, (count, path) in sorted(import_cycles(PACKAGE).items()):
        print(f"cycle of {count}: {path}")
    for key, (total, blocks) in sorted(duplicate_blocks(PACKAGE).items()):
        print(f"duplicate: {key}: {total} lines: " + "; ".join(blocks))
    for edge, where in sorted(forbidden_imports(PACKAGE, ALLOWED, ENTRY_POINTS).items()):
        print(f"against the arrows: {edge} ({where})")
    for where, words in sorted(string_twins(PACKAGE).items()):
        print(f"vocabulary word as a string: {where}: {words}")
    for where, length in sorted(long_lines(PACKAGE).items()):
        print(f"long line: {where}: {length} characters")
    chain = deepest_chain(PACKAGE)
    print(f"deepest chain, {len(chain)} modules: " + " -> ".join(chain))
