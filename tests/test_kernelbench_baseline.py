"""KernelBench's published baseline timing JSON: loading it, refusing bad files in one line, fast_p
against it (mean over mean), and `leaderboard --kernelbench-baseline`."""
import json

import pytest

from harness.core.errors import UserError
from harness.core.records import ReferenceRecord, RunHeader, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore
from harness.views.kbtiming import fast_p_against, level_of, load_baseline
from tests.records import candidate_record, reference_record


def entry(mean, hardware="NVIDIA H100 80GB HBM3"):
    """One problem's timing as KernelBench's results/timing/*/baseline_time_torch.json has it."""
    return {"mean": mean, "std": 0.0199, "min": mean * 0.99, "max": mean * 1.1, "num_trials": 100, "hardware": hardware, "device": "cuda:0"}


BASELINE = {
    "level1": {"19_ReLU.py": entry(2.0), "1_Square_matrix_multiplication_.py": entry(2.66)},
    "level2": {"19_ConvTranspose2d_GELU_GroupNorm.py": entry(4.0)},
}


def write_baseline(tmp_path, content=BASELINE, name="baseline_time_torch.json"):
    path = tmp_path / "H100_Modal" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def timing(ms):
    return TimingStats.from_samples([ms * 0.9, ms * 1.1], timer="cuda_events", warmup_calls=1, stopped_by="target_rse")  # mean: ms


def candidate(problem, name, status, ms=None, run_id="kb"):
    correct = status is Status.CORRECT
    return candidate_record(
        run_id=run_id, problem=problem, problem_hash="h", candidate=name, candidate_path=f"{name}.py", candidate_hash="x",
        device="cuda", status=status, reason="matched 10 calls" if correct else "trial 1 (eval): output 0 differs",
        timing=timing(ms) if ms else None, reference_ms=1.0 if ms else None, speedup=1.0 / ms if ms and correct else None,
    )


def reference(problem, level, ref_ms=1.0, run_id="kb"):
    return reference_record(
        run_id=run_id, problem=problem, problem_hash="h", problem_path=f"/trees/KernelBench/{level}/{problem}.py", device="cuda",
        device_name="NVIDIA H100 80GB HBM3", ok=True, reason="ok", timing=timing(ref_ms),
    )


RECORDS = [
    candidate("19_ReLU", "fast", Status.CORRECT, ms=0.5),  # 2.0 / 0.5 = 4x over the baseline
    candidate("19_ReLU", "slow", Status.CORRECT, ms=4.0),  # 0.5x
    candidate("19_ReLU", "wrong_fast", Status.INCORRECT, ms=0.1),  # 20x, but incorrect: never counts
    candidate("19_ReLU", "gpu_only", Status.NEEDS_CUDA),  # not evaluated
    candidate("7_Mine", "ok", Status.CORRECT, ms=1.0),  # not in the baseline
]
REFERENCES = [reference("19_ReLU", "level1", ref_ms=1.8), reference("19_ReLU", "level1", ref_ms=2.2), reference("7_Mine", "level1")]


def test_a_good_file_loads_with_its_hardware_and_name(tmp_path):
    baseline = load_baseline(write_baseline(tmp_path))
    assert baseline.source == "H100_Modal/baseline_time_torch.json" and baseline.hardware == "NVIDIA H100 80GB HBM3"
    assert baseline.find("19_ReLU", "level1").mean_ms == 2.0 and baseline.find("19_ReLU", "level1").num_trials == 100
    assert baseline.find("19_ReLU", "level2") is None  # levels are kept apart
    assert baseline.find("19_ConvTranspose2d_GELU_GroupNorm", "").level == "level2"  # no level known: a name in one level only


@pytest.mark.parametrize("content, says", [
    (None, "no such"),
    ("{not json", "not JSON"),
    ([1, 2], "expected an object of levels"),
    ({}, "expected an object of levels"),
    ({"lvl1": {"19_ReLU.py": entry(1.0)}}, "'lvl1' is not a level"),
    ({"level1": []}, "'level1' is not a level"),
    ({"level1": {}}, "no problem timings"),
    ({"level1": {"19_ReLU.py": [1.0]}}, "level1/19_ReLU.py: expected a problem file name"),
    ({"level1": {"19_ReLU": entry(1.0)}}, "level1/19_ReLU: expected a problem file name"),
    ({"level1": {"19_ReLU.py": {"std": 0.1}}}, "'mean' is missing"),
    ({"level1": {"19_ReLU.py": {"mean": "2.0"}}}, "'mean' is not a number"),
    ({"level1": {"19_ReLU.py": {"mean": True}}}, "'mean' is not a number"),
    ({"level1": {"19_ReLU.py": entry(0.0)}}, "'mean' must be a positive time"),
    ({"level1": {"19_ReLU.py": entry(-1.5)}}, "'mean' must be a positive time"),
])
def test_a_bad_file_is_a_one_line_user_error_naming_it(tmp_path, content, says):
    path = tmp_path / "H100_Modal" / "missing.json" if content is None else write_baseline(tmp_path, content)
    with pytest.raises(UserError) as caught:
        load_baseline(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and says in message


def test_an_unreadable_file_is_a_user_error(tmp_path):
    path = write_baseline(tmp_path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match="cannot be read|not JSON"):
        load_baseline(path)


def test_fast_p_against_the_baseline_counts_correct_candidates_by_mean_over_mean(tmp_path):
    table = fast_p_against(RECORDS, REFERENCES, load_baseline(write_baseline(tmp_path)), (0.0, 1.0, 2.0, 5.0))
    mine, relu = table.problems  # natural order: 7 before 19
    assert relu.problem == "19_ReLU" and relu.level == "level1" and relu.evaluated == 3 and relu.correct == 2
    assert relu.fast_p == pytest.approx({0.0: 2 / 3, 1.0: 1 / 3, 2.0: 1 / 3, 5.0: 0.0})  # only "fast" beats 1x; "wrong_fast" never counts
    assert relu.baseline_ms == 2.0 and relu.reference_ms == pytest.approx(2.0)  # the median over the two lanes' means
    assert relu.reference_vs_baseline == pytest.approx(1.0) and relu.missing == ""
    assert mine.missing == "level1/7_Mine.py is not in H100_Modal/baseline_time_torch.json"  # reported, not dropped
    assert mine.fast_p == {0.0: None, 1.0: None, 2.0: None, 5.0: None} and mine.reference_vs_baseline is None
    assert table.devices == ("NVIDIA H100 80GB HBM3",)


def test_the_level_comes_from_the_reference_path_and_is_needed_when_a_name_is_in_several_levels(tmp_path):
    content = {"level1": {"19_ReLU.py": entry(2.0)}, "level2": {"19_ReLU.py": entry(8.0)}}
    baseline = load_baseline(write_baseline(tmp_path, content))
    records = [candidate("19_ReLU", "fast", Status.CORRECT, ms=1.0)]
    (row,) = fast_p_against(records, [reference("19_ReLU", "level2")], baseline, (2.0,)).problems
    assert row.level == "level2" and row.fast_p == {2.0: 1.0}  # 8.0 / 1.0
    (row,) = fast_p_against(records, [], baseline, (2.0,)).problems  # no reference record: the level is unknown
    assert row.fast_p == {2.0: None} and "in level1, level2" in row.missing and "level is not known" in row.missing
    assert level_of("problems/level3/1_MLP.py") == "level3" and level_of("/somewhere/else/1_MLP.py") == ""


def test_a_later_record_for_the_same_candidate_replaces_an_earlier_one(tmp_path):
    records = [candidate("19_ReLU", "c", Status.INCORRECT, ms=0.5), candidate("19_ReLU", "c", Status.CORRECT, ms=0.5)]
    (row,) = fast_p_against(records, REFERENCES, load_baseline(write_baseline(tmp_path)), (1.0,)).problems
    assert row.evaluated == 1 and row.fast_p == {1.0: 1.0}


def run_folder(tmp_path):
    store = RunStore(tmp_path / "results", "kb")
    store.append(RunHeader(run_id="kb", started_at="2026-11-21T00:00:00+00:00", argv=(), config={"leaderboard": {"fast_p": [0.0, 1.0]}}, environment={}))
    for record in REFERENCES + RECORDS:
        store.append(record)
    return store.dir


def test_the_leaderboard_command_writes_fast_p_against_the_baseline(tmp_path, capsys):
    from harness.__main__ import main

    run_dir, baseline = run_folder(tmp_path), write_baseline(tmp_path)
    assert main(["leaderboard", str(run_dir), "--no-plots", "--kernelbench-baseline", str(baseline)]) == 0
    markdown = (run_dir / "fast_p_kernelbench.md").read_text()
    assert "`H100_Modal/baseline_time_torch.json` (NVIDIA H100 80GB HBM3)" in markdown and "the honest one" in markdown
    assert "| 19_ReLU | level1 | 3 | 2 | 67% | 33% | 2 | 2 | 1.00x |  |" in markdown
    assert "| 7_Mine | level1 | 1 | 1 |  |  |  | 1 |  | level1/7_Mine.py is not in H100_Modal/baseline_time_torch.json |" in markdown
    csv = (run_dir / "fast_p_kernelbench.csv").read_text().splitlines()
    assert csv[0] == "problem,level,evaluated,correct,fast_0,fast_1,kb_mean_ms,reference_mean_ms,reference_vs_kb,missing"
    assert csv[2].startswith("19_ReLU,level1,3,2,0.666667,0.333333,2,2,1,")  # after 7_Mine
    out = capsys.readouterr()
    assert "fast_p against KernelBench's H100_Modal/baseline_time_torch.json" in out.out
    assert "note: fast_p against KernelBench's published timings" in out.out and "fast_p_kernelbench.md" in out.err
    assert (run_dir / "leaderboard.md").is_file()  # the leaderboard itself as before


def test_the_leaderboard_command_refuses_a_bad_baseline_with_exit_code_1_and_writes_nothing(tmp_path, capsys):
    from harness.__main__ import main

    run_dir = run_folder(tmp_path)
    bad = write_baseline(tmp_path, {"level1": {"19_ReLU.py": {"std": 0.1}}})
    assert main(["leaderboard", str(run_dir), "--no-plots", "--kernelbench-baseline", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}: level1/19_ReLU.py: 'mean' is missing"
    assert not (run_dir / "leaderboard.md").exists() and not (run_dir / "fast_p_kernelbench.md").exists()
