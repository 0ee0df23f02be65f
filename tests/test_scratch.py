"""Run-owned scratch and disk space: a run removes its scratch folder however it ends (SIGKILL
aside, whose leftovers the next run sweeps), SIGTERM is an interruption, and a full disk or too
little free disk is one line and exit code 5."""
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.core.errors import ExitCode, ResourceError, no_space
from harness.core.records import RunEnd, RunHeader
from harness.core.store import RunStore
from harness.parent import scratch

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "3_Linear_BatchNorm"  # problems/level0: a tiny CPU problem
CANDIDATE = ROOT / "solutions" / PROBLEM / "functional.py"
# The same candidate, held in its constructor: it writes its pid to $HARNESS_TEST_STARTED, then waits.
HELD = CANDIDATE.read_text().replace(
    "        super().__init__()\n",
    "        super().__init__()\n        import os, time\n"
    "        with open(os.environ['HARNESS_TEST_STARTED'], 'w') as f:\n            f.write(str(os.getpid()))\n"
    "        time.sleep(60)\n",
    1,
)


def _args(tmp_path, candidate=CANDIDATE, *extra):
    return [
        "--solution", str(candidate), "--device", "cpu", "--no-timing",
        "--results", str(tmp_path / "results"),
        "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}",
        "--set", "baselines.compile_modes=[]", "--set", "check.trials=1", *extra,
    ]


def _start(tmp_path, *args, **env):
    """A real `python3 run.py` whose TMPDIR (so its scratch base) is tmp_path."""
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _run_folders(base: Path) -> list[Path]:
    return sorted(base.glob("run-*")) if base.is_dir() else []


def _wait_for(condition, process=None, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"run.py exited ({process.returncode}) first: {process.stderr.read()}")
        time.sleep(0.02)
    raise AssertionError("timed out")


def _gone(pid: int) -> bool:
    return scratch.process_start_time(pid) is None


@pytest.mark.slow
def test_a_sigkilled_run_leaves_its_folder_and_the_next_sweep_removes_it_but_not_a_live_process_folder(tmp_path):
    base = tmp_path / "harness-scratch"
    process = _start(tmp_path, *_args(tmp_path), "--quiet")
    try:
        (folder,) = _wait_for(lambda: [f for f in _run_folders(base) if (f / "owner").is_file()], process)
        marker = json.loads((folder / "owner").read_text())
        assert folder.name.startswith(f"run-{process.pid}-") and len(folder.name.split("-")[2]) == 8
        assert marker == {"pid": process.pid, "start_time": scratch.process_start_time(process.pid)}
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert folder.is_dir()  # SIGKILL: nothing could remove it

    live = scratch.RunScratch.create(base)  # owned by this test's process, which is alive
    reused = base / "run-reused-pid"  # a live pid, but another process's start time: its owner is gone
    reused.mkdir()
    (reused / "owner").write_text(json.dumps({"pid": os.getpid(), "start_time": scratch.process_start_time(os.getpid()) - 1}))
    fresh_unmarked, old_unmarked = base / "run-fresh-unmarked", base / "run-old-unmarked"
    fresh_unmarked.mkdir()
    old_unmarked.mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(old_unmarked, (two_hours_ago, two_hours_ago))
    other = base / "not-a-run"
    other.mkdir()

    with scratch.RunScratch.create(base) as second:
        assert sorted(_run_folders(base)) == sorted([live.path, fresh_unmarked, second.path])
        assert other.is_dir()
    assert not second.path.exists() and live.path.is_dir()
    live.close()
    live.close()  # idempotent
    assert not live.path.exists()


@pytest.mark.slow
def test_sigterm_ends_a_real_run_like_ctrl_c_removes_its_scratch_and_exits_130(tmp_path):
    base = tmp_path / "harness-scratch"
    held = tmp_path / "solutions" / PROBLEM / "held.py"
    held.parent.mkdir(parents=True)
    held.write_text(HELD)
    started = tmp_path / "started"
    # no boundary: the candidate's marker lies outside the run's scratch
    process = _start(tmp_path, *_args(tmp_path, held, "--set", "sandbox.layer=off"), "--run-id", "termed", HARNESS_TEST_STARTED=str(started))
    try:
        _wait_for(lambda: started.is_file() and started.read_text(), process)  # the candidate's worker sits in its constructor
        worker = int(started.read_text())
        (folder,) = _run_folders(base)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert "terminated (SIGTERM): the leaderboard below covers the candidates finished so far" in err
    assert not folder.exists() and _run_folders(base) == []
    records = [json.loads(line) for line in (tmp_path / "results" / "termed" / "records.jsonl").read_text().splitlines()]
    assert records[0]["kind"] == "run" and records[0]["run_id"] == "termed"  # what was written is kept
    _wait_for(lambda: _gone(worker), timeout=10)  # the held worker was ended with the run


@pytest.mark.slow
@pytest.mark.parametrize("failing", [RunHeader, RunEnd])
def test_no_space_left_during_a_run_is_one_line_and_exit_5(failing, tmp_path, isolated_tmp, monkeypatch, capsys):
    full = str(tmp_path / "results" / "full" / "records.jsonl")
    append = RunStore.append

    def append_until_full(self, record):
        if isinstance(record, failing):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), full)
        append(self, record)

    monkeypatch.setattr(RunStore, "append", append_until_full)
    code = main([*_args(tmp_path), "--quiet", "--run-id", "full"])
    assert code == ExitCode.RESOURCES == 5
    assert capsys.readouterr().err == f"harness error: no space left on device ({full})\n"
    assert _run_folders(isolated_tmp) == []  # the run's scratch went too
    if failing is RunEnd:  # everything before the full disk is kept
        kinds = [json.loads(line)["kind"] for line in Path(full).read_text().splitlines()]
        assert kinds[0] == "run" and "candidate" in kinds


def test_no_space_recognises_enospc_its_message_and_torch_full_disk_text_and_nothing_else():
    assert no_space(OSError(errno.ENOSPC, "No space left on device", "/data/x.pt")) == "no space left on device (/data/x.pt)"
    assert no_space(OSError(errno.ENOSPC, "No space left on device")) == "no space left on device (unknown path)"
    assert no_space(RuntimeError("write failed: [Errno 28] No space left on device")) == "no space left on device (unknown path)"
    assert no_space(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")) == "no space left on device (unknown path)"
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/y.pt")
        except OSError as exc:
            raise RuntimeError("saving outputs failed") from exc
    except RuntimeError as wrapped:
        assert no_space(wrapped) == "no space left on device (/data/y.pt)"
    for other in (OSError(errno.EACCES, "Permission denied", "/data/x.pt"), RuntimeError("boom"), ValueError("pos 3"), KeyboardInterrupt()):
        assert no_space(other) is None


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_torch_save_on_a_full_device_is_recognised():
    import torch

    with pytest.raises(BaseException) as raised:
        torch.save(torch.zeros(4096), "/dev/full")  # /dev/full: every write fails with ENOSPC
    assert no_space(raised.value) is not None, raised.value
    with pytest.raises(OSError) as raised, open("/dev/full", "wb") as f:
        torch.save(torch.zeros(4096), f)
    assert no_space(raised.value) == "no space left on device (unknown path)"


def test_too_little_free_disk_stops_the_run_before_it_writes_anything(tmp_path, isolated_tmp, monkeypatch, capsys):
    monkeypatch.setattr(scratch, "free_disk_bytes", lambda path: 300 * scratch.MIB)
    assert main([*_args(tmp_path), "--quiet"]) == ExitCode.RESOURCES
    assert capsys.readouterr().err == (
        f"harness error: not enough free disk: 0.3 GB free at {tmp_path}, the run needs at least 1.0 GB (limits.min_free_disk_mb)\n"
    )
    assert not (tmp_path / "results").exists() and _run_folders(isolated_tmp) == []


def test_a_huge_min_free_disk_setting_gives_one_line_and_exit_5_and_0_turns_the_check_off(tmp_path, isolated_tmp, capsys):
    assert main([*_args(tmp_path), "--quiet", "--set", "limits.min_free_disk_mb=1000000000000"]) == ExitCode.RESOURCES
    err = capsys.readouterr().err
    assert re.fullmatch(r"harness error: not enough free disk: [\d.]+ GB free at \S+, the run needs at least [\d.]+ GB \(limits\.min_free_disk_mb\)\n", err)
    with pytest.raises(ResourceError):
        scratch.check_free_disk([tmp_path / "not" / "made" / "yet"], scratch.free_disk_bytes(tmp_path) + (1 << 40))
    scratch.check_free_disk([tmp_path], 0)
    assert main([*_args(tmp_path), "--quiet", "--set", "limits.min_free_disk_mb=-1"]) == ExitCode.USAGE
    assert "limits.min_free_disk_mb" in capsys.readouterr().err


def test_a_sessions_scratch_exists_while_it_is_open_and_is_gone_after_it_closes(make_config, isolated_tmp):
    from harness import api

    with api.Session(make_config()) as session:
        own = session.resources.scratch
        assert own.path.parent == isolated_tmp and own.path.is_dir() and (own.path / "owner").is_file()
        part = own.make("part-")
        assert part.is_dir()
    assert not own.path.exists() and _run_folders(isolated_tmp) == []
    with pytest.raises(RuntimeError):
        own.make("late-")


def test_a_run_scratch_gives_fresh_folders_and_closing_it_twice_is_harmless(tmp_path):
    with scratch.RunScratch.create(tmp_path) as own:
        first, second = own.make("out-"), own.make("out-")
        assert first != second and first.parent == own.path and first.is_dir()
    assert not own.path.exists() and own.closed
    own.close()
    with pytest.raises(RuntimeError):
        own.make("late-")


def _detached_sleeper(folder: Path, mark: str) -> subprocess.Popen:
    """A process a candidate detached: its own session, its TMPDIR inside the run's scratch."""
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(folder / "tmp")}
    sleeper = subprocess.Popen(["sleep", mark], env=env, start_new_session=True)
    # Popen may return while the child's exec is still setting up its environment (vfork): wait until /proc shows it
    deadline = time.monotonic() + 10
    while str(folder).encode() not in Path(f"/proc/{sleeper.pid}/environ").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return sleeper


def test_closing_a_run_ends_the_processes_its_candidates_left_however_detached(tmp_path):
    run = scratch.RunScratch.create(tmp_path)
    sleeper = _detached_sleeper(run.path, "4243.1")
    unrelated = subprocess.Popen(["sleep", "4243.2"], start_new_session=True)  # not the run's: left alone
    try:
        run.close()
        assert sleeper.wait(timeout=10) == -signal.SIGKILL and run.ended == 1
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


def test_the_next_run_ends_what_a_killed_run_left_running_and_says_so(tmp_path):
    stale = tmp_path / "run-999999-deadbeef"
    stale.mkdir()
    (stale / "owner").write_text(json.dumps({"pid": 999999}))  # no such process: its run was killed
    sleeper = _detached_sleeper(stale, "4243.3")
    run = scratch.RunScratch.create(tmp_path)
    try:
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert run.notes == ("ended 1 process(es) that an earlier run (pid 999999, killed) left running",)
        assert not stale.exists()
    finally:
        run.close()
