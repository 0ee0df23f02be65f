"""Turn a raw LLM completion into the candidate's Python source, or refuse.

A refusal says precisely why, in one line, so that a bad extraction is never
mistaken for a bad kernel: "truncated" means the completion was cut off
(a token-limit problem), "no_code" means there is nothing to evaluate.
A closed block that does not parse is still returned as "ok": that is a
verdict about the candidate, which evaluation reports.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Extraction:
    code: str | None  # the extracted Python source, None when refused
    reason: str  # one line: how it was found, or why refused
    kind: str  # "ok" | "no_code" | "truncated"


@dataclass(frozen=True)
class _Block:
    number: int  # 1-based, among all fenced blocks
    fence: str  # the opening fence line as written, e.g. "```python"
    tag: str  # language tag, "" when untagged
    code: str
    first_line: int  # line of the completion holding the block's first code line
    closed: bool
    close_note: str  # how an unusual closing fence looked, "" for a plain one


_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
# An opening fence carries at most one word: "``` This code ..." is prose, not a fence.
_OPEN_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[ \t]*$")
_LANGUAGE = re.compile(r"[A-Za-z][\w+#.-]*")
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_LOOKS_PYTHON = re.compile(r"^\s*(import\s|from\s+\S+\s+import\s|class\s|def\s)", re.MULTILINE)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_MODULE_BASES = {"nn.Module", "torch.nn.Module", "Module"}


def extract_code(text: str) -> Extraction:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return Extraction(None, f"input is not text but {type(text).__name__}", "no_code")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if not text.strip():
        return Extraction(None, "empty completion", "no_code")

    text, n_think, unclosed_line = _blank_think_sections(text)
    if unclosed_line is not None:
        return Extraction(
            None,
            f"completion ends inside an unclosed <think> section (opened at line {unclosed_line})",
            "truncated",
        )
    after_think = f", after {_plural(n_think, '<think> section')}" if n_think else ""

    blocks = _fenced_blocks(text)
    python = [b for b in blocks if _is_python(b)]
    if not python:
        return _raw_code(text, blocks, after_think)

    def where(b: _Block) -> str:
        return f"block {b.number} of {len(blocks)}, {b.fence}"

    final = python[-1]
    if not final.closed:
        # The text ends inside the last attempt: unless that attempt is whole,
        # refuse rather than fall back on an earlier draft.
        why = _cut_off(final)
        if why:
            return Extraction(None, f"final Python block ({where(final)}) is never closed and {why}", "truncated")

    defining = [b for b in python if _MODELNEW.search(b.code)]
    chosen = defining[-1] if defining else final
    if chosen is final:
        how = f"final Python block ({where(chosen)})"
    else:
        later = _plural(len(python) - 1 - python.index(chosen), "later Python block")
        how = f"last Python block defining ModelNew ({where(chosen)}); {later} without it"
    if not defining:
        how += "; no block defines class ModelNew"
    earlier = python.index(chosen)
    if earlier:
        how += f"; {_plural(earlier, 'earlier Python block')} ignored"
    if not chosen.closed:
        how += "; its fence is never closed but the code is complete"
    elif chosen.close_note:
        how += f"; {chosen.close_note}"
    open_after = [b for b in blocks if not b.closed and b is not chosen]
    if open_after:
        how += f"; the text ends inside an unclosed {open_after[0].fence} block after it"
    error = _parse_error(chosen.code, chosen.first_line)
    if error:
        how += f"; does not parse: {error}"
    return Extraction(_finish(chosen.code), how + after_think, "ok")


def _blank_think_sections(text: str) -> tuple[str, int, int | None]:
    """Blank out reasoning, keeping its newlines so that line numbers still match.

    Returns (text, sections dropped, line of an unclosed <think> or None).
    A </think> with no opener means the chat template put <think> in the
    prompt: everything before it is reasoning.
    """
    out: list[str] = []
    pos, count = 0, 0
    open_at: int | None = None
    for tag in _THINK_TAG.finditer(text):
        if tag.group(1) != "/":
            if open_at is None:  # a <think> nested inside a section changes nothing
                out.append(text[pos : tag.start()])
                open_at = tag.start()
            continue
        if open_at is None:
            out, open_at = [], 0
        out.append("\n" * text.count("\n", open_at, tag.end()))
        pos, open_at = tag.end(), None
        count += 1
    if open_at is not None:
        return text, count, text.count("\n", 0, open_at) + 1
    out.append(text[pos:])
    return "".join(out), count, None


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    opening: re.Match[str] | None = None  # the fence of the block we are in
    start = 0  # index of that fence's line
    body: list[str] = []

    def finish(closed: bool, note: str = "") -> None:
        # Dedent undoes a fence indented inside a markdown list.
        code = textwrap.dedent("\n".join(body))
        assert opening is not None  # called only while inside a block
        fence = opening.group(0).strip()
        blocks.append(_Block(len(blocks) + 1, fence, opening.group(2), code, start + 2, closed, note))

    for i, line in enumerate(text.split("\n")):
        if opening is None:
            opening, start, body = _OPEN_FENCE.match(line), i, []
            continue
        chars = opening.group(1)
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) > 3 or not stripped.startswith(chars):
            glued = line.rstrip()
            if glued.endswith(chars) and not glued[: -len(chars)].endswith(chars[0]):
                # "    return x```": the model glued the closing fence to the last line.
                body.append(glued[: -len(chars)])
                finish(True, "closed by a fence at the end of a code line")
                opening = None
            else:
                body.append(line)
            continue
        rest = stripped.lstrip(chars[0]).strip()
        if not rest:
            finish(True)
            opening = None
        elif _LANGUAGE.fullmatch(rest):
            # "```python" inside a block: the model forgot to close the previous one.
            finish(True)
            opening, start, body = _OPEN_FENCE.match(line), i, []
        else:
            finish(True, "closed by a fence line followed by prose")
            opening = None
    if opening is not None:
        finish(False)
    return blocks


def _is_python(block: _Block) -> bool:
    if not block.code.strip():
        return False
    if block.tag:
        return block.tag.lower() in _PYTHON_TAGS
    if _LOOKS_PYTHON.search(block.code):
        return True
    # "nvcc --version" or a bare word parses as an expression: ask for a statement.
    tree = _parse(block.code)
    return tree is not None and any(not isinstance(node, ast.Expr) for node in tree.body)


def _cut_off(block: _Block) -> str | None:
    """Why an unclosed block looks cut off, or None when it is whole."""
    error = _parse_error(block.code, block.first_line)
    if error:
        return f"does not parse: {error}"
    tree = _parse(block.code)
    assert tree is not None  # _parse_error found no error, so the code parses
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ModelNew"]
    if not classes:
        return "defines no class ModelNew: cut off before it"
    cls = classes[-1]
    # A subclass of something else may inherit forward; only a bare nn.Module cannot.
    inherits = any(ast.unparse(base) not in _MODULE_BASES for base in cls.bases)
    has_forward = any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.name == "forward"
        or isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "forward" for t in n.targets)
        for n in cls.body
    )
    if not (has_forward or inherits):
        return "its class ModelNew has no forward method: cut off inside the class"
    return None


def _raw_code(text: str, blocks: list[_Block], after_think: str) -> Extraction:
    if blocks:
        tags = ", ".join(sorted({b.tag or "untagged" for b in blocks}))
        refusal = f"no Python code block ({_plural(len(blocks), 'fenced block')}: {tags})"
    else:
        refusal = "no Python code block"
    if _parse(text) is not None:
        if _MODELNEW.search(text):
            return Extraction(_finish(text), f"no code fence; the whole completion is Python{after_think}", "ok")
        return Extraction(None, f"{refusal}; the text parses as Python but defines no class ModelNew", "no_code")
    lines = text.split("\n")
    broken = ""
    for i, line in enumerate(lines):
        if not line.startswith(("import ", "from ")):
            continue
        suffix = "\n".join(lines[i:])
        if not _MODELNEW.search(suffix):
            break  # every later suffix is part of this one
        error = _parse_error(suffix, i + 1)
        if error is None:
            prose = _plural(sum(1 for line in lines[:i] if line.strip()), "line")
            how = f"no code fence; Python from line {i + 1} to the end, after {prose} of prose{after_think}"
            return Extraction(_finish(suffix), how, "ok")
        broken = broken or f" (from line {i + 1} it defines ModelNew but does not parse: {error})"
    return Extraction(None, f"{refusal} and the text is not Python{broken}", "no_code")


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _parse_error(code: str, first_line: int) -> str | None:
    """The parse error on one line, located in the code and in the completion."""
    try:
        ast.parse(code)
    except SyntaxError as e:
        msg = " ".join(str(e.msg).split())
        if not e.lineno:
            return msg
        return f"{msg} at line {e.lineno} (line {e.lineno + first_line - 1} of the completion)"
    except (ValueError, RecursionError, MemoryError) as e:
        return " ".join(str(e).split()) or type(e).__name__
    return None


def _finish(code: str) -> str:
    code = re.sub(r"\A(?:[ \t]*\n)+", "", code)
    return code.rstrip() + "\n"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
