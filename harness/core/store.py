"""The result store: results/<run_id>/records.jsonl, one JSON line per record, written as it lands.

The first line is the run header. Each record is flushed and fsync'ed as soon as its candidate is
done, so a run that is interrupted or killed keeps every verdict it reached.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from harness.core.errors import UserError
from harness.core.records import CandidateRecord
from harness.core.schema import LineError, decode_line, encode_line

RECORDS_FILE = "records.jsonl"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class RunStore:
    def __init__(self, results_dir: Path, run_id: str) -> None:
        self.run_id = run_id
        self.dir = results_dir / run_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records_path = self.dir / RECORDS_FILE
        self._lock = threading.Lock()  # lanes append from their own threads
        self._written: list[Any] = []  # what this process appended, in order
        # the records file as this process last left it (size, modification and change time); None
        # before its first append
        self._left: Any = None

    @property
    def has_records(self) -> bool:
        return self.records_path.is_file() and self.records_path.stat().st_size > 0

    def drop_partial_line(self) -> bool:
        """Cut a last line that a killed run left unfinished (no newline); True when one was cut.
        Every finished record was fsync'ed with its newline, so nothing finished is lost."""
        if not self.has_records:
            return False
        data = self.records_path.read_bytes()
        if data.endswith(b"\n"):
            return False
        with open(self.records_path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())
        return True

    def log_path(self, problem: str, candidate: str) -> Path:
        return self.dir / "logs" / problem / f"{candidate}.log"

    def append(self, record: Any) -> None:
        line = encode_line(record)
        with self._lock:
            with open(self.records_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
                self._written.append(record)
            self._left = self._fingerprint()

    def _fingerprint(self) -> tuple[int, int, int]:
        st = self.records_path.stat()
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def foreign(self) -> str:
        """What something other than this process did to the records file since its last append ("" when
        nothing): lines appended after this process's (a forged record) are cut; any other change is named.
        Under the landlock and mount layers a candidate cannot write here; under hash and off this is the check."""
        with self._lock:
            if self._left is None or not self.records_path.is_file():
                return ""
            now = self._fingerprint()
            if now == self._left:
                return ""
            size = self._left[0]
            if now[0] > size:
                with open(self.records_path, "r+b") as f:
                    f.truncate(size)
                    f.flush()
                    os.fsync(f.fileno())
                self._left = self._fingerprint()
                return f"appended {now[0] - size} bytes to {self.records_path} (cut)"
            self._left = now
            return f"changed {self.records_path} (its size {size} -> {now[0]} bytes)"

    @property
    def written(self) -> list[Any]:
        """The records this process appended, in order (a copy): what a run holds without reading its file back."""
        with self._lock:
            return list(self._written)

    def earlier(self) -> list[Any]:
        """The records already in the file, from an earlier process (a run being resumed)."""
        return read_records(self.records_path) if self.has_records else []


def resolve_run(value: str, results_dir: Path) -> Path:
    """The records file of a run given as a folder, a records (or baseline) file or a run id under `results_dir`."""
    path = Path(value)
    for option in (path, path / RECORDS_FILE, results_dir / value / RECORDS_FILE):
        if option.is_file():
            return option
    raise UserError(f"no run {value!r}: not a records file, a run folder or a run id with records in {results_dir}")


def read_records(path: Path) -> list[Any]:
    """Every record of a records file (or of a run folder), oldest first."""
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.is_file():
        raise UserError(f"no records file at {path}")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(decode_line(line))
        except LineError as exc:
            raise UserError(f"{path}:{number} {exc}") from None
    return records


def candidate_records(records: Iterable[Any]) -> list[CandidateRecord]:
    return [r for r in records if isinstance(r, CandidateRecord)]
