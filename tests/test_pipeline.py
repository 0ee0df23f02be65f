"""The pipeline that keeps the GPU busy: sanitizer runs that end with a stopped run, lanes that share a
GPU and spread over problems."""
import concurrent.futures
import threading

from harness.core.config import ROOT
from harness.core.records import SanitizerOutcome
from harness.parent.executor import Job
from harness.parent.local import choose_job, local_lanes
from harness.parent.resources import lane_count
from harness.parent.sanitize import ToolRunner
from harness.sources.candidate import Candidate


def test_a_stopped_run_kills_its_sanitizer_runs(tmp_path):
    tool = tmp_path / "fake-sanitizer"
    tool.write_text("#!/bin/sh\nsleep 60\n")
    tool.chmod(0o755)
    job = tmp_path / "job.json"
    job.write_text("{}")
    runner = ToolRunner()
    results = []
    thread = threading.Thread(target=lambda: results.append(runner.run(str(tool), "memcheck", 120, job, {}, tmp_path)))
    thread.start()
    for _ in range(200):
        if runner._running:
            break
        threading.Event().wait(0.02)
    runner.kill()
    thread.join(20)
    assert not thread.is_alive()
    assert results and results[0].outcome is SanitizerOutcome.FAILED  # ended, no verdict: never reported clean


def test_lanes_share_each_gpu_as_configured(make_config, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cfg = make_config("workers.lanes_per_gpu=2")
    assert lane_count(cfg, "cuda") == 4
    lanes = local_lanes(cfg, "cuda")
    try:
        assert [(lane.label, lane.gpu, lane.index) for lane in lanes] == [("cuda:0/0", "0", 0), ("cuda:0/1", "0", 1), ("cuda:1/0", "1", 2), ("cuda:1/1", "1", 3)]
    finally:
        for lane in lanes:
            lane.launcher.close()
    assert [lane.label for lane in local_lanes(make_config(), "cpu")] == [""]


def job(problem: str, queued_at: float = 0.0) -> Job:
    return Job(type("P", (), {"path": problem, "hash": problem})(), Candidate(problem, ROOT / "x.py"), concurrent.futures.Future(), queued_at)


def test_a_lane_takes_its_warm_problem_first_then_one_no_other_lane_has_then_the_oldest():
    a1, b1, a2, c1 = job("a", 1), job("b", 2), job("a", 3), job("c", 4)
    now = 10.0
    assert choose_job([a1, b1, a2, c1], mine={("b", "b")}, elsewhere=set(), now=now) is b1
    assert choose_job([a1, b1, a2, c1], mine=set(), elsewhere={("a", "a"), ("b", "b")}, now=now) is c1  # spread over problems
    assert choose_job([a1, a2], mine=set(), elsewhere={("a", "a")}, now=now) is a1  # nothing else: share the problem
    assert choose_job([a1, b1], mine={("b", "b")}, elsewhere=set(), now=100.0) is a1  # the oldest waited too long


def test_a_lane_takes_a_job_whose_build_has_ended_before_one_whose_build_still_runs():
    a1, a2, b1, c1 = job("a", 1), job("a", 2), job("b", 3), job("c", 4)
    building = {id(a1), id(a2)}

    def ready(j):
        return id(j) not in building

    now = 10.0
    # its warm problem's next job is still building: another problem's built job goes first
    assert choose_job([a1, a2, b1, c1], mine={("a", "a")}, elsewhere=set(), now=now, ready=ready) is b1
    # among the ready ones the usual order holds: warm first, then a problem no other lane has
    assert choose_job([a1, b1, c1], mine={("c", "c")}, elsewhere=set(), now=now, ready=ready) is c1
    assert choose_job([a1, b1, c1], mine=set(), elsewhere={("b", "b")}, now=now, ready=ready) is c1
    # the oldest that waited too long goes first only among the ready: a build that has not ended cannot start
    assert choose_job([a1, b1, c1], mine={("c", "c")}, elsewhere=set(), now=100.0, ready=ready) is b1
    # nothing ready: the lane takes what it would have taken, and waits for that build
    assert choose_job([a1, a2], mine=set(), elsewhere=set(), now=now, ready=lambda j: False) is a1
