"""Progress on stderr: a rich progress bar on a terminal, one plain line per candidate otherwise.

Every finished candidate's line ends with the run so far: done of total, failures, the build
pool's state (built of submitted, when builds run ahead) and an estimate of the time left (from the
second finished candidate on: the first one carries the run's start-up, its first builds and reference).
Names and reasons are shown literally: never read as rich markup, their control characters
written as escapes (harness.views.text.visible).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

from harness.core.records import CandidateRecord
from harness.views.text import terminal_text, visible


class Progress:
    def __init__(
        self,
        quiet: bool = False,
        total: int = 0,
        builds: Optional[Callable[[], tuple[int, int]]] = None,
        clock: Callable[[], float] = time.monotonic,  # seconds, for the estimate of the time left
    ) -> None:
        self.quiet = quiet
        self.run_total = total  # candidates in the whole run
        self.run_done = 0
        self.evaluating = 0  # started, not finished (several at once when a run has several lanes)
        self.failed = 0
        self.builds = builds  # () -> (finished builds, submitted builds)
        self.clock = clock
        self.first_finished_at: Optional[float] = None  # the clock when the first candidate finished
        self.live = sys.stderr.isatty() and not quiet
        self._bar: Any = None
        self._task: Optional[int] = None
        self._done = 0
        self._total = 0
        self._problem = ""

    def __enter__(self) -> "Progress":
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            from harness.views.terminal import terminal_console

            self._bar = RichProgress(
                TextColumn("{task.description}", markup=False),
                TextColumn("{task.fields[candidate]}", markup=False, style="dim"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=terminal_console(stderr=True),
                transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def message(self, text: str) -> None:
        """A line on stderr, shown literally (its line breaks kept, other control characters escaped)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(terminal_text(text, keep_newlines=True))
        else:
            print(visible(text, keep_newlines=True), file=sys.stderr, flush=True)

    def problem(self, name: str, total: int) -> None:
        self._done, self._total, self._problem = 0, total, visible(name)
        if self._bar is not None:
            self._task = self._bar.add_task(self._problem, total=total, candidate="")
        else:
            self.message(f"{self._problem}: {total} candidate(s)")

    def started(self, candidate: str) -> None:
        self.evaluating += 1
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, candidate=visible(candidate))

    def overall(self) -> str:
        """ "run 3/40, 2 evaluating, 35 queued, 1 failed, builds 12/40, ETA 4m10s": the whole run at a glance."""
        parts = [f"run {self.run_done}/{self.run_total}" if self.run_total else f"run {self.run_done}"]
        if self.evaluating > 1:
            parts.append(f"{self.evaluating} evaluating")
        queued = self.run_total - self.run_done - self.evaluating
        if self.run_total and queued > 0:
            parts.append(f"{queued} queued")
        parts.append(f"{self.failed} failed")
        if self.builds is not None:
            built, submitted = self.builds()
            parts.append(f"builds {built}/{submitted}")
        seconds = self.seconds_left()
        if seconds is not None:
            parts.append(f"ETA {int(seconds // 60)}m{int(seconds % 60):02d}s")
        return ", ".join(parts)

    def seconds_left(self) -> Optional[float]:
        """The time the candidates left will take at the rate since the first one finished; None
        before a second one has (the first carries the one-off start-up) or when none is left."""
        left = self.run_total - self.run_done
        if self.first_finished_at is None or self.run_done < 2 or left <= 0:
            return None
        elapsed = self.clock() - self.first_finished_at
        return elapsed / (self.run_done - 1) * left if elapsed > 0 else None

    def finished(self, record: CandidateRecord) -> None:
        self.evaluating = max(self.evaluating - 1, 0)
        self._done += 1
        self.run_done += 1
        if self.first_finished_at is None:
            self.first_finished_at = self.clock()
        self.failed += record.decision.status.is_failure
        speed = f", {record.timing.speedup:.2f}x" if record.timing.speedup else ""
        name, status = visible(record.identity.candidate), record.decision.status.value
        head = f"  [{self._done}/{self._total}] {name}: {status}{speed}"
        tail = f" ({self.overall()})"
        reason = shortened(visible(record.decision.reason), line_width() - len(head) - len(tail) - 3)
        line = f"{head} - {reason}{tail}"
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task)
            self._bar.update(self._task, candidate="")
        self.message(line)


MIN_REASON = 24  # characters of a reason kept however narrow the terminal


def line_width() -> int:
    """The width a progress line fits: the terminal's ($COLUMNS, else the terminal's own, else 120)."""
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def shortened(text: str, room: int) -> str:
    """`text` cut to `room` characters (at least MIN_REASON), an ellipsis marking the cut; the record keeps it whole."""
    room = max(room, MIN_REASON)
    return text if len(text) <= room else text[: room - 1] + "…"
