"""KernelBench as it is: its problem tree's names, its unsupported level 4, and its sample folders."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.sources.problem import resolve_problem
from harness.sources.samples import sample_targets
from tests.records import candidate_record

ROOT = Path(__file__).resolve().parent.parent

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 64


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''


@pytest.fixture
def tree(tmp_path):
    """A KernelBench-layout tree: KernelBench/level<N>/<id>_<Name>.py."""
    root = tmp_path / "KernelBench"
    for path, text in {
        "level1/19_ReLU.py": RELU,
        "level1/1_Square_matrix_multiplication_.py": RELU.replace("ReLU", "matmul"),
        "level2/19_ConvTranspose2d_GELU_GroupNorm.py": RELU,
        "level4/1_deepseek.py": RELU,
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.mark.parametrize("name", ["level1/19_ReLU", "level1/19_ReLU.py", "19_ReLU", "19_ReLU.py", "level1/19"])
def test_kernelbench_problem_names_resolve(tree, name):
    problem = resolve_problem(name, tree)
    assert (problem.level, problem.name) == ("level1", "19_ReLU")


def test_a_problem_id_is_looked_up_within_its_level(tree):
    assert resolve_problem("level2/19", tree).name == "19_ConvTranspose2d_GELU_GroupNorm"
    assert resolve_problem("level1/1", tree).name == "1_Square_matrix_multiplication_"
    with pytest.raises(UserError, match="no problem named 'level3/19'"):
        resolve_problem("level3/19", tree)


def test_level_4_is_reported_as_unsupported_offline_in_one_line(tree):
    with pytest.raises(UserError, match="level4/1_deepseek: KernelBench's level 4 builds its models from configurations on a model hub") as raised:
        resolve_problem("level4/1", tree)
    assert "\n" not in str(raised.value)


def _samples(folder):
    folder.mkdir(parents=True)
    correct = re.sub(r"\bModel\b", "ModelNew", RELU)  # the null candidate: Model renamed
    wrong = correct.replace("return torch.relu(x)", "return torch.relu(x) * 1.5")
    (folder / "level_1_problem_19_sample_0_kernel.py").write_text(correct)
    (folder / "level_1_problem_19_sample_1_kernel.py").write_text(wrong)
    (folder / "level_2_problem_19_sample_0_kernel.py").write_text(correct)
    (folder / "eval_results.json").write_text("{}")  # other files are left alone
    return folder


def test_sample_files_map_to_their_problems(tree, tmp_path):
    targets = sample_targets(_samples(tmp_path / "runs" / "test_run"), tree)
    assert [(p.level, p.name, [c.name for c in cs]) for p, cs in targets] == [
        ("level1", "19_ReLU", ["sample_0", "sample_1"]),
        ("level2", "19_ConvTranspose2d_GELU_GroupNorm", ["sample_0"]),
    ]
    (tmp_path / "runs" / "test_run" / "level_3_problem_7_sample_0_kernel.py").write_text("")
    with pytest.raises(UserError, match="level_3_problem_7_sample_0_kernel.py is for level 3 problem 7"):
        sample_targets(tmp_path / "runs" / "test_run", tree)
    with pytest.raises(UserError, match="no file named like"):
        sample_targets(tree / "level1", tree)


@pytest.mark.slow
def test_a_sample_folder_runs_against_the_kernelbench_tree_as_it_is(tree, tmp_path):
    folder = _samples(tmp_path / "runs" / "test_run")
    done = subprocess.run([
        sys.executable, "run.py", "--problems-dir", str(tree), "--samples", str(folder), "--device", "cpu",
        "--json", "--quiet", "--trials", "2", "--results", str(tmp_path / "results"), "--run-id", "kb",
        "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}",
        "--set", "flags.no_custom_kernel=flag",  # torch-only samples
        "--set", "baselines.compile_modes=[]", "--set", "timing.budget_s=0.2", "--set", "timing.warmup_ms=5",
        "--set", "timing.rounds=2", "--set", "timing.max_rounds=2",
    ], capture_output=True, text=True, cwd=ROOT, timeout=600)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    verdicts = {(r["identity"]["problem"], r["identity"]["candidate"]): r["decision"]["status"] for r in records if "identity" in r}
    assert verdicts == {
        ("19_ReLU", "sample_0"): "correct",
        ("19_ReLU", "sample_1"): "incorrect",
        ("19_ConvTranspose2d_GELU_GroupNorm", "sample_0"): "correct",
    }, done.stderr[-2000:]
    assert done.returncode == 2  # a sample failed

    # KernelBench's eval_results.json, one per level here (its runs hold one level each)
    run_dir = tmp_path / "results" / "kb"
    level1 = json.loads((run_dir / "eval_results_level1.json").read_text())
    level2 = json.loads((run_dir / "eval_results_level2.json").read_text())
    assert list(level1) == ["19"] and [e["sample_id"] for e in level1["19"]] == [0, 1] and list(level2) == ["19"]
    right, wrong = level1["19"]
    assert set(right) == {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"}
    assert right["compiled"] and right["correctness"] and right["runtime"] > 0
    assert right["runtime_stats"]["num_trials"] > 0 and right["runtime_stats"]["mean"] > 0  # milliseconds
    assert right["metadata"]["status"] == "correct" and right["metadata"]["speedup"] > 0
    assert [f["code"] for f in right["metadata"]["flags"]] == ["no-custom-kernel"]
    assert wrong["compiled"] and not wrong["correctness"] and wrong["runtime"] == -1.0 and wrong["runtime_stats"] == {}
    assert wrong["metadata"]["status"] == "incorrect" and wrong["metadata"]["reason"].startswith("trial")


def test_one_level_writes_eval_results_json_a_build_failure_is_not_compiled_and_a_never_judged_sample_is_left_out(tmp_path):
    from harness.core.status import Status
    from harness.sources.samples import write_eval_results

    def record(candidate, status):
        return candidate_record(run_id="r", problem="19_ReLU", problem_hash="h", candidate=candidate, candidate_path="x.py",
                               candidate_hash="x", device="cuda", status=status, reason="why")

    records = [record("sample_2", Status.BUILD_FAILED), record("sample_0", Status.FLAGGED), record("not_a_sample", Status.CORRECT)]
    never_judged = [record("sample_3", Status.NEEDS_CUDA), record("sample_4", Status.HARNESS_ERROR), record("sample_5", Status.REFERENCE_FAILED)]
    (path,) = write_eval_results(tmp_path, records + never_judged, {"19_ReLU": "level1"}, {})
    assert path.name == "eval_results.json"
    entries = json.loads(path.read_text())["19"]
    # a sample skipped for want of CUDA was never built: it is no failed kernel to KernelBench's analysis
    assert [(e["sample_id"], e["compiled"], e["correctness"]) for e in entries] == [(0, True, False), (2, False, False)]
