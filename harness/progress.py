"""Progress on stderr: a rich progress bar on a terminal, one plain line per candidate otherwise."""
from __future__ import annotations

import sys
from typing import Any, Optional

from harness.records import CandidateRecord


class Progress:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.live = sys.stderr.isatty() and not quiet
        self._bar: Any = None
        self._task: Optional[int] = None
        self._done = 0
        self._total = 0
        self._problem = ""

    def __enter__(self) -> "Progress":
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def message(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def problem(self, name: str, total: int) -> None:
        self._done, self._total, self._problem = 0, total, name
        if self._bar is not None:
            self._task = self._bar.add_task(name, total=total)
        else:
            self.message(f"{name}: {total} candidate(s)")

    def started(self, candidate: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"{self._problem} [dim]{candidate}[/]")

    def finished(self, record: CandidateRecord) -> None:
        self._done += 1
        speed = f", {record.speedup:.2f}x" if record.speedup else ""
        line = f"  [{self._done}/{self._total}] {record.candidate}: {record.status.value}{speed} - {record.reason}"
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task)
            self._bar.update(self._task, description=self._problem)
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            self.message(line)
