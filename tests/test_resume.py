"""Resumable runs: a harness killed with SIGKILL loses nothing it had finished, and --resume
evaluates only what is missing."""
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.commands.run import resume_targets
from harness.core.errors import ExitCode
from harness.core.status import Status
from tests.records import candidate_record

pytestmark = pytest.mark.slow  # whole runs through run.py, one killed mid-run

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "3_Linear_BatchNorm"
HONEST = (ROOT / "solutions" / PROBLEM / "functional.py").read_text()
SLOW = HONEST.replace("        super().__init__()", "        super().__init__()\n        import os, time\n        if os.path.exists(os.environ.get('HARNESS_TEST_HOLD', '/nonexistent')):\n            time.sleep(30)")


def _args(tmp_path):
    return [
        "--problem", PROBLEM, "--quiet", "--device", "cpu",
        "--set", f"solutions_dir={tmp_path / 'solutions'}", "--results", str(tmp_path / "results"),
        "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}",
        "--set", "baselines.compile_modes=[]", "--set", "timing.budget_s=0.2", "--set", "timing.warmup_ms=5",
        "--set", "check.trials=2", "--set", "flags.no_custom_kernel=flag",  # torch-only stand-ins
    ]


def _candidates(records_path):
    lines = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    return [d["identity"]["candidate"] for d in lines if d["kind"] == "candidate"]


@pytest.fixture
def solutions(tmp_path):
    folder = tmp_path / "solutions" / PROBLEM
    folder.mkdir(parents=True)
    (folder / "a_first.py").write_text(HONEST)
    (folder / "b_held.py").write_text(SLOW)
    (folder / "c_last.py").write_text(HONEST)
    return folder


def test_sigkill_mid_run_keeps_finished_records_and_resume_does_only_the_rest(tmp_path, solutions, capsys):
    hold = tmp_path / "hold"
    hold.touch()
    records = tmp_path / "results" / "killed" / "records.jsonl"
    env = {**os.environ, "HARNESS_TEST_HOLD": str(hold)}
    process = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *_args(tmp_path), "--run-id", "killed"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (records.is_file() and "a_first" in _candidates(records)):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # while b_held sits in its constructor
    process.wait()
    assert _candidates(records) == ["a_first"]
    with open(records, "a") as f:
        f.write('{"kind": "candidate", "run_id": "killed", "probl')  # a write the kill cut short
    hold.unlink()

    capsys.readouterr()
    code = main([a for a in _args(tmp_path) if a != "--quiet"] + ["--resume", "killed"])
    assert code == ExitCode.OK
    assert sorted(_candidates(records)) == ["a_first", "b_held", "c_last"]  # a_first was not evaluated again
    err = capsys.readouterr().err
    assert "half-written line" in err and "1 candidate(s) already finished, 2 to evaluate" in err
    leaderboard = (tmp_path / "results" / "killed" / "leaderboard.csv").read_text()
    assert all(name in leaderboard for name in ("a_first", "b_held", "c_last"))


def test_a_changed_candidate_is_evaluated_again_on_resume(tmp_path, solutions):
    assert main([*_args(tmp_path), "--run-id", "r"]) == ExitCode.OK
    records = tmp_path / "results" / "r" / "records.jsonl"
    (solutions / "c_last.py").write_text(HONEST + "\n# edited\n")
    assert main([*_args(tmp_path), "--resume", "r"]) == ExitCode.OK
    assert sorted(_candidates(records)) == ["a_first", "b_held", "c_last", "c_last"]


def test_run_id_that_exists_or_resume_of_nothing_is_a_usage_error(tmp_path, solutions, capsys):
    (tmp_path / "results" / "r").mkdir(parents=True)
    (tmp_path / "results" / "r" / "records.jsonl").write_text("{}\n")
    assert main([*_args(tmp_path), "--run-id", "r"]) == ExitCode.USAGE
    assert "use --resume r" in capsys.readouterr().err
    assert main([*_args(tmp_path), "--resume", "nothing"]) == ExitCode.USAGE
    assert "no run with records" in capsys.readouterr().err


@pytest.mark.parametrize("status", list(Status))
def test_resume_keeps_every_record_with_a_status_and_redoes_only_a_harness_error(status):
    """A candidate's fault is its status, and a status is final: only `harness error` (ours) is
    evaluated again. The record's files must be the ones it was made of, as always."""
    problem = types.SimpleNamespace(name="p", hash="h")
    candidate = types.SimpleNamespace(name="c", hash="ch")
    earlier = [candidate_record(status=status, reason="why")]
    store = types.SimpleNamespace(earlier=lambda: earlier)
    left, kept, _ = resume_targets(store, [(problem, [candidate])])
    if status is Status.HARNESS_ERROR:
        assert (left, kept) == ([(problem, [candidate])], [])
    else:
        assert (left, kept) == ([], earlier)
