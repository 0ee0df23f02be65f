"""Ending a process that was started in a session of its own (`start_new_session=True`: a worker, a
judge, a build, a compute-sanitizer run) together with everything it started.

Killing its process group is not enough. ninja starts each compiler in a process group of its own (so
that Ctrl-C reaches ninja alone), and a candidate may call `setpgid` itself. Such processes would
outlive a killed build or worker: compilers burning CPU while lanes time, writing into folders
already removed. A process keeps its session across `fork` and `setpgid`, so the session finds them.
One that called `setsid` has left it; the run's scratch sweep (harness.parent.scratch) is the backstop
for those.
"""

from __future__ import annotations

import os
import signal


def session_members(session: int) -> list[int]:
    """The processes whose session id is `session` (this process excluded; /proc shows only what it may)."""
    found: list[int] = []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return found
    me = os.getpid()
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            # after the command's closing parenthesis: state, ppid, pgrp, session, ...
            if int(stat.rsplit(b")", 1)[1].split()[3]) == session and int(entry) != me:
                found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found


def end_session(leader: int) -> None:
    """SIGKILL `leader`'s process group, then every process left in its session (twice: a process that was
    forking as the first pass read /proc is caught by the second). A session that is gone is ignored."""
    if leader <= 1 or leader == os.getpid():
        return
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(2):
        members = session_members(leader)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
