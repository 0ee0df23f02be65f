"""Scale: prestarted workers, several lanes at once, and the Ray executor on a local CPU instance."""
import json
import shutil
from pathlib import Path

import pytest

from harness.core.config import ROOT
from harness.core.errors import UserError
from harness.core.records import CandidateRecord, ReferenceRecord
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.parent.local import LocalExecutor, local_lanes
from harness.parent.resources import Observer, RunResources
from harness.parent.scratch import RunScratch
from harness.parent.supervise import Lane, Launcher
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.records import candidate_record, reference_record
from tests.sources import HONEST_FORWARD, scale_bias_relu

PROBLEM = "1_Scale_Bias_ReLU"
CPP_CANDIDATE = ROOT / "solutions" / PROBLEM / "cpp_fused.py"


def write_candidates(folder, count, wrong=()):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"plain_{index}.py"
        path.write_text(scale_bias_relu(HONEST_FORWARD + (" + 1" if index in wrong else "")))
        paths.append(path)
    return [Candidate(p.stem, p) for p in paths]


def test_prestarted_worker_is_a_fresh_process_for_every_job():
    launcher = Launcher(prestart=True)
    try:
        first = launcher.take()
        spare = launcher._spare
        second = launcher.take()
        assert spare is not None and second.proc is spare.proc  # the prestarted one is handed out next
        assert first.proc.pid != second.proc.pid
        assert launcher._spare is not None and launcher._spare.proc.pid not in (first.proc.pid, second.proc.pid)
    finally:
        for started in (first, second):
            started.proc.kill()
            started.proc.wait()
        waiting = launcher._spare.proc
        launcher.close()
    assert waiting.wait(timeout=10) is not None  # close ends the spare


@pytest.mark.slow
def test_prestarted_workers_give_the_same_verdicts(make_config, tmp_path):
    cfg = make_config("workers.prestart=always", "timing.enabled=false")
    problem = resolve_problem(PROBLEM, cfg.path(cfg.problems_dir))
    candidates = write_candidates(tmp_path / "c", 3, wrong={1})
    resources = RunResources(cfg, "cpu", RunStore(cfg.path(cfg.results_dir), "prestart"), RunScratch.create())
    executor = LocalExecutor(resources)
    try:
        records = {r.identity.candidate: r for r in executor.run_problem(problem, candidates)}
    finally:
        executor.close()
        resources.close()
    assert [records[f"plain_{i}"].decision.status for i in range(3)] == [Status.CORRECT, Status.INCORRECT, Status.CORRECT]


@pytest.mark.slow
def test_two_lanes_share_the_candidates_and_each_compares_to_its_own_reference(make_config, tmp_path):
    cfg = make_config()
    problem = resolve_problem(PROBLEM, cfg.path(cfg.problems_dir))
    candidates = write_candidates(tmp_path / "c", 4, wrong={2})
    store = RunStore(cfg.path(cfg.results_dir), "lanes")
    started = []
    resources = RunResources(cfg, "cpu", store, RunScratch.create(), observer=Observer(on_start=lambda c: started.append(c.name)))
    executor = LocalExecutor(resources)
    executor.lanes = [Lane.single(cfg, "cpu", label="lane-a"), Lane.single(cfg, "cpu", label="lane-b")]  # two lanes, as two GPUs would give
    try:
        records = executor.run_problem(problem, candidates)
    finally:
        executor.close()
        resources.close()
    assert [r.identity.candidate for r in records] == [f"plain_{i}" for i in range(4)]  # in candidate order, whoever finished first
    assert sorted(started) == sorted(c.name for c in candidates)
    written = read_records(store.records_path)
    references = {r.identity.lane: r for r in written if isinstance(r, ReferenceRecord)}
    assert set(references) == {"lane-a", "lane-b"}  # each lane ran the reference once
    for record in records:
        assert record.identity.lane in references
        if record.decision.status is Status.CORRECT:
            # timed in turns with its own lane's judge: the reference's side is in the record
            assert record.timing.paired is not None and record.timing.reference_ms == record.timing.paired.reference.median_ms
    assert records[2].decision.status is Status.INCORRECT
    assert {r.identity.lane for r in records} == {"lane-a", "lane-b"}  # both lanes did work


def test_gpu_selection_beyond_the_visible_gpus_is_a_usage_error(make_config, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with pytest.raises(UserError, match="workers.gpus names GPU 2, but 2 GPU"):
        local_lanes(make_config("workers.gpus=[0,2]"), "cuda")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    lanes = local_lanes(make_config("workers.gpus=[1]"), "cuda")
    assert [(lane.label, lane.gpu, lane.launcher.env) for lane in lanes] == [("cuda:5", "5", {"CUDA_VISIBLE_DEVICES": "5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})]
    assert [lane.label for lane in local_lanes(make_config(), "cuda")] == ["cuda:3", "cuda:5"]
    assert [lane.label for lane in local_lanes(make_config(), "cpu")] == [""]  # one CPU lane: timings must not share it


@pytest.mark.parametrize("setting", ["executor=slurm", "workers.prestart=sometimes", "workers.gpus=[0,0]", "ray.build_cpus=0"])
def test_bad_scale_settings_are_usage_errors(make_config, setting):
    with pytest.raises(UserError):
        make_config(setting)


def test_build_tarball_adds_new_builds_under_their_owner_and_never_replaces_one(tmp_path):
    from harness.core import buildbook
    from harness.parent.ray_executor import pack_builds, unpack_builds

    owner = buildbook.owner_of("a candidate")
    source = buildbook.owner_folder(tmp_path / "source", owner)
    keys = ["a" * 32, "b" * 32, "c" * 32]
    for key in keys[:2]:
        (source / key).mkdir(parents=True)
        (source / key / "ext.so").write_text("new")
    (source / keys[2]).mkdir()  # a failed build: no library, not shipped
    blob = pack_builds(tmp_path / "source", owner, keys)
    target = buildbook.owner_folder(tmp_path / "target", owner)
    (target / keys[0]).mkdir(parents=True)
    (target / keys[0] / "ext.so").write_text("old")
    assert unpack_builds(blob, tmp_path / "target") == [keys[1]]
    assert (target / keys[0] / "ext.so").read_text() == "old"
    assert (target / keys[1] / "ext.so").read_text() == "new"
    assert buildbook.intact(tmp_path / "target", owner, keys[1])  # recorded as it arrived
    assert pack_builds(tmp_path / "source", owner, keys[2:]) == b"" and unpack_builds(b"", tmp_path / "target") == []


@pytest.mark.slow
def test_ray_executor_gives_the_same_records_as_the_local_one(make_config, tmp_path, build_cache):
    pytest.importorskip("ray")
    import subprocess
    import sys

    solutions = tmp_path / "solutions" / PROBLEM
    write_candidates(solutions, 2, wrong={1})
    shutil.copy(CPP_CANDIDATE, solutions / "cpp_fused.py")  # a C++ build, made in a Ray CPU task
    (solutions / "broken.py").write_text("this is not python")
    common = [
        sys.executable, "run.py", "--problem", PROBLEM, "--device", "cpu", "--json", "--quiet",
        "--results", str(tmp_path / "results"), "--set", f"solutions_dir={tmp_path / 'solutions'}",
        "--set", f"build_cache_dir={build_cache}", "--set", "check.trials=2", "--set", "timing.budget_s=0.2",
        "--set", "timing.warmup_ms=5", "--set", "baselines.compile_modes=[]", "--set", "flags.no_custom_kernel=flag",
    ]
    outputs = {}
    for executor in ("local", "ray"):
        done = subprocess.run([*common, "--executor", executor, "--run-id", executor], capture_output=True, text=True, cwd=ROOT, timeout=900)
        assert done.returncode == 2, done.stderr[-2000:]  # candidates failed (the wrong one and the broken one)
        outputs[executor] = {r["identity"]["candidate"]: r for r in map(json.loads, done.stdout.splitlines())}
    local, ray = outputs["local"], outputs["ray"]
    assert {n: r["decision"]["status"] for n, r in ray.items()} == {n: r["decision"]["status"] for n, r in local.items()} == {
        "cpp_fused": "correct", "plain_0": "correct", "plain_1": "incorrect", "broken": "import error",
    }
    assert ray["cpp_fused"]["identity"]["candidate_path"] == str(solutions / "cpp_fused.py")  # the driver's file, not the lane's copy
    assert [b["name"] for b in ray["cpp_fused"]["provenance"]["builds"]] == ["cpp_scale_bias_relu"]
    assert ray["plain_0"]["identity"]["lane"].endswith("/cpu")
    run = tmp_path / "results" / "ray"
    assert (run / "leaderboard.md").is_file() and (run / "leaderboard.csv").is_file()
    assert (run / ray["plain_1"]["provenance"]["log_path"]).is_file()  # the lane's logs come back to the run folder
    kinds = [type(r).__name__ for r in read_records(run / "records.jsonl")]
    assert kinds.count("ReferenceRecord") == 1 and kinds.count("CandidateRecord") == 4 and kinds[-1] == "RunEnd"
    # every record came back whole: a candidate's or a reference's, decoded, never a dict
    assert all(isinstance(r, (CandidateRecord, ReferenceRecord)) for r in read_records(run) if hasattr(r, "identity"))


@pytest.mark.slow
def test_a_lane_closed_after_its_evaluation_ends_its_prestarted_worker(make_config, tmp_path):
    from tests.evaluations import problem_evaluation

    cfg = make_config("workers.prestart=always", "timing.enabled=false")
    problem = resolve_problem(PROBLEM, cfg.path(cfg.problems_dir))
    with problem_evaluation(problem, write_candidates(tmp_path / "c", 1), cfg, "cpu", RunStore(cfg.path(cfg.results_dir), "own")) as evaluation:
        (record,) = evaluation.run()
    assert record.decision.status is Status.CORRECT
    assert evaluation.lane.launcher._spare is None and not evaluation.lane.launcher.active


def _owned_by_live_process(folder: Path) -> bool:
    from harness.parent.scratch import _read_marker, owner_alive

    marker = _read_marker(folder)
    return marker is not None and owner_alive(marker["pid"], marker.get("start_time"))


@pytest.mark.slow
def test_a_ray_lane_that_dies_gives_a_harness_error_record_not_a_crash(tmp_path):
    """The candidate kills the process above its worker (the lane's actor): that candidate gets a
    `harness error` record, the others keep theirs, and the run ends normally. With no boundary:
    Landlock's signal scope (ABI 6) would refuse the kill (test_boundary.py)."""
    pytest.importorskip("ray")
    import subprocess
    import sys

    solutions = tmp_path / "solutions" / PROBLEM
    write_candidates(solutions, 1)
    (solutions / "zz_kills_lane.py").write_text(scale_bias_relu(f"import os, signal; os.kill(os.getppid(), signal.SIGKILL); {HONEST_FORWARD}"))
    from harness.parent.scratch import default_base

    before = set(default_base().glob("run-*"))
    done = subprocess.run([
        sys.executable, "run.py", "--problem", PROBLEM, "--device", "cpu", "--json", "--quiet", "--no-timing", "--executor", "ray",
        "--results", str(tmp_path / "results"), "--set", f"solutions_dir={tmp_path / 'solutions'}", "--set", "check.trials=1",
        "--set", "flags.no_custom_kernel=flag", "--set", "sandbox.layer=off",
    ], capture_output=True, text=True, cwd=ROOT, timeout=600)
    records = {r["identity"]["candidate"]: r for r in map(json.loads, (line for line in done.stdout.splitlines() if line.startswith("{")))}  # Ray prints its own notice of the death
    assert records["plain_0"]["decision"]["status"] == "correct"
    assert records["zz_kills_lane"]["decision"]["status"] == "harness error"
    assert records["zz_kills_lane"]["decision"]["reason"].startswith("the Ray lane failed: ")
    assert done.returncode == 4, done.stderr[-2000:]  # a harness error, reported as such
    # the killed lane's folder went with the run: swept when the run's own scratch was removed (a folder
    # of a live process is another test's, running beside this one)
    left = [f for f in set(default_base().glob("run-*")) - before if not _owned_by_live_process(f)]
    assert left == [], left


@pytest.mark.slow
def test_a_ray_lane_takes_a_candidate_whose_build_has_ended_before_one_whose_build_still_runs():
    from harness.parent.ray_executor import take_built_first

    a, b, c = (Candidate(name, ROOT / f"{name}.py") for name in "abc")
    queue = [c, b, a]  # its end is its oldest
    assert take_built_first(queue, lambda candidate: candidate is not a) is b  # a still builds: b goes first
    assert queue == [c, a]
    assert take_built_first(queue, lambda candidate: False) is a  # nothing built: the oldest, and the lane waits for it
    assert take_built_first(queue, lambda candidate: True) is c and queue == []


def test_a_stopped_ray_run_records_no_harness_error_for_the_lane_its_stop_ended(tmp_path):
    """SIGTERM while a candidate runs on a Ray lane: the stop kills the lane's actor, and that death is the
    stop's, not a failed lane's: the candidate gets no record (its future is cancelled; --resume redoes it)."""
    pytest.importorskip("ray")
    import signal
    import subprocess
    import sys
    import time

    solutions = tmp_path / "solutions" / PROBLEM
    solutions.mkdir(parents=True)
    entered = tmp_path / "entered"
    slow = f"open({str(entered)!r}, 'w').close(); import time; time.sleep(120); {HONEST_FORWARD}"
    (solutions / "slow.py").write_text(scale_bias_relu(slow))
    run = subprocess.Popen([
        sys.executable, "run.py", "--problem", PROBLEM, "--device", "cpu", "--json", "--quiet", "--no-timing", "--executor", "ray",
        "--results", str(tmp_path / "results"), "--run-id", "stopped", "--set", f"solutions_dir={tmp_path / 'solutions'}",
        "--set", "check.trials=1", "--set", "flags.no_custom_kernel=flag", "--set", "sandbox.layer=off", "--set", "timeouts.check=600",
    ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while not entered.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert entered.exists(), "the candidate's forward never ran"
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    records = [r for r in read_records(tmp_path / "results" / "stopped" / "records.jsonl") if isinstance(r, CandidateRecord)]
    assert records == [], [(r.identity.candidate, r.decision.status, r.decision.reason) for r in records]
    assert run.returncode != 0, err[-2000:]


def test_both_executors_are_executors_and_evaluate_imports_neither():
    """The executors import the evaluation, never the reverse (nor inside a function)."""
    import inspect
    import subprocess
    import sys

    from harness.parent import evaluate
    from harness.parent.executor import Executor
    from harness.parent.ray_executor import RayExecutor

    members = ("describe", "submit", "submit_all", "pending", "seal", "run_problem", "stop", "close")
    assert all(callable(getattr(cls, name, None)) for cls in (LocalExecutor, RayExecutor) for name in members)
    assert issubclass(LocalExecutor, Executor) and issubclass(RayExecutor, Executor)
    assert "harness.parent.local" not in inspect.getsource(evaluate) and "harness.parent.ray_executor" not in inspect.getsource(evaluate)
    code = "import sys, harness.parent.evaluate; print(sorted(m for m in ('harness.parent.local', 'harness.parent.ray_executor', 'harness.parent.executor') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout.strip() == "[]"


def test_a_ray_lane_hands_its_records_back_as_the_records_file_holds_them(tmp_path):
    """The lane's store keeps what it is given; the driver rebuilds it and writes the same lines."""
    from harness.core.schema import decode_line
    from harness.core.store import RunStore
    from harness.parent.ray_executor import LaneStore

    reference = reference_record(run_id="r", problem="p", problem_hash="h", problem_path="p.py", device="cpu", device_name="cpu", ok=True, reason="ok", notes=("n",))
    candidate = candidate_record(run_id="r", problem="p", problem_hash="h", candidate="c", candidate_path="c.py", candidate_hash="x", device="cpu", status=Status.CORRECT, reason="ok",
                                log_path="", finished_at="t", warnings=("w",), phase_seconds={"load": float("inf")})
    lane, plain = LaneStore(tmp_path / "lane", "r"), RunStore(tmp_path / "plain", "r")
    for record in (reference, candidate):
        lane.append(record)
        plain.append(record)
    taken = lane.take()
    assert lane.take() == [] and not lane.records_path.exists()
    rebuilt = RunStore(tmp_path / "rebuilt", "r")
    for line in taken:
        rebuilt.append(decode_line(line))
    assert rebuilt.records_path.read_bytes() == plain.records_path.read_bytes()


def test_a_launcher_killed_by_ctrl_c_starts_no_worker_for_a_lane_that_reaches_it_later():
    """The race behind a Ctrl-C that did not end the run: the main thread kills the lane's workers while
    the lane's thread is on its way to take one; the worker it would start then runs unwatched."""
    from harness.parent.supervise import Launcher, LauncherClosed

    launcher = Launcher(prestart=False)
    launcher.kill_all()
    with pytest.raises(LauncherClosed):
        launcher.take()
    assert not launcher.active


@pytest.mark.slow
def test_a_lane_stopped_after_its_reference_restarts_no_judge_and_starts_no_worker(make_config, tmp_path, monkeypatch):
    """Ctrl-C between a problem's reference and its candidate (where the Ctrl-C run's test signals): stop() kills
    the lane's judge, and the candidate then ends at once (Stopped), without a judge restarted for it (a whole
    reference pass that nothing watches: the run's end waited for it) or a worker started. Without the fix the
    lane restarted the judge, ran the reference again, and printed the refused worker's traceback."""
    from harness.parent.lane_judge import Stopped
    from harness.parent.supervise import LauncherClosed
    from tests.evaluations import problem_evaluation

    cfg = make_config("timing.enabled=false")
    problem = resolve_problem(PROBLEM, cfg.path(cfg.problems_dir))
    [candidate] = write_candidates(tmp_path / "c", 1)
    with problem_evaluation(problem, [candidate], cfg, "cpu", RunStore(cfg.path(cfg.results_dir), "stopped")) as evaluation:
        launcher, started = evaluation.lane.launcher, []
        for name in ("take_judge", "take"):
            monkeypatch.setattr(launcher, name, lambda *a, _f=getattr(launcher, name), _n=name, **k: started.append(_n) or _f(*a, **k))
        reference_run = evaluation.reference_pass.run

        def stopped_after_it(plan):
            record = reference_run(plan)
            evaluation.stop()  # the main thread's Ctrl-C, landing just after the reference's record
            evaluation.judge.client.proc.wait(timeout=30)  # killed: the next candidate would find it ended
            return record

        monkeypatch.setattr(evaluation.reference_pass, "run", stopped_after_it)
        with pytest.raises(Stopped):
            evaluation.evaluate(candidate)
        assert started == ["take_judge"]  # the reference's judge, nothing after the stop
        with pytest.raises(LauncherClosed):  # and a killed launcher refuses a judge as it refuses a worker
            launcher.take_judge(tmp_path / "logs" / "_reference.log", lambda prefix: tmp_path)
