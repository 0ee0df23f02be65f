"""A slot for one process started ahead and kept by its owner until used: compute-sanitizer's next
run (harness.parent.sanitize.Prestarted), which a lane's launcher keeps across the lane's problems.
The run that readies after one candidate's memcheck then serves the lane's next candidate, of
whichever problem: a problem's own would end unused with its last candidate, and would start beside
the next problem's judge."""

from __future__ import annotations

import subprocess
import threading
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar


class Spare(Protocol):
    """A process started ahead: alive while `proc` runs; `discard()` ends it and removes what it left."""

    proc: subprocess.Popen[bytes]

    def discard(self) -> None: ...


SpareT = TypeVar("SpareT", bound=Spare)


class SpareSlot(Generic[SpareT]):
    """At most one process started ahead, with the `key` it was started for: `take(key)` hands it
    over when it is still alive and was started for that key, and discards it otherwise. Thread-safe;
    its owner closes it when it ends, and a closed slot starts nothing more."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Optional[tuple[tuple[Any, ...], SpareT]] = None
        self._closed = False

    @property
    def spare(self) -> Optional[SpareT]:
        held = self._held
        return held[1] if held is not None else None

    def take(self, key: tuple[Any, ...]) -> Optional[SpareT]:
        """The process started ahead for `key`, still alive, now the caller's; None when there is none
        (one for another key, or one that died waiting, is discarded)."""
        with self._lock:
            held, self._held = self._held, None
        if held is None:
            return None
        if held[0] == key and held[1].proc.poll() is None:
            return held[1]
        held[1].discard()
        return None

    def fill(self, key: tuple[Any, ...], start: Callable[[], SpareT]) -> None:
        """Start one ahead for `key` (`start()`) unless a live one for it is waiting or the slot is closed."""
        with self._lock:
            held = self._held
            if self._closed or (held is not None and held[0] == key and held[1].proc.poll() is None):
                return
            self._held = None
        if held is not None:
            held[1].discard()
        started = start()
        with self._lock:
            if self._closed:  # closed while it started: nothing would end it
                held = (key, started)
            else:
                held, self._held = self._held, (key, started)
        if held is not None:  # another thread filled it meanwhile, or the slot closed
            held[1].discard()

    def discard(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held[1].discard()

    def close(self) -> None:
        """Discard what it holds, and start nothing more (its owner ended: a stopped or finished lane)."""
        with self._lock:
            self._closed = True
        self.discard()
