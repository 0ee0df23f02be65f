"""The command line names itself as it was started (`run.py`, `kernel-harness`, `python3 -m harness`),
and an interrupted run ends with the one line that resumes it."""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness import __version__
from harness.__main__ import main
from harness.commands.run import resume_line
from harness.core.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "3_Linear_BatchNorm"  # problems/level0: a tiny CPU problem
# Its torch-only candidate, held in its constructor for a minute: longer than the bound below, so a run that ignored
# the SIGINT could not end within it.
HELD = (ROOT / "solutions" / PROBLEM / "functional.py").read_text().replace(
    "        super().__init__()\n", "        super().__init__()\n        import time\n        time.sleep(60)\n", 1
)


def _version(*command: str) -> str:
    done = subprocess.run([sys.executable, *command, "--version"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[0]


def test_version_names_the_program_as_it_was_started(monkeypatch, capsys):
    assert _version("run.py") == f"run.py {__version__}"
    assert _version("-m", "harness") == f"{Path(sys.executable).name} -m harness {__version__}"
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kernel-harness", "--version"])  # the installed script's argv
    assert main() == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"kernel-harness {__version__}"
    assert lines[-1].startswith("boundary around candidates: ") and "hash" in lines[-1]  # the environment lines follow


def test_the_resume_line_repeats_the_command_with_resume_in_place_of_the_run_id():
    argv = ["run", "--all", "--run-id", "r1", "--set", "check.trials=3", "--results", "my results"]
    expected = "interrupted: resume with python3 run.py --all --set check.trials=3 --results 'my results' --resume r1"
    assert resume_line("run.py", argv, "r1") == expected
    again = ["--problem", "37", "--resume=results/r1"]
    assert resume_line("kernel-harness", again, "r1") == (
        "interrupted: resume with kernel-harness --problem 37 --resume r1"
    )
    assert resume_line("python3 -m harness", ["--all"], "r2").endswith(" python3 -m harness --all --resume r2")


def started_as_a_foreground_job(command: list[str], **popen: Any) -> "subprocess.Popen[str]":
    """`command` started with SIGINT at its default disposition, as a terminal's foreground job has it, whatever
    this process has. A test runner started with `&` by a non-interactive shell (a CI script running the README's
    command beside the heavy one) has SIGINT ignored, and a child inherits an ignored signal across exec; Python then
    installs no KeyboardInterrupt handler, and the run ignores the SIGINT a test sends it: it did not end within 60 s
    (its candidate held on), a failure of the test's setup, not of the run. A handled signal is reset to its default
    by exec, so SIGINT is handled here while the child starts."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, **popen)
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def test_a_run_started_by_a_test_runner_that_ignores_sigint_still_handles_it():
    """The Ctrl-C test's run gets a SIGINT it handles, also under a runner started in the background of a script."""
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `python3 -m pytest &` in a non-interactive shell
    try:
        inherited = subprocess.run(probe, capture_output=True, text=True, timeout=60).stdout.strip()
        started = started_as_a_foreground_job(probe, stdout=subprocess.PIPE, text=True)
        handled = started.communicate(timeout=60)[0].strip()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # this process's own disposition is left as it was
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (inherited, handled) == ("False", "True")


def _session_processes(sid: int) -> str:
    """`pid state SigIgn SigBlk command` of each process still in session `sid` (the run and what it started there);
    SigIgn and SigBlk are the masks of ignored and blocked signals (SIGINT: 0x2)."""
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            if entry.name.isdigit() and int(fields[3]) == sid:
                masks = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                lines.append(
                    f"{entry.name} {fields[0]} SigIgn={masks['SigIgn'].strip()} SigBlk={masks['SigBlk'].strip()} "
                    f"{command[:200]}"
                )
        except (OSError, ValueError, IndexError, KeyError):
            continue
    return "\n".join(lines)


def ended_after_sigint(process: "subprocess.Popen[str]", bound: float) -> str:
    """The stderr of `process` (started with -X faulthandler, in a session of its own) once it has ended
    after SIGINT. One still running after `bound` seconds fails the test with where it sits: the
    processes of its session with their signal masks, and every thread's stack (faulthandler's dump on SIGABRT)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=bound)[1]
    except subprocess.TimeoutExpired:
        pass
    running = process.poll() is None
    processes = _session_processes(process.pid)
    if running:
        process.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to stderr, then it aborts
    try:
        err = process.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired as exc:  # something else holds its stderr open
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
    pytest.fail(
        f"run.py {'did not end' if running else 'ended, but its stderr stayed open,'} within {bound:g} s of SIGINT"
        f"\nprocesses of its session:\n{processes}\nits stderr (with the thread dump):\n{err}"
    )


# From the SIGINT to the run's exit, measured on 2 cores (2026-11-28): 0.5-0.7 s alone, 0.5-1.6 s in 131 runs beside
# the README's and the heavy command, 3.3-4.6 s among eight busy processes of their own sessions. 60 s is 13 times
# the slowest: a run still there after it hangs.
ENDS_WITHIN_S = 60


@pytest.mark.slow
def test_ctrl_c_during_a_run_ends_with_the_line_that_resumes_it(tmp_path):
    held = tmp_path / "solutions" / PROBLEM / "held.py"
    held.parent.mkdir(parents=True)
    held.write_text(HELD)
    args = [
        "--solution", str(held), "--device", "cpu", "--no-timing", "--results", str(tmp_path / "results"),
        "--set", f"build_cache_dir={tmp_path / 'builds'}",
        "--set", f"measurement_cache_dir={tmp_path / 'measurements'}",
        "--set", "baselines.compile_modes=[]", "--set", "check.trials=1",
    ]
    records = tmp_path / "results" / "held" / "records.jsonl"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = started_as_a_foreground_job(
        [sys.executable, "-X", "faulthandler", str(ROOT / "run.py"), *args, "--run-id", "held"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )

    def evaluating() -> bool:  # the reference has its record: the held candidate is next
        return records.is_file() and '"kind": "reference"' in records.read_text()

    try:
        deadline = time.monotonic() + 120
        while not evaluating() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert evaluating(), f"run.py exited ({process.returncode}) first"
        err = ended_after_sigint(process, ENDS_WITHIN_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert err.splitlines()[-1] == f"interrupted: resume with python3 run.py {shlex.join(args)} --resume held"
    assert "Traceback" not in err, err  # what the stop ended (a refused worker, a killed judge) is no harness bug
