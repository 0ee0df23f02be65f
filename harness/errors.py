"""The user-error and resource-error types and the process exit codes (an API: documented in the README)."""

from __future__ import annotations

import enum


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


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and the first line of its message, at most `limit` characters."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:limit] if first else type(exc).__name__


def flat(text: str, limit: int = 400) -> str:
    """A reason as one line: runs of whitespace (newlines too) become one space, cut at `limit`."""
    line = " ".join(text.split())
    return line[:limit] if line else "no reason given"
