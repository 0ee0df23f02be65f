"""The regression gate, from synthetic records: real slowdowns fail, noise passes, a kernel that broke fails
whatever changed, and times are compared only where they can be."""
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.core.config import ROOT
from harness.core.errors import ExitCode, UserError
from harness.core.records import NullFloor, PairedSpeedup, ReferenceRecord, RunHeader, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore
from harness.views.gate import IMPROVED, NOT_COMPARABLE, REGRESSED, UNCHANGED, Regression, GateRules, gate, load_side
from tests.records import candidate_record, reference_record

GOLDEN = Path(__file__).parent / "golden"
PROTOCOL = {"timing": {"mode": "eager", "sync": "auto", "flush_l2": True, "subtract_overhead": True, "cpu_threads": 1}, "check": {"allow_tf32": False}}


def samples(median, spread, n=60, seed=0):
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def candidate(name, status=Status.CORRECT, ms=None, problem="p1", problem_hash="ph", candidate_hash=None, reference_ms=2.0, run_id="run", device="cuda"):
    timing = TimingStats.from_samples(ms, timer="cuda_events", warmup_calls=1, stopped_by="target_rse") if ms else None
    return candidate_record(
        run_id=run_id, problem=problem, problem_hash=problem_hash, candidate=name, candidate_path=f"{name}.py",
        candidate_hash=candidate_hash or f"hash-{name}", device=device, status=status, reason="why" if status is not Status.CORRECT else "matched",
        timing=timing, reference_ms=reference_ms,
    )


def write_run(folder, records, protocol=PROTOCOL, device_name="NVIDIA H100 80GB HBM3", floors=None, argv=()):
    """A run folder; `floors` maps a problem to its null floor, or to a list of them (one reference per lane)."""
    store = RunStore(folder.parent, folder.name)
    store.append(RunHeader(run_id=folder.name, started_at="2026-11-21T00:00:00+00:00", argv=tuple(argv), config=protocol, environment={}))
    for problem in sorted({r.identity.problem for r in records}):
        found = (floors or {}).get(problem)
        lanes = {f"cuda:{i}": f for i, f in enumerate(found)} if isinstance(found, list) else {"": found}
        for lane, floor in lanes.items():
            store.append(reference_record(run_id=folder.name, problem=problem, problem_hash="ph", problem_path="p.py", device="cuda",
                                         device_name=device_name, ok=True, reason="ok", lane=lane, null_floor=floor))
    for record in records:
        store.append(record)
    return folder


def gate_cli(baseline, current, *extra):
    return main(["gate", "--baseline", str(baseline), "--current", str(current), *extra])


def test_a_true_20_percent_slowdown_with_tight_samples_fails(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01, seed=1))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.2, 0.01, seed=2))])
    assert gate_cli(base, now) == ExitCode.REGRESSION
    report = (now / "gate.md").read_text()
    assert "**FAIL**: 1 candidate(s) significantly slower than 1.10x" in report
    assert "| p1 | k | +" in report and "## Regressions" in report


def test_a_3_percent_change_in_noisy_samples_passes(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.30, seed=3))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.03, 0.30, seed=4))])
    assert gate_cli(base, now) == ExitCode.OK
    assert "**PASS**" in (now / "gate.md").read_text()


def test_a_large_but_insignificant_change_is_reported_not_failed(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=[1.0, 1.5, 0.6])])
    now = write_run(tmp_path / "now", [candidate("k", ms=[1.3, 0.7, 1.9])])
    assert gate_cli(base, now) == ExitCode.OK
    assert "not significant" in (now / "gate.md").read_text()


def test_a_newly_incorrect_candidate_fails_and_a_fixed_one_is_an_improvement(tmp_path):
    base = write_run(tmp_path / "base", [candidate("was_ok", ms=samples(1.0, 0.01)), candidate("was_wrong", Status.INCORRECT)])
    now = write_run(tmp_path / "now", [candidate("was_ok", Status.INCORRECT), candidate("was_wrong", ms=samples(1.0, 0.01))])
    assert gate_cli(base, now) == ExitCode.REGRESSION
    report = (now / "gate.md").read_text()
    assert "1 candidate(s) no longer correct" in report
    assert "was correct, now incorrect: why" in report and "was incorrect, now correct" in report


def test_faster_is_an_improvement_and_passes(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(0.7, 0.01, seed=5))])
    assert gate_cli(base, now) == ExitCode.OK
    assert "## Improvements" in (now / "gate.md").read_text()


def test_a_changed_problem_files_times_are_not_comparable(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(2.0, 0.01), problem_hash="changed")])
    assert gate_cli(base, now) == ExitCode.OK  # reported, never compared
    report = (now / "gate.md").read_text()
    assert "## Not comparable" in report and "the problem file changed" in report
    assert gate_cli(base, now, "--fail-on", "incomparable") == ExitCode.REGRESSION


def test_an_edited_candidates_slowdown_fails_by_default(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(2.0, 0.01), candidate_hash="changed")])
    assert gate_cli(base, now) == ExitCode.REGRESSION
    report = (now / "gate.md").read_text()
    assert "## Regressions" in report and "(source changed)" in report
    assert gate_cli(base, now, "--across-changes") == ExitCode.REGRESSION  # the default, spelled out


def test_no_across_changes_reports_an_edited_candidates_times_as_not_comparable(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(2.0, 0.01), candidate_hash="changed")])
    assert gate_cli(base, now, "--no-across-changes") == ExitCode.OK
    report = (now / "gate.md").read_text()
    assert "## Not comparable" in report and "the candidate file changed (compare anyway with --across-changes)" in report
    assert gate_cli(base, now, "--no-across-changes", "--fail-on", "incomparable") == ExitCode.REGRESSION


def test_an_edited_candidate_that_is_now_incorrect_fails_with_the_default_rules(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", Status.INCORRECT, candidate_hash="edited")])
    result = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules.parse("default", 0.10), alpha=0.001)
    (comparison,) = result.comparisons
    assert comparison.verdict == REGRESSED and comparison.regression is Regression.STATUS
    assert comparison.reason == "was correct, now incorrect (the candidate file changed): why"
    assert not result.passed and result.failures == ("1 candidate(s) no longer correct",)
    for extra in ((), ("--no-across-changes",)):  # correctness is compared across the change either way
        assert gate_cli(base, now, *extra) == ExitCode.REGRESSION
        report = (now / "gate.md").read_text()
        assert "**FAIL**: 1 candidate(s) no longer correct" in report and "## Not comparable" not in report
        assert "| p1 | k | was correct, now incorrect (the candidate file changed): why |" in report and "| correct → incorrect |" in report


@pytest.mark.parametrize("change, protocol, device_name, why", [
    ({"problem_hash": "changed"}, PROTOCOL, "NVIDIA H100 80GB HBM3", "the problem file changed"),
    ({"device": "cpu"}, PROTOCOL, "NVIDIA H100 80GB HBM3", "device cuda then, cpu now"),
    ({}, PROTOCOL, "NVIDIA H200", "NVIDIA H100 80GB HBM3 then, NVIDIA H200 now"),
    ({}, {**PROTOCOL, "timing": {**PROTOCOL["timing"], "mode": "graph"}}, "NVIDIA H100 80GB HBM3", "timing.mode was 'eager', is 'graph'"),
    # a baseline from before timing.hold existed was timed unheld
    ({}, {**PROTOCOL, "timing": {**PROTOCOL["timing"], "hold": True}}, "NVIDIA H100 80GB HBM3", "timing.hold was False, is True"),
    ({"candidate_hash": "edited", "problem_hash": "changed"}, PROTOCOL, "NVIDIA H100 80GB HBM3", "the problem file changed; the candidate file changed"),
])
def test_a_kernel_that_broke_fails_whatever_changed_between_the_runs(tmp_path, change, protocol, device_name, why):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k", Status.RUNTIME_ERROR, **change)], protocol=protocol, device_name=device_name)
    (comparison,) = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    assert comparison.verdict == REGRESSED and comparison.regression is Regression.STATUS
    assert comparison.reason == f"was correct, now runtime error ({why}): why"
    assert gate_cli(base, now) == ExitCode.REGRESSION
    assert gate_cli(base, now, "--fail-on", "none") == ExitCode.OK  # none still fails nothing


def test_an_edited_candidate_that_stays_correct_does_not_fail(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01, seed=1))])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.0, 0.01, seed=2), candidate_hash="edited")])
    (comparison,) = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    assert comparison.verdict == UNCHANGED and comparison.reason.endswith("within 10% (source changed)")
    assert gate_cli(base, now) == ExitCode.OK
    assert "**PASS**" in (now / "gate.md").read_text()


def test_an_edited_candidate_that_was_wrong_and_is_now_correct_is_an_improvement(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", Status.INCORRECT)])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.0, 0.01), candidate_hash="fixed")])
    (comparison,) = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    assert comparison.verdict == IMPROVED and comparison.reason == "was incorrect, now correct (the candidate file changed)"


def test_a_candidate_skipped_for_needs_cuda_on_one_side_is_not_comparable_not_a_regression(tmp_path):
    """A GPU baseline gated by a CPU run: the CUDA kernel was not evaluated, which says nothing about it."""
    base = write_run(tmp_path / "base", [candidate("gpu", ms=samples(1.0, 0.01)), candidate("later", Status.NEEDS_CUDA, device="cpu")])
    now = write_run(tmp_path / "now", [candidate("gpu", Status.NEEDS_CUDA, device="cpu"), candidate("later", Status.INCORRECT)])
    skipped, later = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    assert later.verdict == NOT_COMPARABLE and later.reason == "not evaluated in the baseline (needs CUDA), now incorrect"
    assert skipped.verdict == NOT_COMPARABLE and skipped.regression is None
    assert skipped.reason == "was correct, skipped now (needs CUDA): this run could not evaluate it"
    assert gate_cli(base, now) == ExitCode.OK
    report = (now / "gate.md").read_text()
    assert "## Not comparable" in report and "| correct → needs CUDA |" in report
    assert gate_cli(base, now, "--fail-on", "incomparable") == ExitCode.REGRESSION


def test_a_candidate_skipped_on_both_sides_is_unchanged(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", Status.NEEDS_CUDA, device="cpu")])
    now = write_run(tmp_path / "now", [candidate("k", Status.NEEDS_CUDA, device="cpu", candidate_hash="edited")])
    (comparison,) = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    assert comparison.verdict == UNCHANGED and comparison.reason == "not evaluated on either side (needs CUDA)"


def test_another_device_or_timing_protocol_is_not_comparable(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    other_gpu = write_run(tmp_path / "gpu", [candidate("k", ms=samples(2.0, 0.01))], device_name="NVIDIA H200")
    graph = write_run(tmp_path / "graph", [candidate("k", ms=samples(2.0, 0.01))], protocol={**PROTOCOL, "timing": {**PROTOCOL["timing"], "mode": "graph"}})
    for current, why in ((other_gpu, "NVIDIA H100 80GB HBM3 then, NVIDIA H200 now"), (graph, "timing.mode was 'eager', is 'graph'")):
        assert gate_cli(base, current) == ExitCode.OK
        assert why in (current / "gate.md").read_text()


def test_missing_and_new_candidates_are_listed_and_any_missing_one_can_fail(tmp_path):
    base = write_run(tmp_path / "base", [candidate("gone", Status.INCORRECT)])
    now = write_run(tmp_path / "now", [candidate("added", ms=samples(1.0, 0.01))])
    assert gate_cli(base, now) == ExitCode.OK  # it was not correct: its absence breaks nothing
    report = (now / "gate.md").read_text()
    assert "## Missing" in report and "## New" in report
    assert "| p1 | gone | in the baseline, not in this run |" in report
    assert gate_cli(base, now, "--fail-on", "missing") == ExitCode.REGRESSION


def test_a_renamed_and_broken_candidate_fails(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    now = write_run(tmp_path / "now", [candidate("k_renamed", Status.INCORRECT)])
    result = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001)
    assert [c.regression for c in result.comparisons] == [Regression.MISSING, Regression.NEW_NOT_CORRECT]
    assert gate_cli(base, now) == ExitCode.REGRESSION
    report = (now / "gate.md").read_text()
    assert "1 correct candidate(s) missing (save a new baseline from this run with run.py baseline save, or pass --allow-missing)" in report
    assert "1 new candidate(s) not correct" in report
    assert "| p1 | k_renamed | not in the baseline, and incorrect now: why |" in report
    assert gate_cli(base, now, "--allow-missing") == ExitCode.REGRESSION  # the new name is still not correct
    assert gate_cli(base, now, "--fail-on", "none") == ExitCode.OK


def test_a_deleted_correct_candidate_fails_unless_missing_ones_are_allowed(tmp_path):
    kept, deleted = (candidate(name, ms=samples(1.0, 0.01, seed=i)) for i, name in enumerate(["kept", "deleted"]))
    base = write_run(tmp_path / "base", [kept, deleted])
    now = write_run(tmp_path / "now", [candidate("kept", ms=samples(1.0, 0.01, seed=3))])
    assert gate_cli(base, now) == ExitCode.REGRESSION
    report = (now / "gate.md").read_text()
    assert "**FAIL**: 1 correct candidate(s) missing" in report
    assert "| p1 | deleted | was correct, not in this run (if it was renamed or deleted on purpose, save a new baseline " in report
    assert gate_cli(base, now, "--allow-missing") == ExitCode.OK
    report = (now / "gate.md").read_text()
    assert "**PASS**" in report
    assert "| p1 | deleted | was correct, not in this run (allowed: --allow-missing) |" in report


def test_allow_missing_and_fail_on_missing_together_are_a_usage_error(tmp_path, capsys):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    assert gate_cli(base, base, "--allow-missing", "--fail-on", "missing") == ExitCode.USAGE
    assert capsys.readouterr().err.strip().startswith("error: --allow-missing contradicts --fail-on missing")


def test_a_run_of_one_problem_gates_that_problem_only(tmp_path, capsys):
    base = write_run(tmp_path / "base", [
        candidate("k", ms=samples(1.0, 0.01, seed=1)),
        candidate("other_kernel", problem="p2"),
        candidate("third_kernel", Status.INCORRECT, problem="p3"),
    ])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.0, 0.01, seed=2))])
    result = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001)
    assert [(c.problem, c.candidate) for c in result.comparisons] == [("p1", "k")] and result.left_out == ("p2", "p3")
    capsys.readouterr()
    assert gate_cli(base, now) == ExitCode.OK
    out, report = capsys.readouterr().out, (now / "gate.md").read_text()
    for text in (out, report):
        assert "other_kernel" not in text and "third_kernel" not in text and "p2" not in text and "Missing" not in text
    assert "2 problem(s) of the baseline are not in this run and are not gated." in report
    assert gate_cli(base, now, "--fail-on", "missing") == ExitCode.OK


def test_a_new_candidate_that_is_not_correct_fails_and_one_skipped_for_needs_cuda_does_not(tmp_path):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01, seed=1))])
    same = candidate("k", ms=samples(1.0, 0.01, seed=2))
    wrong = write_run(tmp_path / "wrong", [same, candidate("added", Status.BUILD_FAILED)])
    assert gate_cli(base, wrong) == ExitCode.REGRESSION
    assert "**FAIL**: 1 new candidate(s) not correct" in (wrong / "gate.md").read_text()
    skipped = write_run(tmp_path / "skipped", [same, candidate("gpu", Status.NEEDS_CUDA, device="cpu")])
    new, _ = gate(load_side(str(base), tmp_path), load_side(str(skipped), tmp_path), GateRules(), alpha=0.001).comparisons
    assert new.regression is None
    assert new.reason == "not in the baseline, skipped now (needs CUDA): this run could not evaluate it"
    assert gate_cli(base, skipped) == ExitCode.OK


def test_an_honest_unchanged_run_passes(tmp_path):
    def records(seed):
        return [
            candidate("fast", ms=samples(1.0, 0.01, seed=seed)),
            candidate("broken", Status.INCORRECT),
            candidate("gpu", Status.NEEDS_CUDA, device="cpu"),
            candidate("q", ms=samples(2.0, 0.01, seed=seed + 1), problem="p2"),
        ]

    base, now = write_run(tmp_path / "base", records(1)), write_run(tmp_path / "now", records(5))
    assert gate_cli(base, now) == ExitCode.OK
    report = (now / "gate.md").read_text()
    assert "**PASS**" in report and "4 unchanged" in report and "## Missing" not in report and "## New" not in report


def test_the_report_on_stdout_fits_the_terminal(tmp_path, monkeypatch, capsys):
    long_reason = "a reason long enough to wrap " * 6
    names = [f"kernel_{i}_with_a_long_name" for i in range(3)]
    base = write_run(tmp_path / "base", [candidate(n, ms=samples(1.0, 0.01, seed=i)) for i, n in enumerate(names)])
    broken = candidate(names[0], Status.RUNTIME_ERROR)
    broken = dataclasses.replace(broken, decision=dataclasses.replace(broken.decision, reason=long_reason))
    slower = candidate(names[1], ms=samples(1.3, 0.01, seed=9))
    now = write_run(tmp_path / "now", [broken, slower, candidate(names[2], ms=samples(1.0, 0.01, seed=8))])
    for width in (60, 100):
        monkeypatch.setenv("COLUMNS", str(width))
        capsys.readouterr()
        assert gate_cli(base, now) == ExitCode.REGRESSION
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("Regression gate: FAIL") and max(len(line.rstrip()) for line in lines) <= width
        assert not any(line.startswith("|") for line in lines)  # tables for the terminal, not markdown
        assert any("kernel_1_with_a_long_name" in line for line in lines)


def test_geomean_rule_fails_on_a_broad_small_slowdown(tmp_path):
    names = [f"k{i}" for i in range(4)]
    base = write_run(tmp_path / "base", [candidate(n, ms=samples(1.0, 0.002, seed=i)) for i, n in enumerate(names)])
    now = write_run(tmp_path / "now", [candidate(n, ms=samples(1.06, 0.002, seed=10 + i)) for i, n in enumerate(names)])
    assert gate_cli(base, now) == ExitCode.OK  # 6% each: under the 10% median threshold
    assert gate_cli(base, now, "--fail-on", "median:5%") == ExitCode.REGRESSION
    assert gate_cli(base, now, "--fail-on", "geomean:3%") == ExitCode.REGRESSION
    assert "geometric mean +6." in (now / "gate.md").read_text()


def test_fail_on_grammar():
    assert GateRules.parse("default", 0.1) == GateRules(status=True, median=0.1)
    assert GateRules.parse("median:5%,geomean:2.5%,missing", 0.1) == GateRules(status=True, median=0.05, geomean=0.025, missing=True)
    assert GateRules.parse("none", 0.1) == GateRules(status=False, median=None)
    assert GateRules.parse("median:5%", 0.1).describe() == "status,median:5%"
    for bad in ("median:5", "speed:5%", "median:five%"):
        with pytest.raises(UserError, match="--fail-on: cannot read"):
            GateRules.parse(bad, 0.1)


def test_bad_rules_and_missing_runs_are_usage_errors(tmp_path, capsys):
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    assert gate_cli(base, base, "--fail-on", "median:lots") == ExitCode.USAGE
    assert gate_cli(base, tmp_path / "nowhere") == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "nowhere" in err[-1]


def test_report_is_appended_to_the_github_step_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01))])
    assert gate_cli(base, base, "--report", str(tmp_path / "r.md")) == ExitCode.OK
    text = summary.read_text()
    assert text.startswith("earlier step\n# Regression gate") and (tmp_path / "r.md").is_file()


def test_report_matches_golden(tmp_path):
    base = write_run(tmp_path / "base", [
        candidate("slower", ms=samples(1.0, 0.01, seed=1)), candidate("steady", ms=samples(1.0, 0.01, seed=2)),
        candidate("broke", ms=samples(1.0, 0.01, seed=3)), candidate("edited", ms=samples(1.0, 0.01, seed=4)),
    ])
    now = write_run(tmp_path / "now", [
        candidate("slower", ms=samples(1.25, 0.01, seed=5), reference_ms=2.02), candidate("steady", ms=samples(1.0, 0.01, seed=6)),
        candidate("broke", Status.RUNTIME_ERROR), candidate("edited", ms=samples(1.0, 0.01, seed=7), candidate_hash="new"),
    ])
    # --no-across-changes: the edited candidate's times fill the "Not comparable" section
    assert gate_cli(base, now, "--no-across-changes", "--report", str(tmp_path / "gate.md")) == ExitCode.REGRESSION
    text = (tmp_path / "gate.md").read_text().replace(str(tmp_path), "TMP")
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / "gate.md").write_text(text)
    assert text == (GOLDEN / "gate.md").read_text()


@pytest.mark.slow
def test_baseline_save_then_run_with_gate_end_to_end(tmp_path):
    """Save a real CPU run as a baseline, re-run against it (pass), then break the candidate (exit 3)."""
    solutions = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    solutions.mkdir(parents=True)
    good = (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, features, scale):\n        super().__init__()\n"
        "        self.bias = nn.Parameter(torch.randn(features))\n        self.scale = scale\n\n"
        "    def forward(self, x):\n        return torch.relu(x * self.scale + self.bias)\n"
    )
    (solutions / "plain.py").write_text(good)
    common = [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--device", "cpu", "--no-timing", "--quiet", "--trials", "2",
              "--results", str(tmp_path / "results"), "--set", f"solutions_dir={tmp_path / 'solutions'}", "--set", "flags.no_custom_kernel=flag",
              "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}"]

    def call(*args):
        return subprocess.run([*common, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)

    first = call("--run-id", "first")
    assert first.returncode == 0, first.stderr
    baseline = tmp_path / "baselines" / "main.jsonl"
    saved = subprocess.run([sys.executable, "run.py", "baseline", "save", str(tmp_path / "results" / "first"), "--out", str(baseline)], capture_output=True, text=True, cwd=ROOT)
    assert saved.returncode == 0, saved.stderr
    kinds = [json.loads(line)["kind"] for line in baseline.read_text().splitlines()]
    assert kinds == ["run", "reference", "candidate"]
    again = call("--run-id", "again", "--gate", str(baseline))
    assert again.returncode == 0, again.stderr
    assert "**PASS**" in (tmp_path / "results" / "again" / "gate.md").read_text()
    (solutions / "plain.py").write_text(good.replace("self.bias)", "self.bias) + 1"))
    broken = call("--run-id", "broken", "--gate", str(baseline))
    assert broken.returncode == ExitCode.REGRESSION, broken.stderr
    assert "was correct, now incorrect" in (tmp_path / "results" / "broken" / "gate.md").read_text()
    missing = call("--run-id", "never", "--gate", str(tmp_path / "nothing.jsonl"))
    assert missing.returncode == ExitCode.USAGE and not (tmp_path / "results" / "never").exists()


@pytest.mark.slow
def test_a_pull_request_that_breaks_a_cpp_kernel_fails_the_ci_gate_end_to_end(tmp_path, build_cache, measurement_cache):
    """The CI example's mode through the real CLI: `run.py --all --gate BASELINE` on a project tree in tmp,
    after the shipped C++ kernel is edited to add the bias with the wrong sign. The run alone exits 2; the
    gate must not turn that into a pass."""
    problems = tmp_path / "problems" / "level0"
    problems.mkdir(parents=True)
    shutil.copy(ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py", problems)
    solutions = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    solutions.mkdir(parents=True)
    kernel = solutions / "cpp_fused.py"
    shutil.copy(ROOT / "solutions" / "1_Scale_Bias_ReLU" / "cpp_fused.py", kernel)
    results = tmp_path / "results"
    quick = ["baselines.compile_modes=[]", "timing.budget_s=0.3", "timing.warmup_ms=10", "timing.min_reps=3", "timing.rounds=4", "timing.max_rounds=6"]
    settings = [f"solutions_dir={tmp_path / 'solutions'}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}", *quick]
    common = [sys.executable, "run.py", "--all", "--device", "cpu", "--quiet", "--trials", "2", "--problems-dir", str(tmp_path / "problems"), "--results", str(results)]
    common += [arg for setting in settings for arg in ("--set", setting)]

    def call(*args):
        return subprocess.run([*common, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)

    main_run = call("--run-id", "main")  # timed, as a baseline taken on main is
    assert main_run.returncode == ExitCode.OK, main_run.stderr
    baseline = tmp_path / "main.jsonl"
    saved = subprocess.run([sys.executable, "run.py", "baseline", "save", "main", "--out", str(baseline), "--set", f"results_dir={results}"],
                           capture_output=True, text=True, cwd=ROOT)
    assert saved.returncode == 0, saved.stderr
    (record,) = [row for row in map(json.loads, baseline.read_text().splitlines()) if row["kind"] == "candidate"]
    assert record["identity"]["candidate"] == "cpp_fused" and record["decision"]["status"] == "correct" and record["timing"]["stats"] is not None

    source = kernel.read_text()
    assert source.count("* s + bp[c]") == 1
    kernel.write_text(source.replace("* s + bp[c]", "* s - bp[c]"))
    broken = call("--run-id", "pr", "--no-timing", "--gate", str(baseline))
    assert broken.returncode == ExitCode.REGRESSION, broken.stderr
    report = (results / "pr" / "gate.md").read_text()
    assert "**FAIL**: 1 candidate(s) no longer correct" in report and "## Regressions" in report
    assert "| 1_Scale_Bias_ReLU | cpp_fused | was correct, now incorrect (the candidate file changed): " in report
    assert "| correct → incorrect |" in report and "## Not comparable" not in report


def floor(speedup, spread=0.01):
    """A timed null floor reading `speedup`, with a bootstrap interval of +/- `spread`."""
    reference = TimingStats.from_samples([1.0, 1.01], timer="cuda_events", warmup_calls=1, stopped_by="target_rse")
    paired = PairedSpeedup(speedup, speedup - spread, speedup + spread, 8, "eager, stream sync", (speedup,) * 8, reference)
    return NullFloor(status="correct", reason="ok", paired=paired)


def gated(tmp_path, base_floors, now_floors, *, now_status=Status.CORRECT, now_protocol=PROTOCOL):
    """A 20% slowdown (a regression when compared), gated with these null floors on problem p1."""
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01, seed=1))], floors={"p1": base_floors})
    now_ms = samples(1.2, 0.01, seed=2) if now_status is Status.CORRECT else None
    now = write_run(tmp_path / "now", [candidate("k", now_status, ms=now_ms)], protocol=now_protocol, floors={"p1": now_floors})
    (comparison,) = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001).comparisons
    return comparison, base, now


def test_a_current_null_floor_outside_the_tolerance_makes_times_not_comparable(tmp_path):
    comparison, base, now = gated(tmp_path, floor(1.00), floor(1.06, 0.02))
    assert comparison.verdict == NOT_COMPARABLE
    assert comparison.reason == "the null floor is 1.06x [1.04, 1.08] in the current run, outside 1.00x +/- 3%: times on this problem are off by about that much"
    assert gate_cli(base, now) == ExitCode.OK  # reported, never compared
    assert "## Not comparable" in (now / "gate.md").read_text()
    assert gate_cli(base, now, "--fail-on", "incomparable") == ExitCode.REGRESSION


def test_a_baseline_null_floor_outside_the_tolerance_or_a_failed_null_candidate_is_not_comparable(tmp_path):
    comparison, _, _ = gated(tmp_path / "a", floor(0.95), floor(1.00))
    assert comparison.verdict == NOT_COMPARABLE and "the null floor is 0.95x [0.94, 0.96] in the baseline" in comparison.reason
    comparison, _, _ = gated(tmp_path / "b", floor(1.00), NullFloor(status="incorrect", reason="differs"))
    assert comparison.verdict == NOT_COMPARABLE and comparison.reason.startswith("the null candidate failed in the current run (incorrect)")


def test_null_floors_near_one_are_compared_as_before(tmp_path):
    comparison, base, now = gated(tmp_path, floor(1.00), floor(1.01))
    assert comparison.verdict == REGRESSED and comparison.ratio == pytest.approx(1.2, rel=0.02)
    assert gate_cli(base, now) == ExitCode.REGRESSION
    comparison, _, _ = gated(tmp_path / "one_side", None, floor(1.01))  # a baseline without a floor
    assert comparison.verdict == REGRESSED


def test_a_null_floor_that_moved_beyond_the_tolerance_is_not_comparable(tmp_path):
    comparison, _, _ = gated(tmp_path, floor(0.98), floor(1.02))  # each within 3% of 1.00, 4% apart
    assert comparison.verdict == NOT_COMPARABLE
    assert comparison.reason == "the null floor moved from 0.98x to 1.02x (more than 3%)"


def test_the_worst_lane_stands_for_the_problem(tmp_path):
    comparison, _, _ = gated(tmp_path, floor(1.00), [floor(1.00), floor(1.05)])
    assert comparison.verdict == NOT_COMPARABLE and "1.05x" in comparison.reason


def test_the_current_runs_null_tolerance_applies(tmp_path):
    loose = {**PROTOCOL, "timing": {**PROTOCOL["timing"], "null_tolerance": 0.08}}
    comparison, _, _ = gated(tmp_path, floor(1.00), floor(1.06), now_protocol=loose)
    assert comparison.verdict == REGRESSED


def test_a_correctness_regression_is_reported_even_when_null_floors_are_off(tmp_path):
    comparison, base, now = gated(tmp_path, floor(1.00), floor(1.10), now_status=Status.INCORRECT)
    assert comparison.verdict == REGRESSED and comparison.reason == "was correct, now incorrect: why"
    assert gate_cli(base, now) == ExitCode.REGRESSION
    assert "1 candidate(s) no longer correct" in (now / "gate.md").read_text()


def test_a_run_of_every_problem_counts_a_baseline_problem_it_no_longer_has_as_missing(tmp_path):
    """The correct kernel's whole solutions folder deleted: `--all` ran everything there was, so the
    baseline's problem is missing, not left out."""
    base = write_run(tmp_path / "base", [candidate("k", ms=samples(1.0, 0.01, seed=1)), candidate("gone", problem="p2")])
    now = write_run(tmp_path / "now", [candidate("k", ms=samples(1.0, 0.01, seed=2))], argv=("run", "--all"))
    result = gate(load_side(str(base), tmp_path), load_side(str(now), tmp_path), GateRules(), alpha=0.001)
    assert result.left_out == () and [(c.problem, c.verdict) for c in result.comparisons if c.problem == "p2"] == [("p2", "missing")]
    assert any("correct candidate(s) missing" in f for f in result.failures)
    one = write_run(tmp_path / "one", [candidate("k", ms=samples(1.0, 0.01, seed=2))], argv=("run", "--problem", "p1"))
    assert gate(load_side(str(base), tmp_path), load_side(str(one), tmp_path), GateRules(), alpha=0.001).left_out == ("p2",)
