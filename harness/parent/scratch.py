"""Run-owned scratch space, free-disk checks, and telling a full disk from other failures.

Every run gets one folder, `<base>/run-<pid>-<8 hex>` (base: `$TMPDIR/harness-scratch`), with a
marker file `owner` that names the process owning it: its pid and, where /proc exists, its start
time (field 22 of /proc/<pid>/stat), so that a later process that happens to get the same pid is
not mistaken for the owner. A session makes the folder when it opens and removes it when it
closes (harness.parent.resources), interrupted or not. A run that could not (SIGKILL, a power
cut) leaves it behind, and the next one to start removes it: `RunScratch.create` first sweeps
every sibling whose owner is gone. A folder of a live process is never touched; a folder with no
readable marker is removed only once it is an hour old (its owner may be between creating it and
writing the marker). Processes go with the folder: closing a run ends every process whose
environment or working folder points into its scratch (what a candidate detached, when its worker
was killed before it could end it), and a sweep ends those of a stale folder first and says so.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from harness.core.errors import ResourceError, UserError

MARKER = "owner"
PREFIX = "run-"
UNMARKED_GRACE_S = 3600.0  # a folder without a readable marker is left alone for this long
MIB = 1 << 20
GIB = 1 << 30


def default_base() -> Path:
    """Where run folders go: `harness-scratch` in the system's temporary folder ($TMPDIR)."""
    return Path(tempfile.gettempdir()) / "harness-scratch"


def process_start_time(pid: int) -> Optional[int]:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None when there is no
    such process, it is a zombie, or /proc is missing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name (field 2) may hold spaces and parentheses
    try:
        if fields[0] in ("Z", "X"):  # field 3: exited, not yet reaped
            return None
        return int(fields[19])  # fields[0] is field 3
    except (IndexError, ValueError):
        return None


def _has_proc() -> bool:
    return Path(f"/proc/{os.getpid()}/stat").is_file()


def owner_alive(pid: int, start_time: Optional[int]) -> bool:
    """Whether the process a marker names still runs: the pid exists and, when the marker has a
    start time and /proc can tell, started at that time."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if _has_proc():
        now = process_start_time(pid)
        if now is None:
            return False
        return start_time is None or now == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def _read_marker(folder: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    return data


def sweep_stale(base: Path, now: Optional[float] = None) -> list[Path]:
    """Remove the `run-*` folders in `base` whose owner is gone (and unmarked ones over an hour
    old); returns those removed. Folders of live processes are never touched."""
    removed: list[Path] = []
    now = time.time() if now is None else now
    try:
        entries = list(Path(base).iterdir())
    except OSError:
        return removed
    for folder in entries:
        if not folder.name.startswith(PREFIX):
            continue
        try:
            if folder.is_symlink() or not folder.is_dir():
                continue
            age = now - folder.stat().st_mtime
        except OSError:
            continue
        marker = _read_marker(folder)
        if marker is not None:
            stale = not owner_alive(marker["pid"], marker.get("start_time"))
        else:
            stale = age > UNMARKED_GRACE_S
        if stale:
            shutil.rmtree(folder, ignore_errors=True)  # another run may be sweeping it too
            if not folder.exists():
                removed.append(folder)
    return removed


def processes_in(folder: Path) -> list[int]:
    """The processes (but this one) that belong to the run whose scratch is `folder`: their
    environment points into it (a candidate's processes get their TMPDIR and JIT caches there,
    harness.parent.boundary.candidate_env, and pass them on) or their working folder is inside it.
    Processes of other users, which /proc does not show, are not seen."""
    inside = str(Path(folder)) + os.sep
    found: list[int] = []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid()]
    except OSError:
        return found
    for entry in entries:
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            cwd = os.readlink(f"/proc/{entry}/cwd") + os.sep
        except OSError:
            continue
        if cwd.startswith(inside) or any(
            value.partition(b"=")[2].startswith(inside.encode()) for value in environ.split(b"\0")
        ):
            found.append(int(entry))
    return found


def end_processes_in(folder: Path) -> int:
    """Kill every process `processes_in(folder)` finds (a detached process a candidate left, which
    its worker could not end because it was killed itself); how many there were."""
    ended = 0
    for pid in processes_in(folder):
        try:
            os.kill(pid, signal.SIGKILL)
            ended += 1
        except (ProcessLookupError, PermissionError):
            continue
    return ended


def sweep_stale_processes(base: Path) -> list[str]:
    """End the processes that stale run folders in `base` (their owner gone: a run killed before it
    could clean up) still have; one line for each such folder, saying how many were ended."""
    said: list[str] = []
    try:
        entries = [e for e in Path(base).iterdir() if e.name.startswith(PREFIX) and e.is_dir() and not e.is_symlink()]
    except OSError:
        return said
    for folder in entries:
        marker = _read_marker(folder)
        if marker is None or owner_alive(marker["pid"], marker.get("start_time")):
            continue
        ended = end_processes_in(folder)
        if ended:
            said.append(f"ended {ended} process(es) that an earlier run (pid {marker['pid']}, killed) left running")
    return said


class RunScratch:
    """One run's scratch folder. `RunScratch.create()` sweeps stale siblings (their processes
    first) and makes it; `make(prefix)` hands out fresh subfolders; `close()` (or leaving a `with`
    block) ends whatever processes of the run are left and removes it."""

    def __init__(self, path: Path, pid: int, notes: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.pid = pid  # the owning process
        self.notes = notes  # what the sweep at its start did that a user should hear of
        self.ended = 0  # processes of the run that close() had to end
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def create(cls, base: Optional[Path] = None) -> "RunScratch":
        base = Path(base) if base is not None else default_base()
        pid = os.getpid()
        notes: list[str] = []
        try:
            base.mkdir(parents=True, exist_ok=True)
            notes = sweep_stale_processes(base)
            sweep_stale(base)
            while True:
                path = base / f"{PREFIX}{pid}-{secrets.token_hex(4)}"
                try:
                    path.mkdir(mode=0o700)  # only this user reads or changes what the run keeps here
                    break
                except FileExistsError:
                    continue
        except PermissionError:
            raise UserError(
                f"cannot make a scratch folder in {base} (set TMPDIR to a folder you can write to)"
            ) from None
        try:
            marker: dict[str, Any] = {"pid": pid}
            start_time = process_start_time(pid)
            if start_time is not None:
                marker["start_time"] = start_time
            partial = path / f".{MARKER}.tmp"
            partial.write_text(json.dumps(marker))
            os.replace(partial, path / MARKER)  # a sweeper never reads half a marker
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return cls(path, pid, tuple(notes))

    @property
    def closed(self) -> bool:
        return self._closed

    def make(self, prefix: str) -> Path:
        """A fresh, empty subfolder whose name starts with `prefix`."""
        if self._closed:
            raise RuntimeError(f"scratch {self.path} was already removed")
        return Path(tempfile.mkdtemp(dir=self.path, prefix=prefix))

    def close(self) -> None:
        """Remove the folder and everything in it, and the stale siblings of processes that ended
        during the run (a Ray lane's actor killed with it); a second call does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.ended = end_processes_in(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        sweep_stale_processes(self.path.parent)
        sweep_stale(self.path.parent)

    def __enter__(self) -> "RunScratch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunScratch({str(self.path)!r}{', closed' if self._closed else ''})"


def _nearest_existing(path: Path) -> Path:
    path = Path(path).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_disk_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem holding `path` (or its
    nearest existing ancestor, for a folder not made yet)."""
    return shutil.disk_usage(_nearest_existing(path)).free


def check_free_disk(paths: Iterable[Path], min_bytes: int) -> None:
    """Raise ResourceError when any of `paths` has less than `min_bytes` free (0: no check)."""
    if min_bytes <= 0:
        return
    for path in paths:
        free = free_disk_bytes(path)
        if free < min_bytes:
            raise ResourceError(
                f"not enough free disk: {free / GIB:.1f} GB free at {_nearest_existing(path)}, the run needs at "
                f"least {min_bytes / GIB:.1f} GB (limits.min_free_disk_mb)"
            )
