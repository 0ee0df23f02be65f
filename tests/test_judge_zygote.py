"""Judges forked from a lane's zygote (`workers.judge_zygote`, harness.judge.zygote and harness.parent.zygote): a
process that imported torch and the judge's modules once, without CUDA, forks each judge. A forked judge must judge
exactly as a judge started on its own does, lead its own session, be restarted when killed, and be replaced by one
started on its own when the zygote cannot fork; nothing of the zygote is left when the lane closes."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.status import Status
from harness.parent.zygote import Zygote, ZygoteUnavailable, judge_env
from tests.evaluations import bodies_evaluation
from tests.sources import HONEST_FORWARD

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # real zygote, judge and worker processes

BODIES = {
    "honest": HONEST_FORWARD,
    "wrong": "return torch.relu(x * self.scale + self.bias) + 1.0",
    "segfaults": "import ctypes; ctypes.string_at(0)",
}


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return "Z" == Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _ready(zygote, limit=120.0):
    deadline = time.monotonic() + limit
    while zygote.ready is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zygote.ready is not None, "the zygote never finished its imports"
    return zygote


@contextlib.contextmanager
def _evaluation(tmp_path, make_config, names):
    """An evaluation whose lane's zygote is started and ready before its first judge, as a run's is."""
    cfg = make_config("timing.enabled=false", "check.gradients=off", "workers.judge_zygote=true")
    with bodies_evaluation(tmp_path, cfg, [(name, BODIES[name]) for name in names], run="zygote-test") as found:
        launcher = found[0].lane.launcher
        launcher.start_zygote(tmp_path / "logs")
        _ready(launcher.zygote)
        yield found


def test_a_judge_forked_from_the_zygote_judges_as_one_started_on_its_own_and_nothing_is_left(tmp_path, make_config):
    with _evaluation(tmp_path, make_config, ["honest", "wrong", "segfaults", "honest"]) as (evaluation, candidates):
        records = [evaluation.evaluate(c) for c in candidates]
        launcher = evaluation.lane.launcher
        zygote, judge = launcher.zygote, evaluation.judge.client.proc
        assert zygote is not None and zygote.ready is not None
        assert _parent(judge.pid) == zygote.proc.pid  # forked, not started by the run
        assert os.getsid(judge.pid) == judge.pid  # a session of its own, as start_new_session gives
        assert zygote.log_path.exists()
        zygote_pid, log = zygote.proc.pid, zygote.log_path
    assert [r.decision.status for r in records] == [Status.CORRECT, Status.INCORRECT, Status.CRASHED, Status.CORRECT]
    assert not any("judge" in w for r in records for w in r.decision.warnings)  # one judge served them all
    assert launcher.zygote is None and _gone(zygote_pid) and _gone(judge.pid) and not log.exists()


def test_a_forked_judge_that_is_killed_reads_its_signal_and_the_next_is_forked_again(tmp_path, make_config):
    with _evaluation(tmp_path, make_config, ["honest", "honest"]) as (evaluation, candidates):
        evaluation.evaluate(candidates[0])
        first = evaluation.judge.client.proc
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL  # the zygote reaped it and said how it ended
        after = evaluation.evaluate(candidates[1])
        again = evaluation.judge.client.proc
        assert again.pid != first.pid and _parent(again.pid) == evaluation.lane.launcher.zygote.proc.pid
    assert after.decision.status is Status.CORRECT, after.decision.reason
    assert any("judge was restarted" in w for w in after.decision.warnings), after.decision.warnings


def test_when_the_zygote_is_gone_the_next_judge_starts_on_its_own_and_says_so(tmp_path, make_config):
    with _evaluation(tmp_path, make_config, ["honest", "honest"]) as (evaluation, candidates):
        evaluation.evaluate(candidates[0])
        launcher = evaluation.lane.launcher
        first = evaluation.judge.client.proc
        os.kill(launcher.zygote.proc.pid, signal.SIGKILL)
        launcher.zygote.proc.wait()
        os.kill(first.pid, signal.SIGKILL)  # its zygote cannot say how it ended any more
        assert first.wait(timeout=30) == 255
        after = evaluation.evaluate(candidates[1])
        replacement = evaluation.judge.client
        assert _parent(replacement.proc.pid) == os.getpid() and isinstance(replacement.proc, subprocess.Popen)
        assert "not forked from the judge zygote (the zygote ended)" in replacement.log_path.read_text()
    assert after.decision.status is Status.CORRECT, after.decision.reason


def test_the_zygote_refuses_while_it_imports_and_a_malformed_request_and_forks_the_next(tmp_path):
    zygote = Zygote({}, tmp_path / "zygote.out")
    pipes = []
    try:
        read_end, write_end = os.pipe()
        pipes += [read_end, write_end]
        with pytest.raises(ZygoteUnavailable, match="still importing torch"):  # at once: the judge starts on its own
            zygote.spawn(tmp_path, judge_env({}), (read_end, write_end, os.dup(write_end)))
        _ready(zygote)
        with pytest.raises(ZygoteUnavailable, match="a malformed request: it needs 3 descriptors"):
            zygote.spawn(tmp_path, judge_env({}), (read_end, write_end))  # no log
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        log = os.open(tmp_path / "judge.log", os.O_WRONLY | os.O_CREAT)
        judge = zygote.spawn(tmp_path, judge_env({}), (request_read, reply_write, log))
        for fd in (request_read, reply_write, log):
            os.close(fd)
        assert judge.poll() is None and _parent(judge.pid) == zygote.proc.pid
        assert Path(f"/proc/{judge.pid}/cwd").resolve() == tmp_path.resolve()
        os.close(request_write)  # no more requests: the judge ends as a judge does
        assert judge.wait(timeout=30) == 0
        os.close(reply_read)
        other_read, other_write = os.pipe()  # the zygote still forks; this judge waits for requests until killed
        pipes += [other_read, other_write]
        log = os.open(tmp_path / "judge2.log", os.O_WRONLY | os.O_CREAT)
        waiting = zygote.spawn(tmp_path, judge_env({}), (other_read, os.dup(other_write), log))
        os.close(log)
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=0.5)
        os.kill(waiting.pid, signal.SIGKILL)
        assert waiting.wait(timeout=30) == -signal.SIGKILL
    finally:
        zygote.close()
        for fd in pipes:
            with contextlib.suppress(OSError):
                os.close(fd)
    deadline = time.monotonic() + 10
    while not _gone(zygote.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(zygote.proc.pid)


def test_the_config_turns_the_zygote_on_for_a_lane(make_config):
    from harness.parent.supervise import Lane

    assert not Lane.single(make_config(), "cpu").launcher.wants_zygote  # off until measured on a GPU
    assert Lane.single(make_config("workers.judge_zygote=true"), "cpu").launcher.wants_zygote


def test_the_start_benchmark_times_judges_of_both_kinds_and_refuses_a_bad_count(tmp_path):
    out = tmp_path / "start.json"
    done = subprocess.run([sys.executable, "benchmarks/judge_start.py", "--n", "1", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("judge ready: on its own median ") and "forked median" in done.stdout
    found = json.loads(out.read_text())
    assert len(found["alone_s"]) == 1 and len(found["forked_s"]) == 1 and found["zygote_start_s"] > 0
    refused = subprocess.run([sys.executable, "benchmarks/judge_start.py", "--n", "0"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "--n must be at least 1" in refused.stderr


SUBREAPER_RUN = """
import ctypes, os, signal, sys, tempfile, time
from pathlib import Path
from harness.parent.zygote import Zygote, judge_env
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to this process
folder = Path(tempfile.mkdtemp())
zygote = Zygote({}, folder / "zygote.out")
while zygote.ready is None:
    time.sleep(0.05)
request_read, request_write = os.pipe()
reply_read, reply_write = os.pipe()
log = os.open(folder / "judge.log", os.O_WRONLY | os.O_CREAT)
judge = zygote.spawn(folder, judge_env({}), (request_read, reply_write, log))
os.kill(zygote.proc.pid, signal.SIGKILL)
zygote.proc.wait()
os.kill(judge.pid, signal.SIGTERM)
print(judge.wait(timeout=30))
zygote.close()
"""


def test_a_judge_handed_to_the_run_after_its_zygote_died_is_reaped_with_its_own_exit(tmp_path):
    # a run that is a subreaper (or runs under one it is) gets the orphaned judge: its end is read, not guessed
    done = subprocess.run([sys.executable, "-c", SUBREAPER_RUN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(-signal.SIGTERM)


def test_a_run_starts_its_lanes_zygotes_as_it_starts_and_its_verdicts_are_the_same(make_config, tmp_path):
    from harness.core.store import RunStore
    from harness.parent.local import LocalExecutor
    from harness.parent.resources import RunResources
    from harness.parent.scratch import RunScratch
    from harness.sources.candidate import Candidate
    from harness.sources.problem import resolve_problem
    from tests.sources import scale_bias_relu

    cfg = make_config("workers.judge_zygote=true", "workers.prestart=always", "timing.enabled=false")
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    candidates = []
    for name in ("honest", "wrong", "honest"):
        path = tmp_path / f"{len(candidates)}_{name}.py"
        path.write_text(scale_bias_relu(BODIES[name]))
        candidates.append(Candidate(path.stem, path))
    store = RunStore(cfg.path(cfg.results_dir), "zygote-run")
    resources = RunResources(cfg, "cpu", store, RunScratch.create())
    executor = LocalExecutor(resources)
    try:
        [lane] = executor.lanes
        zygote = lane.launcher.zygote
        assert zygote is not None and zygote.log_path.parent == store.dir / "logs"  # started with the run
        _ready(zygote)
        records = executor.run_problem(problem, candidates)
        reference_log = store.log_path(problem.name, "_reference").read_text()
    finally:
        executor.close()
        resources.close()
    assert [r.decision.status for r in records] == [Status.CORRECT, Status.INCORRECT, Status.CORRECT]
    assert "not forked from the judge zygote" not in reference_log  # the problem's judge was forked
    assert _gone(zygote.proc.pid) and not zygote.log_path.exists()
