"""A lane prestarts the next problems' judges (harness.parent.supervise.Launcher.take_judge): the judge a
problem gets has its interpreter and torch ready, still has run no problem code, and logs where
that problem's judge logs; the lane's first worker readies beside its first judge; nothing of a spare is left
when the lane closes."""
import shutil
import tempfile
from pathlib import Path

import pytest

from harness.core import protocol as P
from harness.core.errors import UserError
from harness.parent.supervise import Backlog, JudgeFailed, Launcher

pytestmark = pytest.mark.slow  # real judge processes (each imports torch)


def folders(tmp_path):
    return lambda prefix: Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_path))


def test_the_next_problem_gets_the_prestarted_judge_under_its_own_log(tmp_path):
    launcher = Launcher(prestart=True, judges=True)
    logs = tmp_path / "logs"
    first, first_dir = launcher.take_judge(logs / "p1" / "_reference.log", folders(tmp_path))
    [(spare, spare_dir)] = launcher._judge_spares
    assert spare.running() and spare.log_path.parent == logs and spare.log_path.name.startswith(".judge-spare-")
    second, second_dir = launcher.take_judge(logs / "p2" / "_reference.log", folders(tmp_path))
    assert second is spare and second_dir == spare_dir and second.running()
    assert second.log_path == logs / "p2" / "_reference.log" and second.log_path.exists()
    assert [p for p in logs.iterdir() if p.name.startswith(".judge-spare-")] == [launcher._judge_spares[0][0].log_path]  # only the next spare's
    with pytest.raises(JudgeFailed, match="before Start"):  # it has run no problem code: it is a judge not started yet
        second.request(P.Open(P.Role.CANDIDATE), 60)
    for client, folder in ((first, first_dir), (second, second_dir)):  # as the problem's LaneJudge ends them
        client.close()
        shutil.rmtree(folder)
    launcher.close()
    assert launcher._judge_spares == []
    assert not [p for p in logs.iterdir() if p.name.startswith(".judge-spare-")]  # the last spare's log is gone
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("judge-spare-")]  # and its folder


def test_a_restarted_judge_or_a_dead_spare_gets_a_fresh_judge(tmp_path):
    launcher = Launcher(prestart=True, judges=True)
    log = tmp_path / "logs" / "p1" / "_reference.log"
    first, _ = launcher.take_judge(log, folders(tmp_path))
    first.close()
    [(spare, _)] = launcher._judge_spares
    again, _ = launcher.take_judge(log, folders(tmp_path))  # the problem's log exists: a restart appends to it
    assert again is not spare and spare.running() and launcher._judge_spares[0][0] is spare  # it waits for the next problem
    again.close()
    dead = launcher._judge_spares[0][0]
    dead.kill()  # a spare that died while it waited
    dead.proc.wait()
    fresh, _ = launcher.take_judge(tmp_path / "logs" / "p2" / "_reference.log", folders(tmp_path))
    assert fresh is not dead and fresh.running()
    fresh.close()
    launcher.close()


@pytest.mark.parametrize("prestart, judges", [(False, True), (True, False)])
def test_without_prestart_or_with_judges_off_no_judge_waits(tmp_path, prestart, judges):
    launcher = Launcher(prestart=prestart, judges=judges, judges_ahead=2)
    client, _ = launcher.take_judge(tmp_path / "logs" / "p1" / "_reference.log", folders(tmp_path))
    assert launcher._judge_spares == []
    client.close()
    launcher.close()


def test_judges_ahead_keeps_that_many_started_and_each_problem_gets_the_oldest(tmp_path):
    launcher = Launcher(prestart=True, judges=True, judges_ahead=2)
    logs = tmp_path / "logs"
    first, first_dir = launcher.take_judge(logs / "p1" / "_reference.log", folders(tmp_path))
    ahead = [client for client, _ in launcher._judge_spares]
    assert len(ahead) == 2 and all(client.running() for client in ahead)
    second, second_dir = launcher.take_judge(logs / "p2" / "_reference.log", folders(tmp_path))
    assert second is ahead[0] and second.log_path == logs / "p2" / "_reference.log"  # the oldest: the most nearly ready
    now = [client for client, _ in launcher._judge_spares]
    assert len(now) == 2 and now[0] is ahead[1] and now[1] not in ahead  # one started to take its place
    with pytest.raises(JudgeFailed, match="before Start"):  # a judge started ahead has run no problem code
        second.request(P.Open(P.Role.CANDIDATE), 60)
    for client, folder in ((first, first_dir), (second, second_dir)):  # as the problem's LaneJudge ends them
        client.close()
        shutil.rmtree(folder)
    launcher.close()
    assert all(not client.running() for client in now) and launcher._judge_spares == []
    assert not [p for p in logs.iterdir() if p.name.startswith(".judge-spare-")]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("judge-spare-")]


def test_a_lane_starts_no_judge_or_worker_ahead_for_work_that_will_not_come(tmp_path):
    # once the run is sealed, the launcher asks what is still to come: one more problem with one job wants one judge
    # ahead (not judges_ahead's two) and a worker for the lane's job; then nothing more is started
    launcher = Launcher(prestart=True, judges=True, judges_ahead=2)
    to_come = [Backlog(problems=1, jobs=1)]
    launcher.backlog = lambda: to_come[0]
    logs = tmp_path / "logs"
    first, first_dir = launcher.take_judge(logs / "p1" / "_reference.log", folders(tmp_path))
    [(ahead, _)] = launcher._judge_spares
    assert len(launcher._spares) == 1  # p1's job's worker readies beside its reference pass
    launcher.release(launcher.take().proc)
    assert len(launcher._spares) == 1  # for p2's job, still queued
    to_come[0] = Backlog(problems=0, jobs=0)  # the lane takes p2's job: nothing is left in the queue
    second, second_dir = launcher.take_judge(logs / "p2" / "_reference.log", folders(tmp_path))
    assert second is ahead and launcher._judge_spares == []
    worker = launcher.take()
    assert launcher._spares == []  # the last job's worker was the spare; none started after it
    launcher.release(worker.proc)
    for client, folder in ((first, first_dir), (second, second_dir)):
        client.close()
        shutil.rmtree(folder)
    launcher.kill_all()


def test_judges_started_ahead_for_problems_that_will_not_come_are_ended(tmp_path):
    launcher = Launcher(prestart=True, judges=True, judges_ahead=2)  # an open session: more may come
    logs = tmp_path / "logs"
    first, first_dir = launcher.take_judge(logs / "p1" / "_reference.log", folders(tmp_path))
    older, newer = [client for client, _ in launcher._judge_spares]
    launcher.backlog = lambda: Backlog(problems=0, jobs=1)  # sealed: p2 is the last problem
    second, second_dir = launcher.take_judge(logs / "p2" / "_reference.log", folders(tmp_path))
    assert second is older and launcher._judge_spares == []  # the oldest serves p2, the other is ended now
    assert not newer.running()
    assert [p.name for p in logs.iterdir() if p.name.startswith(".judge-spare-")] == []  # its log is gone
    assert [p for p in tmp_path.iterdir() if p.name.startswith("judge-spare-")] == [second_dir]  # and its folder
    for client, folder in ((first, first_dir), (second, second_dir)):
        client.close()
        shutil.rmtree(folder)
    launcher.kill_all()


@pytest.mark.parametrize("judges", [True, False])
def test_a_lanes_first_worker_readies_while_its_first_reference_pass_runs(tmp_path, judges):
    launcher = Launcher(prestart=True, judges=judges)
    assert launcher._spares == []  # nothing started before the lane has work
    judge, folder = launcher.take_judge(tmp_path / "logs" / "p1" / "_reference.log", folders(tmp_path))
    [waiting] = launcher._spares  # started with the first judge, not at the first candidate's take()
    assert waiting.proc.poll() is None
    worker = launcher.take()
    assert worker is waiting and waiting.proc in launcher.active
    [next_spare] = launcher._spares  # and the next one started as it was handed out
    assert next_spare is not waiting
    judge.close()
    shutil.rmtree(folder)
    launcher.kill_all()
    assert waiting.proc.wait(timeout=30) is not None and next_spare.proc.poll() is not None and launcher._spares == []


def test_without_prestart_the_first_judge_starts_no_worker(tmp_path):
    launcher = Launcher(prestart=False, judges=True)
    judge, folder = launcher.take_judge(tmp_path / "logs" / "p1" / "_reference.log", folders(tmp_path))
    assert launcher._spares == [] and launcher._judge_spares == []
    judge.close()
    shutil.rmtree(folder)
    launcher.close()


def test_the_config_turns_judge_prestart_on_for_a_lane(make_config):
    from harness.parent.supervise import Lane

    assert Lane.single(make_config("workers.prestart=always"), "cpu").launcher.judges  # on by default: 0.96 s a warm reference pass on an H100
    assert not Lane.single(make_config("workers.prestart=always", "workers.prestart_judge=false"), "cpu").launcher.judges
    lane = Lane.single(make_config("workers.prestart=always", "workers.prestart_judge=true"), "cpu")
    assert lane.launcher.prestart and lane.launcher.judges
    assert lane.launcher.judges_ahead == 1  # one ahead; two end the waits for it, opt-in: a launch-bound null spread wider
    assert Lane.single(make_config("workers.judges_ahead=2"), "cpu").launcher.judges_ahead == 2
    with pytest.raises(UserError, match="workers.judges_ahead must be 1 or more"):
        make_config("workers.judges_ahead=0")
