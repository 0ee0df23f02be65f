"""The pipeline that keeps the GPU busy: records finished off the lane once their sanitizer runs are in,
sanitizer runs that end with a stopped run, lanes that share a GPU and spread over problems."""
import concurrent.futures
import threading

import pytest

from harness.core.config import ROOT
from harness.core.records import CandidateRecord, SanitizerOutcome
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.parent.evaluate import ProblemEvaluation
from harness.parent.executor import Job
from harness.parent.local import choose_job, local_lanes
from harness.parent.quiet import QuietHost
from harness.parent.resources import RunResources, after_lane, lane_count
from harness.parent.sanitize import ToolRunner
from harness.parent.scratch import RunScratch
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from sources import scale_bias_relu

CPP_CANDIDATE = ROOT / "solutions" / "1_Scale_Bias_ReLU" / "cpp_fused.py"


def candidate_records(store):
    return [r for r in read_records(store.dir) if isinstance(r, CandidateRecord)] if (store.dir / "records.jsonl").exists() else []


@pytest.mark.slow
def test_a_correct_candidate_is_finished_off_the_lane_and_written_only_once_its_sanitizer_runs_are_in(make_config, tmp_path):
    cfg = make_config("sanitizer.enabled=on", "timing.enabled=false")
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "off-lane")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    busy = threading.Event()
    pool.submit(busy.wait, 60)  # the pool's one thread is taken: nothing it is given can finish yet
    resources = RunResources(cfg, "cpu", store, RunScratch.create(), after_lane=pool)
    evaluation = ProblemEvaluation(problem, [], cfg, "cpu", store, resources=resources)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(scale_bias_relu("return x"))
    try:
        pending = evaluation.begin(Candidate("cpp_fused", CPP_CANDIDATE))
        assert not pending.done()  # the lane is free; the record waits for its sanitizer runs
        assert candidate_records(store) == []
        failed = evaluation.begin(Candidate("wrong", wrong))
        assert failed.done() and failed.result().decision.status is Status.INCORRECT  # nothing to sanitize: final on the lane
        busy.set()
        record = pending.result(120)
    finally:
        busy.set()
        evaluation.close()
        resources.close()
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert [r.outcome for r in record.integrity.sanitizer] == [SanitizerOutcome.SKIPPED]  # its runs are in the record
    assert sorted(r.identity.candidate for r in candidate_records(store)) == ["cpp_fused", "wrong"]  # each written once


def test_records_are_finished_off_the_lane_only_on_a_gpu_run_whose_host_stops_background_work_while_a_lane_times(make_config):
    pausing = QuietHost("pause")
    assert after_lane(make_config("sanitizer.enabled=auto"), "cpu", pausing) is None  # the CPU: no sanitizer runs
    assert after_lane(make_config("sanitizer.enabled=off"), "cuda", pausing) is None
    assert after_lane(make_config("sanitizer.parallel=0"), "cuda", pausing) is None  # asked to run in the lane
    assert after_lane(make_config("sanitizer.parallel=2"), "cuda", QuietHost("pin")) is None  # a run would overlap a timing
    assert after_lane(make_config(), "cuda", pausing) is None  # off by default, until a GPU run with it finishes
    pool = after_lane(make_config("sanitizer.parallel=3"), "cuda", pausing)
    assert pool is not None and pool._max_workers == 3
    pool.shutdown()


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
