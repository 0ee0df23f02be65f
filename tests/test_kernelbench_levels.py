"""benchmarks/kernelbench_levels.py: the null candidate's rename, the summary, the problem list and
parts, and a resumed run over a two-problem KernelBench-layout tree on the CPU."""
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("kernelbench_levels", ROOT / "benchmarks" / "kernelbench_levels.py")
kbl = importlib.util.module_from_spec(_spec)
sys.modules["kernelbench_levels"] = kbl
_spec.loader.exec_module(kbl)

TRICKY = '''import torch
import torch.nn as nn


class ModelConfig:
    """Settings for a Model; not the Model itself."""
    width = 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(ModelConfig.width, ModelConfig.width)

    def forward(self, x):
        return self.lin(x)


class Model(nn.Module):
    """Model that applies a block."""
    def __init__(self):
        super(Model, self).__init__()  # Model's parent
        self.block = Block()
        self.name = "Model"
        self.other = torch.nn.Model if hasattr(torch.nn, "Model") else None

    def forward(self, x):
        return self.block(x)


def build():
    return Model()
'''


def test_the_null_candidate_renames_the_class_and_its_uses_only():
    out = kbl.null_candidate(TRICKY)
    tree = ast.parse(out)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["ModelConfig", "Block", "ModelNew"]
    assert "super(ModelNew, self).__init__()" in out
    assert "ModelConfig.width" in out and "ModelNewConfig" not in out
    assert "return ModelNew()" in out
    # strings, comments and docstrings keep `Model`; so does an attribute of something else
    assert '"""Model that applies a block."""' in out and "# Model's parent" in out and 'self.name = "Model"' in out
    assert "torch.nn.Model if hasattr(torch.nn, \"Model\")" in out
    assert not any(isinstance(n, ast.Name) and n.id == "Model" for n in ast.walk(tree))


def test_a_source_that_does_not_tokenize_still_gets_the_rename():
    assert kbl.null_candidate("class Model(:\n    super(Model, self)\n  x = ModelConfig") == "class ModelNew(:\n    super(ModelNew, self)\n  x = ModelConfig"


def test_the_problem_list_is_in_level_and_id_order_and_parts_slice_it(tmp_path):
    for name in ("level1/10_B.py", "level1/2_A.py", "level2/1_C.py", "level3/1_D.py", "level1/_helper.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    entries = kbl.problem_list(tmp_path, [1, 2])
    assert [e.key for e in entries] == ["level1/2_A", "level1/10_B", "level2/1_C"]
    assert [e.key for e in kbl.select(entries, [], 1, 1)] == ["level1/10_B"]
    assert [e.key for e in kbl.select(entries, ["level2/1", "level1/2_A.py"], 0, None)] == ["level1/2_A", "level2/1_C"]
    with pytest.raises(SystemExit, match="level3/1_D"):
        kbl.select(entries, ["level3/1_D"], 0, None)


def test_the_budget_stops_before_a_problem_that_would_not_fit():
    assert not kbl.should_stop(None, 10_000, [1.0])
    assert not kbl.should_stop(100, 0, [])  # nothing known yet: the first problem starts
    assert not kbl.should_stop(100, 50, [20, 30, 40])
    assert kbl.should_stop(100, 75, [20, 30, 40])


def test_the_lint_report_is_read_back_into_a_verdict():
    markdown = "\n".join([
        "| problem | check | verdict | detail |", "|---|---|---|---|",
        "| 1_A | deterministic | pass | same |",
        "| 1_A | zeros fail | **fail** | an all-zeros output matches 100.00% of elements |",
        "| 1_A | time in range | warn | eager reference 0.2 ms |",
        "| 1_AB | zeros fail | pass | other problem |",
    ])
    checks = kbl.parse_lint(markdown, "1_A")
    assert [(c, v) for c, v, _ in checks] == [("deterministic", "pass"), ("zeros fail", "fail"), ("time in range", "warn")]
    assert kbl.lint_verdict(checks) == ("fail", "zeros fail: an all-zeros output matches 100.00% of elements")
    assert kbl.lint_verdict(checks[:1] + checks[2:])[0] == "warn"
    assert kbl.lint_verdict(checks[:1]) == ("pass", "")


def test_the_lint_report_of_a_name_and_details_that_markdown_escapes_is_read_back_as_written(tmp_path):
    # KernelBench's level-1 names end in `_` (1_Square_matrix_multiplication_), which the report escapes; details
    # may hold pipes and angle brackets. Read back, they are the lint's own words, not a parse failure.
    from harness.commands.lint import report
    from harness.judge.lint import LintCheck
    from harness.sources.problem import Problem

    path = tmp_path / "1_Square_matrix_multiplication_.py"
    path.write_text("import torch\n")
    problem = Problem(name=path.stem, level="level1", path=path)
    checks = [
        LintCheck("deterministic", "pass", "max |a - b| = 0 over 2 calls"),
        LintCheck("fits in memory", "fail", "needs <24 GiB & more\nsee the log"),
    ]
    markdown = report([(problem, checks)], "cuda")
    assert kbl.parse_lint(markdown, path.stem) == [
        ("deterministic", "pass", "max |a - b| = 0 over 2 calls"),
        ("fits in memory", "fail", "needs <24 GiB & more\nsee the log"),
    ]


def test_a_half_written_line_is_skipped_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"problem": "level1/1_A", "wall_s": 1}) + "\n" + '{"problem": "level1/2_B", "wa')
    assert [line["problem"] for line in kbl.read_results(path)] == ["level1/1_A"]
    kbl.append_line(path, {"problem": "level1/2_B", "wall_s": 2})
    assert [json.loads(t)["problem"] for t in path.read_text().splitlines()] == ["level1/1_A", "level1/2_B"]


def _line(problem, status="correct", speedup=1.0, low=None, high=None, wall=10.0, lint=("pass", "", {}), **extra):
    level, name = problem.split("/")
    line = {"problem": problem, "level": int(level[-1]), "id": int(name.split("_")[0]), "name": name, "exit": 0 if status == "correct" else 2,
            "timed_out": False, "status": status, "reason": "why", "speedup": speedup, "low": low, "high": high, "wall_s": wall,
            "lint_verdict": lint[0], "lint_reason": lint[1], "lint_checks": lint[2], "reference_ms": 2.0, "protocol": "eager, stream sync"}
    line.update(extra)
    return line


def test_the_summary_counts_completion_null_floors_degenerate_problems_and_compares_with_kernelbench(tmp_path):
    lines = [
        _line("level1/1_A", speedup=1.01, low=0.99, high=1.02, wall=10, reference_ms=4.0),
        _line("level1/2_B", speedup=0.97, low=0.95, high=0.99, wall=20, reference_ms=1.0),
        _line("level1/3_C", speedup=1.10, low=1.05, high=1.20, wall=30, lint=("fail", "zeros fail: an all-zeros output matches 100.00% of elements", {"zeros fail": "fail"})),
        _line("level2/1_D", status="incorrect", speedup=None, wall=40, reason="trial 1 (train): values differ", log_tail="Traceback"),
        _line("level3/1_E", status=None, speedup=None, wall=600, exit=None, timed_out=True, reason="run.py ran past its limit (600 s)",
              lint=("fail", "fits in memory: peak 30 GiB", {"fits in memory": "fail"})),
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    theirs = {"level1/1_A": 2.0, "level1/2_B": 1.0, "level1/9_Z": 5.0}
    text = kbl.summarize(kbl.read_results(path), total=250, kernelbench=theirs)
    assert "4 problem(s) with a verdict / 5 attempted / 250 in the tree (1.6% of the tree)" in text
    assert "| level3/1_E |  | yes | 600 | run.py ran past its limit (600 s) |" in text  # did not complete, with its reason
    assert "| level2/1_D | incorrect |" in text  # a null candidate that is not correct is listed apart
    assert "1 of 3 timed null candidates read 1.00 +/- 0.02x" in text
    outside = text.split("Outside the band:")[1].split("##")[0]
    assert "level1/3_C | 1.100x [1.050, 1.200] | no" in outside and "level1/2_B | 0.970x [0.950, 0.990] | no" in outside
    assert outside.index("level1/3_C") < outside.index("level1/2_B")  # furthest from 1.00 first
    assert "level1/1_A" not in outside
    assert "| all | 5 | 30 | 376 | 600 | 700 |" in text  # median, p90, max, total
    degenerate = text.split("Degenerate")[1].split("Other lint failures")[0]
    assert "level1/3_C | fail | zeros fail" in degenerate and "level3/1_E" not in degenerate
    assert "| level3/1_E | fail | fits in memory: peak 30 GiB |" in text.split("Other lint failures")[1]
    compared = text.split("against KernelBench's baseline")[1]
    assert "2 problem(s) in both" in compared
    assert compared.split("All, by ratio:")[1].index("level1/2_B") < compared.split("All, by ratio:")[1].index("level1/1_A")
    assert "| level1/1_A | 4 | 2 | 2.000 | eager, stream sync |" in compared


def test_kernelbench_baseline_timings_are_read_by_level_and_file(tmp_path):
    path = tmp_path / "baseline_time_torch.json"
    path.write_text(json.dumps({"level1": {"19_ReLU.py": {"mean": 1.5, "std": 0.1}}, "level2": {"1_X.py": {"mean": 3}}}))
    assert kbl.load_kernelbench_baseline(path) == {"level1/19_ReLU": 1.5, "level2/1_X": 3.0}


TINY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super(Model, self).__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


batch_size = 4


def get_inputs():
    return [torch.randn(batch_size, 8)]


def get_init_inputs():
    return [{scale}]
'''


@pytest.mark.slow
def test_a_run_over_a_tiny_tree_is_resumed_without_rerunning_anything(tmp_path):
    tree, state = tmp_path / "KernelBench", tmp_path / "state"
    for name, scale in (("1_Tiny", 2.0), ("2_Tinier", 0.5)):
        (tree / "level1").mkdir(parents=True, exist_ok=True)
        (tree / "level1" / f"{name}.py").write_text(TINY.format(scale=scale))
    command = [sys.executable, str(ROOT / "benchmarks" / "kernelbench_levels.py"), "--tree", str(tree), "--state", str(state), "--device", "cpu",
               "--set", "timing.enabled=false", "--set", "check.trials=1", "--set", "baselines.compile_modes=[]"]
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [json.loads(t) for t in (state / "results.jsonl").read_text().splitlines()]
    assert [line["problem"] for line in lines] == ["level1/1_Tiny", "level1/2_Tinier"]
    for line in lines:  # a verdict for each (correct, or `no custom kernel` under a stricter flag policy)
        assert line["status"] in ("correct", "no custom kernel") and line["exit"] in (0, 2) and not line["timed_out"], line
        assert line["lint_verdict"] == "pass" and line["reference_ok"] and line["wall_s"] > 0
    assert not any((state / "tmp").iterdir()) and not any((state / "results").iterdir())  # nothing left behind

    again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 0 and "ran 0 problem(s)" in again.stderr, again.stderr[-2000:]
    assert (state / "results.jsonl").read_text().count("\n") == 2

    summary = subprocess.run([*command[:2], "--state", str(state), "--summary", str(tmp_path / "summary.md")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert "2 problem(s) with a verdict / 2 attempted / 2 in the tree" in (tmp_path / "summary.md").read_text()


def test_a_loss_that_fails_only_the_constant_check_is_marked_as_a_one_element_output():
    lines = [
        _line("level1/94_MSELoss", lint=("fail", "constant fails: matches 100.00%", {"constant fails": "fail", "zeros fail": "pass"})),
        _line("level1/95_X", lint=("fail", "constant fails: x; depends on inputs: y", {"constant fails": "fail", "depends on inputs": "fail"})),
        _line("level1/51_Argmax", lint=("fail", "floating outputs: the reference returns no floating tensor", {"floating outputs": "fail"})),
    ]
    text = kbl.summarize(lines)
    degenerate, other = text.split("Degenerate")[1].split("Other lint failures")
    assert "| level1/94_MSELoss | fail | constant fails: matches 100.00% | constant only" in degenerate
    assert "| level1/95_X | fail | constant fails: x; depends on inputs: y |  |" in degenerate
    assert "level1/51_Argmax" in other and "level1/51_Argmax" not in degenerate
