"""A run's resources (harness.parent.resources.RunResources): a session opens its own scratch, quiet
host and build pool and releases them when it closes, however it ends; nothing of a run is left under
TMPDIR, and no process-wide scratch or quiet host remains."""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from harness import api
from harness.core.errors import ResourceError
from harness.core.status import Status
from harness.core.store import RunStore
from harness.parent import quiet, scratch
from harness.parent.evaluate import ProblemEvaluation
from harness.parent.supervise import Lane
from harness.parent.resources import Observer, RunResources
from harness.sources.problem import resolve_problem
from tests.sources import scale_bias_relu

PROBLEM = "1_Scale_Bias_ReLU"
SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def sleeper():
    """A process of its own group that sleeps; ended with the test."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True)
    yield proc
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def state(pid):
    """Field 3 of /proc/<pid>/stat: 'T' when stopped."""
    stat = open(f"/proc/{pid}/stat").read()
    return stat[stat.rfind(")") + 2 :].split()[0]


def eventually(check, seconds=15.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end and not check():
        time.sleep(0.02)
    return check()


def folders(base):
    return sorted(base.glob("run-*")) if base.is_dir() else []


def test_closing_releases_the_scratch_the_build_pool_and_the_quiet_host_and_a_second_close_is_harmless(make_config, isolated_tmp):
    resources = RunResources.open(make_config("builds.ahead=always", "timing.quiet=pause"), "cpu")
    assert resources.scratch.path.is_dir() and resources.scratch.path.parent == isolated_tmp
    assert resources.builds is not None and resources.builds.quiet is resources.quiet and resources.quiet.quiet_mode == "pause"
    resources.close()
    assert not resources.scratch.path.exists()
    with pytest.raises(RuntimeError):
        resources.builds.pool.submit(print)  # the pool takes no more builds
    with resources.quiet.hold():
        assert not resources.quiet.held  # a closed host stops nothing more
    resources.close()
    assert folders(isolated_tmp) == []


def test_without_builds_ahead_or_quiet_a_cpu_run_has_no_pool_and_an_off_host(make_config, isolated_tmp):
    with RunResources.open(make_config("timing.quiet=off"), "cpu") as resources:
        assert resources.builds is None and resources.quiet.quiet_mode == "off"
        assert resources.observer == Observer()
    assert folders(isolated_tmp) == []


def test_too_little_free_disk_opens_nothing(make_config, isolated_tmp, tmp_path):
    cfg = make_config("limits.min_free_disk_mb=1000000000000")
    with pytest.raises(ResourceError):
        RunResources.open(cfg, "cpu")
    assert folders(isolated_tmp) == [] and not cfg.path(cfg.results_dir).exists()


def test_two_resources_open_at_once_have_separate_scratches(make_config, isolated_tmp):
    cfg = make_config()
    with RunResources.open(cfg, "cpu") as first, RunResources.open(cfg, "cpu") as second:
        assert first.scratch.path != second.scratch.path and first.quiet is not second.quiet
        assert folders(isolated_tmp) == sorted([first.scratch.path, second.scratch.path])
        first.close()
        assert second.scratch.path.is_dir()  # closing one leaves the other's
    assert folders(isolated_tmp) == []


def test_two_sessions_in_one_process_get_separate_scratches(make_config, isolated_tmp):
    with api.Session(make_config()) as first:
        first_path = first.resources.scratch.path
        assert folders(isolated_tmp) == [first_path]
    with api.Session(make_config()) as second:
        assert second.resources.scratch.path != first_path
        assert folders(isolated_tmp) == [second.resources.scratch.path]  # the first one's went with it
    assert folders(isolated_tmp) == []


def test_a_sessions_scratch_and_quiet_host_are_released_when_its_block_raises(make_config, isolated_tmp, sleeper):
    holding, release = threading.Event(), threading.Event()
    with pytest.raises(RuntimeError, match="in the block"):
        with api.Session(make_config("timing.quiet=pause")) as session:
            own, host = session.resources.scratch, session.resources.quiet
            assert own.path.is_dir() and host.quiet_mode == "pause"
            host.register_background(sleeper)

            def lane():
                with host.hold():
                    holding.set()
                    release.wait(30)

            thread = threading.Thread(target=lane, daemon=True)
            thread.start()
            assert holding.wait(10) and eventually(lambda: state(sleeper.pid) == "T")
            raise RuntimeError("in the block")  # a lane still holds the host
    assert not own.path.exists() and folders(isolated_tmp) == []
    assert eventually(lambda: state(sleeper.pid) != "T")  # resumed, though the lane had not let go
    release.set()
    thread.join(10)
    with api.Session(make_config()):  # the session was released: another may open
        pass


def test_the_process_has_no_current_scratch_or_quiet_host():
    for module, names in ((scratch, ("current", "set_current")), (quiet, ("current", "set_current", "configure"))):
        assert not [name for name in names if hasattr(module, name)], module.__name__


def test_an_evaluation_uses_the_resources_and_lane_it_is_given_and_closes_neither(make_config, isolated_tmp):
    cfg = make_config()
    problem = resolve_problem(PROBLEM, cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "own")
    with RunResources.open(cfg, "cpu", store) as resources:
        lane = Lane.single(cfg, "cpu", quiet=resources.quiet, worker_env=resources.boundary.env)
        given = ProblemEvaluation(problem, [], cfg, "cpu", store, resources=resources, lane=lane)
        assert given.setting.scratch is resources.scratch and given.setting.quiet is resources.quiet
        assert given.sanitizer.scratch is resources.scratch and given.lane is lane
        given.close()
        assert resources.scratch.path.is_dir()  # the run's: its session removes it
        lane.launcher.close()
    assert folders(isolated_tmp) == []


@pytest.fixture
def own_tmpdir(tmp_path, monkeypatch):
    """TMPDIR (for this process and the processes it starts) is an empty folder of its own."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def left_under(folder):
    """What is under `folder` besides the (empty) scratch base."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p != folder / "harness-scratch")


@pytest.mark.slow
def test_nothing_is_left_under_tmpdir_after_a_run_through_run_py(make_config, tmp_path, own_tmpdir):
    from harness.commands.run import run, select_targets

    folder = tmp_path / "solutions" / PROBLEM
    folder.mkdir(parents=True)
    (folder / "honest.py").write_text(scale_bias_relu())
    cfg = make_config("timing.enabled=false", "check.trials=1", f"solutions_dir={tmp_path / 'solutions'}")
    targets = select_targets(cfg, problem=PROBLEM, solution=None, everything=False)
    assert run(cfg, targets, run_id="clean", quiet=True) == 0
    assert left_under(own_tmpdir) == []


@pytest.mark.slow
def test_nothing_is_left_under_tmpdir_after_an_api_session_whose_candidate_raised(make_config, own_tmpdir):
    with pytest.raises(RuntimeError, match="after the record"):
        with api.Session(make_config("timing.enabled=false", "check.trials=1")) as session:
            own = session.resources.scratch.path
            record = session.evaluate(PROBLEM, scale_bias_relu("raise RuntimeError('the candidate raised')"), name="raises")
            assert record.decision.status is not Status.CORRECT and "the candidate raised" in record.decision.reason
            raise RuntimeError("after the record")
    assert not own.exists()
    assert left_under(own_tmpdir) == []
