"""benchmarks/kernelbench_eval.py without a GPU: the draw is kbcorpus.py's, a KernelBench result becomes a
verdict line, the report's rate and its verdict diff against our state, the budget and resuming (fake
builders and evaluators), the stand-ins, and KernelBench's build_compile_cache in a build worker (where
its source has been fetched)."""

import importlib.util
import json
import sys
import time
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("kernelbench_eval", ROOT / "benchmarks" / "kernelbench_eval.py")
assert _spec is not None and _spec.loader is not None
kbe = importlib.util.module_from_spec(_spec)
sys.modules["kernelbench_eval"] = kbe
_spec.loader.exec_module(kbe)
kbc = kbe.corpus_module()

SIZES = {1: {1: 3, 2: 1, 3: 2, 19: 2}, 2: {7: 2, 9: 1}, 3: {4: 2}}  # level -> problem -> kernels


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A corpus laid out as ../shared/kbcorpus is: problems/kb_l<L>/, solutions/l<L>_p<N>/, kb_verdicts.json."""
    root = tmp_path / "corpus"
    verdicts = {}
    for level, problems in SIZES.items():
        (root / "problems" / f"kb_l{level}").mkdir(parents=True)
        for number, count in problems.items():
            (root / "problems" / f"kb_l{level}" / f"l{level}_p{number}.py").write_text("# a problem\n")
            folder = root / "solutions" / f"l{level}_p{number}"
            folder.mkdir(parents=True)
            for i in range(count):
                (folder / f"model{i}_{i:06x}.py").write_text(f"# kernel {i}\n")
                verdicts[f"l{level}_p{number}/model{i}_{i:06x}"] = {"kernelbench": "correct"}
    (root / "kb_verdicts.json").write_text(json.dumps(verdicts))
    return root


def make_args(tmp_path: Path, corpus: Path, *extra: str) -> Any:
    return kbe.parse_args(
        ["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--builds", str(tmp_path / "builds"), *extra]
    )


def test_the_draw_is_the_one_kbcorpus_makes(corpus: Path) -> None:
    for fraction, seed, problems in ((0.5, 3, ()), (1.0, 0, ()), (0.4, 7, ("l1_p1", "kb_l2/l2_p7"))):
        expected = kbc.select(kbc.corpus_kernels(corpus), fraction, seed, list(problems))
        drawn = kbe.draw(corpus, fraction, seed, problems)
        assert [s.kernel for s in drawn] == [k.id for k in expected]
        assert all(s.reference.is_file() and s.source.is_file() for s in drawn)
    first = kbe.draw(corpus)[0]
    assert (first.kernel, first.problem, first.level, first.corpus_verdict) == (
        "l1_p1/model0_000000",
        "kb_l1/l1_p1",
        1,
        "correct",
    )
    assert first.reference == corpus / "problems" / "kb_l1" / "l1_p1.py"


def test_the_wrappers_draw_is_61_kernels_of_46_problems() -> None:
    corpus = ROOT / ".kbcorpus"
    if not (corpus / "solutions").is_dir():
        pytest.skip("no .kbcorpus/ in this checkout")
    drawn = kbe.draw(corpus, 0.23, 7)
    assert (len(drawn), len({s.problem for s in drawn})) == (61, 46)
    assert [s.kernel for s in drawn] == [k.id for k in kbc.select(kbc.corpus_kernels(corpus), 0.23, 7)]


def outcome(result: Any = None, **kw: Any) -> Any:
    payload = None if result is False else {"result": result, "device_name": "GPU", "stand_ins": ["tqdm"]}
    return kbe.Outcome(payload, kw.pop("seconds", 4.0), kw.pop("exit", 0), **kw)


def kb_result(compiled: bool = True, correctness: bool = True, **fields: Any) -> dict[str, Any]:
    result = {"compiled": compiled, "correctness": correctness, "metadata": {}, "runtime": -1.0, "ref_runtime": -1.0}
    return {**result, **fields}


def test_a_kernelbench_result_becomes_a_verdict_line(corpus: Path) -> None:
    sample = kbe.draw(corpus)[0]
    build = kbe.Build(True, 12.5)
    timed = kb_result(runtime=0.5, ref_runtime=1.0, metadata={"correctness_trials": "(5 / 5)"})
    line = kbe.sample_line(sample, outcome(timed), build)
    assert (line["verdict"], line["judged"], line["speedup"], line["reason"]) == ("correct", True, 2.0, "")
    assert (line["runtime_ms"], line["ref_runtime_ms"], line["build"]["seconds"]) == (0.5, 1.0, 12.5)
    metadata = {
        "correctness_issue": "Output mismatch",
        "max_difference": ["0.5", "0.25"],
        "correctness_trials": "(3 / 5)",
    }
    line = kbe.sample_line(sample, outcome(kb_result(correctness=False, metadata=metadata, ref_runtime=1.0)), build)
    assert (line["verdict"], line["speedup"], line["ref_runtime_ms"]) == ("incorrect", None, 1.0)
    assert line["reason"] == "Output mismatch (max difference 0.5, 0.25), trials passed (3 / 5)"
    metadata = {"compilation_error": "ninja: build stopped\nerror", "compilation_error_name": "RuntimeError"}
    line = kbe.sample_line(sample, outcome(kb_result(compiled=False, correctness=False, metadata=metadata)), build)
    assert (line["verdict"], line["reason"]) == (
        "compile failed",
        "compilation_error: RuntimeError: ninja: build stopped error",
    )
    line = kbe.sample_line(sample, outcome(False, exit=None, timed_out=True), build)
    assert (line["verdict"], line["judged"], line["compiled"], line["metadata"]) == (
        "timed out",
        True,
        False,
        {"error": "Evaluation timed out"},
    )
    line = kbe.sample_line(sample, outcome(False, exit=-11, log_tail="Segmentation fault"), build)
    assert (line["verdict"], line["judged"]) == ("crashed", True) and "exited -11" in line["reason"]
    line = kbe.sample_line(sample, outcome(None), build)  # eval_kernel_against_ref returned None: retry
    assert (line["verdict"], line["judged"]) == ("no result", False)
    assert kbe.sample_line(sample, outcome(False, exit=None, cut=True), build) is None  # the budget ended it


def sample_line(kernel: str, verdict: str, **fields: Any) -> dict[str, Any]:
    correct = verdict == "correct"
    line: dict[str, Any] = {
        "kind": "sample",
        "kernel": kernel,
        "problem": "kb_l1/" + kernel.split("/")[0],
        "verdict": verdict,
    }
    line.update(judged=verdict != "no result", compiled=verdict != "compile failed", correctness=correct)
    line.update(reason="" if correct else "Output mismatch", seconds=5.0, build={"ok": True, "seconds": 30.0})
    line.update(corpus_verdict="correct", device_name="NVIDIA H100")
    return {**line, **fields}


def ours_line(kernel: str, status: str, profile: str = "loop", **fields: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "profile": profile,
        "kernel": kernel,
        "problem": "kb_l1/" + kernel.split("/")[0],
        "status": status,
    }
    line.update(flags=[], stricter=None, speedup=1.5 if status == "correct" else None)
    return {**line, **fields}


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"kind": "sam')  # a half-written last line
    return path


RESULTS = [
    sample_line("l1_p1/a", "correct", speedup=2.0),
    sample_line("l1_p1/b", "incorrect"),
    sample_line("l1_p2/c", "correct", excessive_speedup=True, speedup=12.0),
    sample_line("l1_p2/d", "correct"),
    sample_line("l1_p3/e", "no result"),
    sample_line("l1_p1/b", "correct", speedup=0.9),  # a later line of the same kernel wins
    {"kind": "call", "build_s": 100.0, "eval_s": 200.0, "wall_s": 300.0, "kernelbench": "423217d"},
    {"kind": "call", "build_s": 20.0, "eval_s": 40.0, "wall_s": 60.0, "kernelbench": "423217d"},
]


def test_the_report_counts_verdicts_per_gpu_hour_over_both_phases(tmp_path: Path) -> None:
    samples, calls = kbe.read_results(write_lines(tmp_path / "results.jsonl", RESULTS))
    assert samples["l1_p1/b"]["verdict"] == "correct" and len(calls) == 2
    text = kbe.report(samples, calls)
    assert "kernels with a line: 5; judged: 4" in text
    assert "build phase 120 s + eval phase 240 s = 360 s" in text
    assert "**verdicts per GPU-hour: 40** (4 judged / 0.100 h; eval phase alone 60)" in text
    assert "verdicts: correct 4, no result 1" in text
    assert "excessive speedup flagged (metadata only, not a verdict): l1_p2/c" in text
    assert "| kb_l1/l1_p1 | b | correct |  |" in text
    assert "Against ours" not in text
    assert "verdicts per GPU-hour: n/a" in kbe.report(samples, [])
    assert "stopped in flight" not in text  # no call lost a build
    stopped = [{**calls[0], "build_lost": 3, "build_lost_s": 150.4}, calls[1]]
    assert "stopped in flight, built again by a later call: 3 (150 build-seconds lost" in kbe.report(samples, stopped)


def test_the_report_lists_the_kernels_whose_verdicts_differ_from_ours(tmp_path: Path) -> None:
    samples, calls = kbe.read_results(write_lines(tmp_path / "results.jsonl", RESULTS))
    flag = {"code": "implausible-time", "policy": "fail", "reason": "below the bytes floor"}
    ours = [
        ours_line("l1_p1/a", "incorrect", stricter={"code": "redraw", "detail": "fresh inputs"}),  # KB correct
        ours_line("l1_p1/b", "correct"),  # agree
        ours_line("l1_p2/c", "correct", flags=[flag]),  # a failing flag: not correct, KB correct
        ours_line("l1_p2/d", "needs CUDA"),  # not judged
        ours_line("l1_p2/d", "incorrect", profile="default"),  # another profile: left out
        ours_line("l1_p4/f", "correct"),  # ours only
    ]
    state = kbc.read_state(write_lines(tmp_path / "state.jsonl", ours))
    differ, both, kb_only, ours_only = kbe.differences(samples, state, "loop")
    assert [(kb["kernel"], mine["status"]) for kb, mine in differ] == [("l1_p1/a", "incorrect"), ("l1_p2/c", "correct")]
    assert (both, kb_only, ours_only) == (3, ["l1_p2/d"], ["l1_p4/f"])
    text = kbe.report(samples, calls, state, "state.jsonl", "loop")
    assert "judged by both: 3; agree 1; differ 2 (KernelBench's eval correct, ours not: 2;" in text
    assert "| kb_l1/l1_p1 | a | correct | incorrect | redraw | 2.00x |  |" in text
    assert (
        "| kb_l1/l1_p2 | c | correct | correct (!implausible-time) | flag:implausible-time | 12.00x | 1.50x |" in text
    )
    reverse = [ours_line("l1_p1/b", "correct"), ours_line("l1_p1/a", "correct")]
    samples["l1_p1/a"] = sample_line("l1_p1/a", "incorrect")
    differ, *_ = kbe.differences(samples, kbc.read_state(write_lines(tmp_path / "s2.jsonl", reverse)), "loop")
    assert [(kb["verdict"], mine["status"]) for kb, mine in differ] == [("incorrect", "correct")]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fake_builder(task: tuple[str, str, str, str]) -> tuple[bool, str, float]:
    Path(task[1]).mkdir(parents=True, exist_ok=True)
    return True, "", 1.0


def test_the_budget_ends_a_call_and_the_next_call_goes_on(tmp_path: Path, corpus: Path) -> None:
    args = make_args(tmp_path, corpus, "--budget-s", "35", "--min-start-s", "6", "--timeout-s", "20")
    samples = kbe.draw(corpus)
    clock, seen = Clock(), []

    def evaluator(sample: Any, args: Any, limit: float) -> Any:
        seen.append((sample.kernel, limit))
        if limit < 10:  # needs 10 s: the budget ends it first
            clock.t += limit
            return kbe.Outcome(None, limit, None, cut=True)
        clock.t += 10
        return kbe.Outcome({"result": kb_result(runtime=1.0, ref_runtime=2.0)}, 10.0, 0)

    first = kbe.run_call(args, samples, fake_builder, ThreadPool, evaluator, clock)
    assert (first["stopped"], first["evaluated"], first["judged"], first["pending"]) == ("budget", 3, 3, len(samples))
    assert first["built_ok"] == len(samples) and first["eval_s"] == 30.0
    assert [limit for _, limit in seen] == [20, 20, 15]  # then 5 s left: under --min-start-s, not started
    done, calls = kbe.read_results(args.results)
    assert list(done) == [s.kernel for s in samples[:3]] and len(calls) == 1

    seen.clear()
    args.min_start_s = 1
    second = kbe.run_call(args, samples, fake_builder, ThreadPool, evaluator, clock)
    assert second["pending"] == len(samples) - 3 and [k for k, _ in seen][0] == samples[3].kernel
    assert (second["evaluated"], seen[-1][1]) == (3, 5)  # the fourth one had 5 s: cut, no line
    done, calls = kbe.read_results(args.results)
    assert len(done) == 6 and len(calls) == 2

    args.budget_s = None
    third = kbe.run_call(args, samples, fake_builder, ThreadPool, evaluator, clock)
    assert (third["stopped"], third["pending"], third["evaluated"]) == ("done", len(samples) - 6, len(samples) - 6)
    done, calls = kbe.read_results(args.results)
    assert set(done) == {s.kernel for s in samples} and all(line["judged"] for line in done.values())
    assert kbe.run_call(args, samples, fake_builder, ThreadPool, evaluator, clock)["pending"] == 0
    assert "kernels with a line: 13; judged: 13" in kbe.report(done, calls)


def test_a_kernel_past_its_timeout_is_failed_and_loses_its_build(tmp_path: Path, corpus: Path) -> None:
    args = make_args(tmp_path, corpus, "--problems", "l1_p2", "--timeout-s", "20")
    samples = kbe.draw(corpus, problems=["l1_p2"])

    def evaluator(sample: Any, args: Any, limit: float) -> Any:
        assert sample.build_dir(args.builds).is_dir()
        return kbe.Outcome(None, limit, None, timed_out=True)

    call = kbe.run_call(args, samples, fake_builder, ThreadPool, evaluator, Clock())
    assert (call["stopped"], call["judged"]) == ("done", 1)
    line = kbe.read_results(args.results)[0][samples[0].kernel]
    assert (line["verdict"], line["compiled"], line["correctness"]) == ("timed out", False, False)
    assert not samples[0].build_dir(args.builds).exists()


def test_a_build_past_its_timeout_is_marked_and_the_budget_stops_the_build_phase(tmp_path: Path, corpus: Path) -> None:
    args = make_args(tmp_path, corpus, "--timeout-s", "20", "--workers", "2")
    samples = kbe.draw(corpus)[:3]

    class Ticking(Clock):
        def __call__(self) -> float:
            self.t += 2
            return self.t

    def builder(task: tuple[str, str, str, str]) -> tuple[bool, str, float]:
        if task[0] != str(samples[2].source):  # the first two hang past their timeout
            time.sleep(0.6)
        return True, "", 0.0

    builds, stopped, lost = kbe.build_phase(samples, args, float("inf"), ThreadPool, builder, Ticking())
    assert not stopped and [builds[s.kernel].ok for s in samples] == [None, None, True] and lost == {}
    assert builds[samples[0].kernel].error == "build timed out"  # the third's timeout ran from when it started
    builds, stopped, lost = kbe.build_phase(samples, args, 1010.0, ThreadPool, builder, Ticking())
    # the two that had a worker were in flight: their work is lost; the third had not started
    assert stopped and builds == {} and sorted(lost) == sorted(s.kernel for s in samples[:2])



def test_the_build_phase_removes_the_build_locks_a_call_stopped_mid_build_left(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch guards an extension's folder with a file `lock` (its FileBaton) and waits for ever while one is there
    from torch.utils.file_baton import FileBaton

    args = make_args(tmp_path, corpus)
    samples = kbe.draw(corpus)[:3]
    first, second, other = (s.build_dir(args.builds) for s in samples)
    for folder in (first / "ext", second):
        folder.mkdir(parents=True)
        (folder / "lock").write_text("")
    (first / "ext" / "build.ninja").write_text("kept")
    (first / "lock.d").mkdir()  # not a baton: kept
    other.mkdir(parents=True)
    (other / "lock").write_text("")  # not to be built in this call: left alone

    def builder(task: tuple[str, str, str, str]) -> tuple[bool, str, float]:
        for folder in (Path(task[1]), Path(task[1]) / "ext"):  # build_directory, or TORCH_EXTENSIONS_DIR's subfolder
            folder.mkdir(parents=True, exist_ok=True)
            baton = FileBaton(str(folder / "lock"))
            if not baton.try_acquire():  # torch would wait on it for ever
                return False, "stale lock", 0.0
            baton.release()
        return True, "", 0.0

    builds, stopped, _ = kbe.build_phase(samples[:2], args, float("inf"), ThreadPool, builder, Clock())
    assert not stopped and [builds[s.kernel].ok for s in samples[:2]] == [True, True]
    assert "removed 2 stale build lock(s) left by an interrupted call" in capsys.readouterr().err
    assert not (first / "ext" / "lock").exists() and not (second / "lock").exists()
    assert (first / "ext" / "build.ninja").read_text() == "kept" and (first / "lock.d").is_dir()
    assert (other / "lock").is_file()
    assert kbe.remove_stale_locks(samples[:2], args.builds) == []


def _sleeps(_: int) -> bool:
    import subprocess

    subprocess.run(["sleep", "60"])  # a compiler, in the worker's process group
    return True


def test_a_pool_stopped_with_a_worker_idle_stops_at_once() -> None:
    # a worker idle at the stop waits for a task with the task queue's lock taken, and dies holding it; terminate
    # then waited on that lock for ever (the build phase that ran past its budget on the H200)
    import multiprocessing
    import threading

    pool = multiprocessing.get_context("fork").Pool(2, initializer=kbe._own_session)
    job = pool.apply_async(_sleeps, (0,))
    time.sleep(1.0)  # one worker in its task, the other idle
    stopper = threading.Thread(target=kbe.stop_pool, args=(pool,), daemon=True)
    stopper.start()
    stopper.join(timeout=30)
    assert not stopper.is_alive(), "stop_pool hung"
    assert not job.ready() or not job.successful()


def test_stand_ins_replace_the_missing_imports_the_eval_does_not_use(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    for name in kbe.STAND_IN_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("tqdm", "pydantic") else real_find_spec(name, *a)
    )
    try:
        used = kbe.stand_ins()
        assert set(used) <= set(kbe.STAND_IN_MODULES) and {"tqdm", "pydantic"} <= set(used)
        assert list(sys.modules["tqdm"].tqdm([1, 2])) == [1, 2]
        base: Any = sys.modules["pydantic"].BaseModel
    finally:
        for name in kbe.STAND_IN_MODULES:
            if name in sys.modules and isinstance(getattr(sys.modules[name], "__spec__", 0), type(None)):
                del sys.modules[name]

    class Result(base):  # KernelExecResult's shape
        compiled: bool = False
        correctness: bool = False
        metadata: dict = {}
        runtime: float = -1.0

    one, two = Result(compiled=True), Result()
    one.metadata["x"] = ValueError("boom")
    assert two.metadata == {} and (one.compiled, two.compiled, one.runtime) == (True, False, -1.0)
    fields = kbe.result_fields(one)
    assert fields["metadata"] == {"x": "boom"} and fields["ref_runtime"] == -1.0 and json.dumps(fields)


PYTHON_KERNEL = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def test_kernelbench_builds_a_compile_cache_in_a_build_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (kbe.EVAL_SRC / "kernelbench" / "eval.py").is_file():
        pytest.skip("KernelBench's eval is not fetched (benchmarks/kernelbench_fetch.sh)")
    monkeypatch.setenv("TORCH_USE_CUDA_DSA", "0")  # build_compile_cache sets both: restored after the test
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    before = set(sys.modules)
    source = tmp_path / "kernel.py"
    source.write_text(PYTHON_KERNEL)
    try:
        log = tmp_path / "logs" / "k.build.log"
        ok, error, seconds = kbe.build_one((str(source), str(tmp_path / "build"), str(kbe.EVAL_SRC), str(log)))
        assert (ok, error) == (True, "") and seconds >= 0 and log.is_file()
        source.write_text("raise RuntimeError('nvcc not found')\n")  # what a failed load_inline raises
        ok, error, _ = kbe.build_one((str(source), str(tmp_path / "build"), str(kbe.EVAL_SRC), str(log)))
        assert (ok, error) == (False, "nvcc not found")
        assert "[Compilation] Failed to compile custom CUDA kernel" in log.read_text()
    finally:
        for name in set(sys.modules) - before:
            if name.split(".")[0] in ("kernelbench", *kbe.STAND_IN_MODULES) and not name.startswith("torch"):
                del sys.modules[name]
