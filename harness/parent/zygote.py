"""The run's side of a lane's judge zygote (harness.judge.zygote, `workers.judge_zygote`): it starts the zygote, asks
it for judges and keeps what it says of each judge's end.

A judge the zygote forked is not this process's child, so it cannot be waited for here. `Forked` stands in for its
`subprocess.Popen`: its pid (its session's, as with `start_new_session`), `poll`, `wait` and `returncode` from the
zygote's word. A judge whose zygote has gone before saying how it ended is reaped here if it was handed to this process
(a subreaper), and otherwise reads `UNKNOWN_EXIT` once its pid is gone.

The zygote is started with the lane's environment, as its judges would be, pinned to the builds' CPUs and never
stopped (it only forks; a stopped zygote would hold up a lane's next judge). `close` ends it and whatever it still
runs in its own group; the judges, in sessions of their own, are ended by their clients as before.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from harness.parent.scratch import owner_alive
from harness.parent.sessions import end_session

ROOT = Path(__file__).resolve().parents[2]  # the harness's checkout, put on a judge's path

UNKNOWN_EXIT = 255  # a judge that ended after its zygote, which could no longer say how
MAX_MESSAGE = 1 << 20


class ZygoteUnavailable(RuntimeError):
    """The zygote could not fork a judge (not started, gone, or too slow): the caller starts one as before."""


def judge_env(env: Optional[dict[str, str]]) -> dict[str, str]:
    """A judge's environment: the run's, `env` over it, the harness on the path and output unbuffered."""
    full = dict(os.environ)
    full.update(env or {})
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    full["PYTHONUNBUFFERED"] = "1"
    return full


class Zygote:
    """One lane's zygote: `spawn` forks a judge from it (`ZygoteUnavailable` when it cannot)."""

    def __init__(self, env: Optional[dict[str, str]], log_path: Path, quiet: Any = None) -> None:
        self.quiet = quiet  # the run's QuietHost (harness.parent.quiet): pinned with the builds, never stopped
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.judge.zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                cwd=ROOT,
                env=judge_env(env),
            )
        theirs.close()
        if quiet is not None:
            quiet.register_background(self.proc, stoppable=False)
        self.ready: Optional[dict[str, Any]] = None  # its first word: its pid and threads once its imports were done
        self._pids: "queue.Queue[dict[str, Any]]" = queue.Queue()  # answers to spawn requests, in order
        self._exits: dict[int, int] = {}
        self._gone = False
        self._changed = threading.Condition()
        self._spawning = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="judge-zygote", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "exited" in message:
                with self._changed:
                    self._exits[int(message["exited"])] = int(message["code"])
                    self._changed.notify_all()
            elif "ready" in message:
                self.ready = message
            else:
                self._pids.put(message)
        with self._changed:
            self._gone = True
            self._changed.notify_all()
        self._pids.put({"error": "the zygote ended"})

    def spawn(self, cwd: Path, env: dict[str, str], fds: tuple[int, int, int], limit: float = 30.0) -> "Forked":
        """A judge forked in `cwd` with `env` (whole), on `fds`: its request pipe's read end, its reply pipe's
        write end, its log; the zygote's answer is awaited at most `limit` seconds. Refused at once while the
        zygote still imports (a judge started on its own then is no later than one forked after the imports)."""
        with self._spawning:
            if self._gone:
                raise ZygoteUnavailable("the zygote ended")
            if self.ready is None:
                raise ZygoteUnavailable("the zygote is still importing torch")
            try:
                socket.send_fds(self._sock, [json.dumps({"cwd": str(cwd), "env": env}).encode()], list(fds))
                answer = self._pids.get(timeout=limit)
            except OSError as exc:
                raise ZygoteUnavailable(f"the zygote could not be asked: {exc}") from exc
            except queue.Empty:
                self.close()  # an answer that comes later would be taken for the next request's
                raise ZygoteUnavailable(f"the zygote did not fork a judge within {limit:g} s") from None
        if "pid" not in answer:
            raise ZygoteUnavailable(str(answer.get("error", answer)))
        return Forked(int(answer["pid"]), self)

    def exit_code(self, pid: int, timeout: Optional[float] = 0.0) -> Optional[int]:
        """How judge `pid` ended, waiting up to `timeout` seconds (None: until it has); None while it runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                if pid in self._exits:
                    return self._exits[pid]
                if self._gone:
                    code = _reaped_here(pid)
                    if code is not None:
                        return code
                    if not owner_alive(pid, None):
                        return UNKNOWN_EXIT
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(timeout=0.2 if left is None else min(left, 0.2))

    def running(self) -> bool:
        return not self._gone and self.proc.poll() is None

    def close(self) -> None:
        """End the zygote: its end of the socket closes, and it ends; its group is killed should it not."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        end_session(self.proc.pid)
        self.proc.wait()
        if self.quiet is not None:
            self.quiet.unregister(self.proc)
        self._reader.join(timeout=5)
        self._sock.close()


class Forked:
    """A judge the zygote forked, as its client sees it: a `subprocess.Popen` for what a client asks of one."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: Optional[int] = None
        self._zygote = zygote

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            code = self._zygote.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(f"judge {self.pid}", timeout or 0.0)
            self.returncode = code
        return self.returncode


def _reaped_here(pid: int) -> Optional[int]:
    """How `pid` ended, when it was handed to this process (a subreaper, once its zygote had gone) and has ended."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None
