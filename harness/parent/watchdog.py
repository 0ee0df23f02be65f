"""The run's watchdog: a small process of its own session that continues the run's process when
something stopped it (a candidate's SIGSTOP to its parent, where no layer refuses that signal:
Landlock before ABI 6, mount, hash, off). A stopped run would otherwise wait until something outside
sent SIGCONT: a hang, with every limit stopped with it.

It polls the parent's state; a parent stopped for `grace` seconds is continued, and a note on stderr
says so. An interactive run (its stdin a terminal) gets no watchdog: Ctrl-Z there is the user's, and
a stopped job is theirs to continue. It ends when its parent does (the pid's start time tells a
reused pid apart). Its own session keeps it out of a signal sent to the run's process group; a
candidate that finds the watchdog and stops it first is the limit docs/integrity.md names.

    python -m harness.parent.watchdog PID START_TIME GRACE_S
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from harness.parent.scratch import process_start_time

POLL_S = 0.2
GRACE_S = 5.0  # how long the run's process may stay stopped before it is continued


def state(pid: int) -> str:
    """The process's state letter (field 3 of /proc/<pid>/stat); "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2 :].split()[0]


def watch(pid: int, start: int, grace: float) -> int:
    """Continue `pid` each time it has been stopped for `grace` seconds, until it is gone; how many times."""
    continued = 0
    stopped_at: Optional[float] = None
    while process_start_time(pid) == start:
        if state(pid) == "T":  # stopped by a signal ("t", a tracer's stop, is left alone)
            stopped_at = stopped_at if stopped_at is not None else time.monotonic()
            if time.monotonic() - stopped_at >= grace:
                os.kill(pid, signal.SIGCONT)
                continued += 1
                print(
                    f"note: the run (pid {pid}) was stopped by a signal for {time.monotonic() - stopped_at:.0f} s "
                    "(a candidate's SIGSTOP?); the watchdog continued it",
                    file=sys.stderr,
                    flush=True,
                )
                stopped_at = None
        else:
            stopped_at = None
        time.sleep(POLL_S)
    return continued


def start(grace: float = GRACE_S) -> Optional[subprocess.Popen[bytes]]:
    """Start the watchdog of this process (None where there is no /proc, or the run is interactive)."""
    me = os.getpid()
    began = process_start_time(me)
    if began is None or sys.stdin is None or sys.stdin.isatty():
        return None
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.parent.watchdog", str(me), str(began), str(grace)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the run's process group does not stop it too
            env=env,
        )
    except OSError:
        return None


def stop(proc: Optional[subprocess.Popen[bytes]]) -> None:
    if proc is None:
        return
    proc.kill()
    proc.wait()


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
