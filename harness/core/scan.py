"""A static scan of a candidate's source (its syntax tree, never executed) for constructs that
cheats use. Each finding is an integrity flag (harness/core/flags.py) with its line; their policies
default to `flag`, so the runtime checks decide the status.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Callable

from harness.core.status import Code, Finding

SUSPICIOUS_MODULES = {
    "ctypes": (Code.TAMPER_SUSPECT, "can read and write any memory of the process"),
    "gc": (Code.TAMPER_SUSPECT, "can walk every live object (the harness's included)"),
    "inspect": (Code.TAMPER_SUSPECT, "can walk the caller's frames"),
    "threading": (Code.SIDE_STREAM, "can run work after forward returns"),
    "multiprocessing": (Code.SIDE_STREAM, "can run work outside the measured call"),
    "concurrent": (Code.SIDE_STREAM, "can run work after forward returns"),
    "subprocess": (Code.TAMPER_SUSPECT, "can start other programs"),
    "signal": (Code.TAMPER_SUSPECT, "can interfere with the worker's time limits"),
    "builtins": (Code.TAMPER_SUSPECT, "can replace Python's own functions"),
}
CODE_FROM_TEXT = {"exec", "eval", "__import__", "compile"}  # builtins that run code read only at run time
FRAME_CALLS = {
    ("sys", "_getframe"),
    ("inspect", "currentframe"),
    ("inspect", "stack"),
    ("inspect", "getouterframes"),
    ("gc", "get_objects"),
    ("gc", "get_referrers"),
}
PATCHABLE_ROOTS = {"torch", "time", "sys", "builtins", "os", "harness"}
NATIVE_MARKERS = {
    "cudaStreamCreate": (Code.SIDE_STREAM, "creates CUDA streams (work there is outside the calling stream)"),
    "std::thread": (Code.SIDE_STREAM, "starts threads"),
    "cudaDeviceSetLimit": (Code.TAMPER_SUSPECT, "changes device limits"),
    "cudaStreamSetAttribute": (
        Code.TAMPER_SUSPECT,
        "changes stream attributes (an L2 access-policy window survives the flush)",
    ),
    "cudaCtxResetPersistingL2Cache": (Code.TAMPER_SUSPECT, "changes the L2 cache's persisting lines"),
}
LOW_PRECISION = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


Note = Callable[[Code, str, ast.AST], None]


def scan_source(path: Path) -> list[Finding]:
    """Findings about `path` (a Python file), each a flag code and a message with its line, in
    line order; [] when it cannot be read or parsed."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    found: dict[tuple[Code, str], int] = {}

    def note(code: Code, message: str, node: ast.AST) -> None:
        found.setdefault((code, message), getattr(node, "lineno", 0))

    library = _library_names(tree)
    for node in ast.walk(tree):
        _scan_node(node, library, note)
    for forward in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward"):
        _scan_forward(forward, note)
    return [
        (code, f"source: {message} (line {line})")
        for (code, message), line in sorted(found.items(), key=lambda item: item[1])
    ]


def _library_names(tree: ast.AST) -> set[str]:
    """Names that stand for a library module: its own, and aliases such as F."""
    library = set(PATCHABLE_ROOTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            library.update(a.asname for a in node.names if a.asname and a.name.split(".")[0] in PATCHABLE_ROOTS)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PATCHABLE_ROOTS:
            library.update(a.asname or a.name for a in node.names)
    return library


def _scan_node(node: ast.AST, library: set[str], note: Note) -> None:
    """Suspicious imports, calls, assignments to library attributes and native markers."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            root = name.split(".")[0]
            if root in SUSPICIOUS_MODULES:
                note(SUSPICIOUS_MODULES[root][0], f"imports {root}, which {SUSPICIOUS_MODULES[root][1]}", node)
    elif isinstance(node, ast.Call):
        _scan_call(node, library, note)
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            dotted = _dotted(target)
            if "." in dotted and dotted.split(".")[0] in library:
                if dotted.endswith(("allow_tf32", "allow_fp16_reduced_precision_reduction")):
                    note(Code.LESS_PRECISE, f"assigns {dotted}: lowers matmul precision for the whole process", node)
                else:
                    note(Code.TAMPER_SUSPECT, f"assigns {dotted}: replaces a library attribute", node)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        for marker, (code, message) in NATIVE_MARKERS.items():
            if marker in node.value:
                note(code, f"native code uses {marker}: {message}", node)


def _scan_call(node: ast.Call, library: set[str], note: Note) -> None:
    name = _dotted(node.func)
    tail = tuple(name.split(".")[-2:])
    if tail in FRAME_CALLS:
        note(Code.TAMPER_SUSPECT, f"calls {name}: frame or object walking can reach the harness", node)
    elif name in CODE_FROM_TEXT:
        note(Code.TAMPER_SUSPECT, f"calls {name}: code that cannot be read before it runs", node)
    elif name == "setattr" and node.args and _dotted(node.args[0]).split(".")[0] in library:
        note(Code.TAMPER_SUSPECT, f"calls setattr on {_dotted(node.args[0])}: replaces a library attribute", node)
    elif name.endswith(("cuda.Stream", "cuda.stream")):
        note(
            Code.SIDE_STREAM,
            f"uses {name}: work on another stream is only timed when joined or device-synchronised",
            node,
        )
    elif name.split(".")[-1] == "Thread":
        note(Code.SIDE_STREAM, f"starts a thread ({name})", node)


def _scan_forward(forward: ast.FunctionDef, note: Note) -> None:
    """Inside forward: a fallback path, and lower precision than the reference."""
    for node in ast.walk(forward):
        if isinstance(node, ast.Try) and node.handlers:
            note(Code.FALLBACK, "forward has try/except: a failing custom kernel may fall back to PyTorch unseen", node)
        if isinstance(node, ast.Attribute) and node.attr in LOW_PRECISION:
            note(
                Code.LESS_PRECISE,
                f"forward uses {node.attr}: lower precision than the reference may hide in the tolerance",
                node,
            )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("half", "bfloat16")
        ):
            note(
                Code.LESS_PRECISE,
                f"forward calls .{node.func.attr}(): lower precision than the reference may hide in the tolerance",
                node,
            )


_GLOBAL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)"
)


def declared_kernels(path: Path) -> set[str]:
    """Names of the GPU kernels a candidate brings: `__global__` functions in its source strings
    and functions decorated with Triton's `jit`."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            names.update(_GLOBAL.findall(node.value))
        elif isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if _dotted(target).split(".")[-1] in ("jit", "autotune", "heuristics"):
                    names.add(node.name)
    return names


def custom_share(kernels: "list[tuple[str, float]]", names: set[str]) -> float:
    """Fraction of the GPU time in `kernels` ((name, ms) pairs, as the profiler names them) spent in
    kernels whose name contains one of `names` as a whole identifier."""
    total = sum(ms for _, ms in kernels)
    if total <= 0 or not names:
        return 0.0
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
    return sum(ms for name, ms in kernels if pattern.search(name)) / total
