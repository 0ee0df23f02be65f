"""A process started in a session of its own is ended with everything it started, whatever process group each
is in (harness.parent.sessions): ninja puts every compiler in a group of its own, so a build that runs past its limit
must not leave its compilers running."""
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.parent.sessions import end_session, session_members

# a process that starts a child in a process group of its own (as ninja starts a compiler), says its pid, and waits
LEADER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], process_group=0)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether `pid` has ended (a zombie waiting for its parent counts) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_ending_a_session_ends_a_child_in_a_process_group_of_its_own_and_nothing_else():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(leader.stdout.readline())
        assert os.getpgid(child) == child != leader.pid  # its own group: a group kill of the leader misses it
        assert set(session_members(leader.pid)) == {leader.pid, child}
        end_session(leader.pid)
        leader.wait(timeout=10)
        assert gone(child), "the child in its own process group outlived its session's end"
        assert bystander.poll() is None  # another session is left alone
    finally:
        bystander.kill()
        bystander.wait()
        leader.kill()
        leader.wait()


def test_a_build_past_its_limit_leaves_no_compiler_running(tmp_path):
    from harness.core.records import AheadOutcome
    from harness.parent.prebuild import BuildAhead

    said = tmp_path / "compiler.pid"
    candidate = tmp_path / "slow_build.py"
    candidate.write_text(  # its import starts a "compiler" in a group of its own, as ninja does, and never returns
        "import subprocess, sys, time\n"
        "compiler = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], process_group=0)\n"
        f"open({str(said)!r}, 'w').write(str(compiler.pid))\n"
        "time.sleep(120)\n"
    )
    with contextlib.closing(BuildAhead(tmp_path / "cache", "cpu", builds=1, jobs_per_build=1, timeout=15)) as pool:
        pool.submit(candidate)
        outcome = pool.wait(candidate)
    assert outcome.outcome == AheadOutcome.TIMEOUT, outcome
    assert said.is_file(), "the build never reached its compiler"
    assert gone(int(said.read_text())), "the build's compiler outlived the build"
