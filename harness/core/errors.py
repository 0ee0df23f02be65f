"""The user-error and resource-error types and the process exit codes (an API: documented in the README)."""

from __future__ import annotations

import enum
import errno
import os
import re
from typing import Optional


class ExitCode(enum.IntEnum):
    OK = 0  # every evaluated candidate is correct (candidates that need CUDA on a CPU run are skipped)
    USAGE = 1  # bad command line, config, problem name or input file
    CANDIDATES_FAILED = 2  # at least one candidate got a failing status (or an ingest refused a file)
    REGRESSION = 3  # the regression gate failed (run.py gate, or run.py --gate)
    INTERNAL = 4  # the reference itself failed, or the harness hit a bug
    RESOURCES = 5  # the machine lacks resources: too little free disk before the run, or no space left during it
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; records written so far are kept


class UserError(Exception):
    """A problem with what the user asked for. main() prints `error: <message>` and exits 1."""


class ResourceError(Exception):
    """The machine lacks what a run needs (free disk). main() prints `harness error: <message>` and exits 5."""


# What str.splitlines() breaks a line at; one_line writes each as an escape, as Python's repr does.
LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and its whole message, each line break in it written as an
    escape (`\\n`, `\\r`, `\\u2028`), at most `limit` characters."""
    text = LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], str(exc).strip())
    return f"{type(exc).__name__}: {text}"[:limit] if text else type(exc).__name__


def flat(text: str, limit: int = 400) -> str:
    """A reason as one line: runs of whitespace (newlines too) become one space, cut at `limit`."""
    line = " ".join(text.split())
    return line[:limit] if line else "no reason given"


NO_SPACE_TEXTS = (
    "No space left on device",  # strerror(ENOSPC), also inside messages that wrap it
    "unexpected pos",  # torch.save's writer (inline_container.cc) when a write came up short: a full disk
)


def no_space(exc: BaseException) -> Optional[str]:
    """`no space left on device (<path>)` when `exc` (or the exception it was raised from or
    while handling) means the disk is full; else None."""
    seen: set[int] = set()
    current_exc: Optional[BaseException] = exc
    while current_exc is not None and id(current_exc) not in seen:
        seen.add(id(current_exc))
        if isinstance(current_exc, OSError) and current_exc.errno == errno.ENOSPC:
            where = current_exc.filename
            return (
                "no space left on device "
                f"({os.fsdecode(where) if isinstance(where, (str, bytes, os.PathLike)) else 'unknown path'})"
            )
        text = str(current_exc)
        if any(marker in text for marker in NO_SPACE_TEXTS):
            return "no space left on device (unknown path)"
        current_exc = current_exc.__cause__ or current_exc.__context__
    return None
