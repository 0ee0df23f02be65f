"""The command line names itself as it was started (`run.py`, `kernel-harness`, `python3 -m harness`),
and an interrupted run ends with the one line that resumes it."""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import __version__
from harness.__main__ import main
from harness.commands.run import resume_line
from harness.core.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "3_Linear_BatchNorm"  # problems/level0: a tiny CPU problem
# Its torch-only candidate, held in its constructor for a minute.
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
    process = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, "--run-id", "held"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def evaluating() -> bool:  # the reference has its record: the held candidate is next
        return records.is_file() and '"kind": "reference"' in records.read_text()

    try:
        deadline = time.monotonic() + 120
        while not evaluating() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert evaluating(), f"run.py exited ({process.returncode}) first"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert err.splitlines()[-1] == f"interrupted: resume with python3 run.py {shlex.join(args)} --resume held"
