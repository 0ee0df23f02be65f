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


# ---------------------------------------------------------------- --batch: a group of problems in one run.py


def _tiny_tree(root, problems):
    """A KernelBench-layout tree of TINY problems: `problems` maps level<L>/<name> to the scale."""
    for key, scale in problems.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{key}.py").write_text(TINY.format(scale=scale))
    return root


def _argument(command, flag):
    return command[command.index(flag) + 1]


def _records(problem, speedup=1.0):
    """A reference and a null candidate record of `problem` (a file stem), as a run folder holds them."""
    from harness.core.records import SCHEMA_VERSION

    reference = {"kind": "reference", "identity": {"problem": problem, "device_name": "test device"}, "outcome": {"ok": True, "reason": "ok"},
                 "timing": {"stats": {"median_ms": 2.0, "timing_mode": "eager"}}, "schema_version": SCHEMA_VERSION}
    candidate = {"kind": "candidate", "identity": {"problem": problem, "candidate": "null"}, "decision": {"status": "correct", "reason": "matched"},
                 "timing": {"speedup": speedup, "reference_ms": 2.0, "paired": {"speedup": speedup, "low": speedup - 0.01, "high": speedup + 0.01, "protocol": "eager"}},
                 "schema_version": SCHEMA_VERSION}
    return [reference, candidate]


class FakeRuns:
    """Stands in for run_bounded: writes a reference and a candidate record for each problem of the run
    (or only those in `recorded`) into the run folder, prints the candidates as run.py --json does, and
    ends as told (timed out: stopped at its limit). Keeps each command and, for a batched run, the
    null candidates it was given."""

    def __init__(self, recorded=None, timed_out=False, exit=0, stderr=""):
        self.recorded, self.timed_out, self.exit, self.stderr = recorded, timed_out, exit, stderr
        self.commands, self.runs, self.given = [], [], []

    def __call__(self, command, limit, env, folder, name):
        self.commands.append(command)
        if command[2] == "lint":
            return kbl.Finished(0, 0.1, "", "", False, limit)
        self.runs.append(command)
        if "--all" in command:
            solutions = Path(json.loads(next(s for s in command if s.startswith("solutions_dir=")).split("=", 1)[1]))
            problems = sorted(p.name for p in solutions.iterdir())
            self.given.append({p: (solutions / p / "null.py").read_text() for p in problems})
        else:
            problems = [_argument(command, "--problem").split("/")[-1]]
        run = Path(_argument(command, "--results")) / _argument(command, "--run-id")
        run.mkdir(parents=True, exist_ok=True)
        printed = []
        with open(run / "records.jsonl", "w") as f:
            for problem in problems:
                if self.recorded is None or problem in self.recorded:
                    for record in _records(problem):
                        f.write(json.dumps(record) + "\n")
                    printed.append(json.dumps({k: v for k, v in record.items() if k != "kind"}))
        return kbl.Finished(None if self.timed_out else self.exit, 0.5, "\n".join(printed), self.stderr, self.timed_out, limit)


def _main(monkeypatch, runs, tree, state, *extra):
    monkeypatch.setattr(kbl, "run_bounded", runs)
    code = kbl.main(["--tree", str(tree), "--state", str(state), "--device", "cpu", *extra])
    lines = [json.loads(t) for t in (state / "results.jsonl").read_text().splitlines()] if (state / "results.jsonl").is_file() else []
    return code, lines


@pytest.mark.slow
def test_a_batch_runs_its_problems_null_candidates_in_one_run_and_gives_each_its_line(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_Tiny": 2.0, "level1/2_Tinier": 0.5, "level1/3_Tiniest": 1.5})
    state, started = tmp_path / "state", []
    real = kbl.run_bounded

    def counted(command, *rest):
        started.append(command)
        return real(command, *rest)

    monkeypatch.setattr(kbl, "run_bounded", counted)
    quick = ["baselines.compile_modes=[]", "check.trials=1", "timing.budget_s=0.2", "timing.warmup_ms=5", "timing.min_reps=2", "timing.rounds=2"]
    code = kbl.main(["--tree", str(tree), "--state", str(state), "--device", "cpu", "--batch", "3", *[w for s in quick for w in ("--set", s)]])
    assert code == 0
    assert len(started) == 1 and started[0][1:3] == ["run.py", "--all"]  # one run.py for the group, and no lint
    assert _argument(started[0], "--problems-dir") == str(tree / "level1")
    lines = [json.loads(t) for t in (state / "results.jsonl").read_text().splitlines()]
    assert [line["problem"] for line in lines] == ["level1/1_Tiny", "level1/2_Tinier", "level1/3_Tiniest"]
    for line in lines:
        assert line["status"] == "correct" and line["speedup"] > 0 and line["low"] <= line["speedup"] <= line["high"], line
        assert line["batch"] == 3 and line["exit"] == 0 and not line["timed_out"] and line["reference_ok"] and "lint_verdict" not in line
        assert line["wall_s"] == lines[0]["wall_s"] and abs(3 * line["wall_s"] - line["batch_wall_s"]) < 0.05  # the batch's share each
    assert not any((state / "tmp").iterdir()) and not any((state / "results").iterdir())  # nothing left behind
    assert "3 problem(s) run in batches (--batch, no lint): wall time per problem is the batch's share." in kbl.summarize(lines)


def test_a_batch_never_holds_problems_of_two_levels(tmp_path, monkeypatch):
    # the same file stem in two levels: each level is a run of its own, its solutions tree holding its own null candidate
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_Tiny": 2.0, "level1/2_Tinier": 0.5, "level2/1_Tiny": 3.0})
    runs = FakeRuns()
    code, lines = _main(monkeypatch, runs, tree, tmp_path / "state", "--batch", "5")
    assert code == 0
    assert [_argument(c, "--problems-dir") for c in runs.runs] == [str(tree / "level1"), str(tree / "level2")]
    assert [sorted(given) for given in runs.given] == [["1_Tiny", "2_Tinier"], ["1_Tiny"]]
    assert "return [3.0]" in runs.given[1]["1_Tiny"] and "class ModelNew(nn.Module)" in runs.given[1]["1_Tiny"]
    assert [(line["problem"], line["batch"], line["status"]) for line in lines] == [
        ("level1/1_Tiny", 2, "correct"), ("level1/2_Tinier", 2, "correct"), ("level2/1_Tiny", 1, "correct")]
    assert kbl.groups_of(kbl.problem_list(tree, [1, 2]), 2) == [kbl.problem_list(tree, [1]), kbl.problem_list(tree, [2])]


def test_a_batch_stopped_at_its_limit_gives_lines_only_to_problems_with_records_and_the_rest_run_again(tmp_path, monkeypatch, capsys):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0, "level1/2_B": 0.5, "level1/3_C": 1.5})
    state = tmp_path / "state"
    stopped = FakeRuns(recorded={"1_A"}, timed_out=True)
    code, lines = _main(monkeypatch, stopped, tree, state, "--batch", "3", "--timeout", "100")
    assert code == 0 and stopped.runs[0][stopped.runs[0].index("--run-id") + 1].endswith("_batch3")
    assert [(line["problem"], line["status"], line["batch"]) for line in lines] == [("level1/1_A", "correct", 3)]
    assert lines[0]["wall_s"] == lines[0]["batch_wall_s"]  # the one line takes the whole wall
    assert "before 2 problem(s) got a record; they run again next time" in capsys.readouterr().err
    assert not any((state / "tmp").iterdir()) and not any((state / "results").iterdir())

    again = FakeRuns()
    code, lines = _main(monkeypatch, again, tree, state, "--batch", "3", "--timeout", "100")
    assert code == 0 and len(again.runs) == 1 and sorted(again.given[0]) == ["2_B", "3_C"]
    assert [(line["problem"], line["batch"]) for line in lines] == [("level1/1_A", 3), ("level1/2_B", 2), ("level1/3_C", 2)]


def test_a_batch_that_ends_without_some_records_gives_those_problems_a_line_naming_the_exit(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0, "level1/2_B": 0.5})
    code, lines = _main(monkeypatch, FakeRuns(recorded={"1_A"}, exit=1, stderr="Traceback\nRuntimeError: boom"), tree, tmp_path / "state", "--batch", "2")
    assert code == 0 and [line["problem"] for line in lines] == ["level1/1_A", "level1/2_B"]
    assert lines[0]["status"] == "correct" and lines[1]["status"] is None
    assert lines[1]["reason"] == "no candidate record; run.py exit 1: Traceback | RuntimeError: boom" and lines[1]["stderr_tail"]


def test_a_lone_problem_that_runs_past_the_whole_budget_in_a_batch_is_recorded_as_timed_out(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0})
    runs = FakeRuns(recorded=set(), timed_out=True)
    code, lines = _main(monkeypatch, runs, tree, tmp_path / "state", "--batch", "4", "--budget-s", "30", "--timeout", "100")
    assert code == 0 and len(runs.runs) == 1
    assert [(line["problem"], line["status"], line["timed_out"], line["batch"]) for line in lines] == [("level1/1_A", None, True, 1)]
    assert "ran past the invocation's whole budget (30 s)" in lines[0]["reason"]


def test_an_interrupted_batch_gets_no_lines_and_leaves_no_scratch(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0, "level1/2_B": 0.5})
    state = tmp_path / "state"

    def interrupted(command, limit, env, folder, name):
        run = Path(_argument(command, "--results")) / _argument(command, "--run-id")
        run.mkdir(parents=True)
        (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records("1_A")))
        raise KeyboardInterrupt("terminated")

    code, lines = _main(monkeypatch, interrupted, tree, state, "--batch", "2")
    assert code == 130 and lines == []
    assert not any((state / "tmp").iterdir()) and not any((state / "results").iterdir())


def test_batch_1_is_the_problem_by_problem_run_with_the_same_line_fields(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0, "level1/2_B": 0.5})
    by_default, batch_1 = FakeRuns(), FakeRuns()
    _, default_lines = _main(monkeypatch, by_default, tree, tmp_path / "default")
    code, lines = _main(monkeypatch, batch_1, tree, tmp_path / "batch1", "--batch", "1")
    assert code == 0 and len(lines) == 2
    assert [c[2] for c in batch_1.commands] == ["lint", "--problems-dir", "lint", "--problems-dir"]  # a lint and a run per problem
    assert all("--solution" in c and "--all" not in c for c in batch_1.runs)
    times = ("wall_s", "finished_at")
    assert [{k: v for k, v in line.items() if k not in times} for line in lines] == [{k: v for k, v in line.items() if k not in times} for line in default_lines]
    assert set(lines[0]) == {
        "problem", "level", "id", "name", "lint_verdict", "lint_reason", "lint_checks", "lint_exit", "lint_wall_s", "exit", "timed_out", "run_wall_s",
        "status", "reason", "speedup", "low", "high", "protocol", "reference_ms", "candidate_ms", "sol_fraction", "flags", "warnings", "candidate_wall_s",
        "reference_ok", "reference_reason", "reference_wall_s", "reference_eager_ms", "reference_mode", "device_name", "peak_bytes", "sol_floor_ms",
        "sol_bound", "wall_s", "finished_at"}


def test_invocations_sharing_a_queue_run_only_what_nobody_claimed_and_merge_into_one_table(tmp_path, monkeypatch):
    tree = _tiny_tree(tmp_path / "KernelBench", {"level1/1_A": 2.0, "level1/2_B": 0.5, "level1/3_C": 1.5, "level2/1_A": 3.0})
    queue = tmp_path / "queue.txt"
    queue.write_text("level1/1_A\n")  # another GPU's invocation claimed it first
    first, second = FakeRuns(), FakeRuns()
    code, lines = _main(monkeypatch, first, tree, tmp_path / "gpu0", "--batch", "2", "--queue", str(queue))
    assert code == 0 and [sorted(given) for given in first.given] == [["2_B", "3_C"], ["1_A"]]  # one level per group
    assert [line["problem"] for line in lines] == ["level1/2_B", "level1/3_C", "level2/1_A"]
    code, lines = _main(monkeypatch, second, tree, tmp_path / "gpu1", "--batch", "2", "--queue", str(queue))
    assert code == 0 and second.runs == [] and lines == []  # all claimed: nothing runs twice
    assert queue.read_text().split() == ["level1/1_A", "level1/2_B", "level1/3_C", "level2/1_A"]

    (tmp_path / "gpu1" / "results.jsonl").write_text(
        json.dumps({"problem": "level1/1_A", "level": 1, "id": 1, "status": "correct", "finished_at": "2026-11-28T20:00:00"}) + "\n"
        + json.dumps({"problem": "level1/2_B", "level": 1, "id": 2, "status": None, "finished_at": "2000-01-01T00:00:00"}) + "\n")
    assert kbl.main(["--state", str(tmp_path / "all"), "--merge-from", str(tmp_path / "gpu0"), str(tmp_path / "gpu1")]) == 0
    merged = [json.loads(t) for t in (tmp_path / "all" / "results.jsonl").read_text().splitlines()]
    assert [(line["problem"], line["status"]) for line in merged] == [
        ("level1/1_A", "correct"), ("level1/2_B", "correct"), ("level1/3_C", "correct"), ("level2/1_A", "correct")]  # the later line wins


def _claimer(path, keys, out):
    entries = [kbl.Entry(1, n, key.split("/")[1], Path(key)) for n, key in enumerate(keys, 1)]
    claims, got = kbl.Claims(Path(path)), []
    while group := claims.claim(entries, 1):
        got += [entry.key for entry in group]
    out.put(got)


def test_concurrent_claims_on_one_queue_are_disjoint_and_cover_every_problem(tmp_path):
    import multiprocessing

    keys = [f"level1/{n}_P" for n in range(1, 41)]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = [context.Process(target=_claimer, args=(str(tmp_path / "queue.txt"), keys, out)) for _ in range(4)]
    for worker in workers:
        worker.start()
    got = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    claimed = [key for each in got for key in each]
    assert sorted(claimed) == sorted(keys) and len(claimed) == len(set(claimed))


def test_a_sittings_queue_starts_with_every_problem_that_has_a_line_its_own_state_included(tmp_path):
    state, gpu = tmp_path / "state", tmp_path / "state" / "gpu0"
    gpu.mkdir(parents=True)
    (state / "results.jsonl").write_text(json.dumps({"problem": "level1/1_A", "level": 1, "id": 1, "status": "correct"}) + "\n")  # seeded by hand
    (gpu / "results.jsonl").write_text(json.dumps({"problem": "level2/3_C", "level": 2, "id": 3, "status": None}) + "\n")
    queue = tmp_path / "queue.txt"
    queue.write_text("level1/9_Z\n")  # a past sitting's claims: not this one's
    assert kbl.main(["--state", str(state), "--merge-from", str(state), str(gpu), "--queue", str(queue)]) == 0
    assert queue.read_text().split() == ["level1/1_A", "level2/3_C"]
    assert [json.loads(t)["problem"] for t in (state / "results.jsonl").read_text().splitlines()] == ["level1/1_A", "level2/3_C"]
