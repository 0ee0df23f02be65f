"""Leaderboards are views of records: golden markdown and CSV from synthetic records."""
import os
from pathlib import Path

import pytest

from harness.leaderboard import candidate_frame, summary_table, write_leaderboards
from harness.records import CandidateRecord, CheckResult, TimingStats
from harness.status import Status

GOLDEN = Path(__file__).parent / "golden"


def record(problem, candidate, status, reason, ms=None, ref=2.0, compiled=1.0, floor=0.1):
    timing = TimingStats.from_samples([ms, ms], timer="cuda_events", warmup_calls=1, stopped_by="target_rse") if ms else None
    correct = ms and status is Status.CORRECT
    return CandidateRecord(
        run_id="golden", problem=problem, problem_hash="h", candidate=candidate, candidate_path=f"{candidate}.py",
        candidate_hash="x", device="cuda", status=status, reason=reason,
        checks=(CheckResult("trial 1 (eval)", status is Status.CORRECT, "ok", 3e-6, 1e-5, 0.0),),
        timing=timing, reference_ms=ref, speedup=ref / ms if correct else None,
        baseline_ms={"torch.compile(default)": compiled} if correct else {},
        speedups={"torch.compile(default)": compiled / ms} if correct else {},
        sol_ms=floor if correct else None, sol_fraction=floor / ms if correct else None,
    )


RECORDS = [
    record("p1", "fast", Status.CORRECT, "matched 10 calls", ms=0.5),
    record("p1", "slow", Status.CORRECT, "matched 10 calls", ms=4.0),
    record("p1", "wrong", Status.INCORRECT, "trial 1 (train): output | 3% of elements differ"),
    record("p1", "broken", Status.BUILD_FAILED, "main.cpp:3: error: x"),
    record("p2", "gpu_only", Status.NEEDS_CUDA, "compiles CUDA sources"),
    record("p2", "ok", Status.CORRECT, "matched 10 calls", ms=1.0, ref=1.5),
]


def test_leaderboard_files_match_golden(tmp_path):
    csv_path, md_path = write_leaderboards(tmp_path, RECORDS, fast_p=(0.0, 1.0, 2.0), plots=False)  # charts: test_reports.py
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / "leaderboard.md").write_text(md_path.read_text().replace(tmp_path.name, "RUN"))
        (GOLDEN / "leaderboard.csv").write_text(csv_path.read_text())
    assert md_path.read_text().replace(tmp_path.name, "RUN") == (GOLDEN / "leaderboard.md").read_text()
    assert csv_path.read_text() == (GOLDEN / "leaderboard.csv").read_text()


def test_fast_p_counts_only_evaluated_candidates_and_geomean_only_correct():
    summary = summary_table(candidate_frame(RECORDS), fast_p=(0.0, 1.0, 2.0)).set_index("problem")
    assert summary.loc["p1", "fast_0"] == pytest.approx(2 / 4)
    assert summary.loc["p1", "fast_1"] == pytest.approx(1 / 4)  # 4x faster; 0.5x is not
    assert summary.loc["p1", "geomean_speedup"] == pytest.approx((4.0 * 0.5) ** 0.5)
    assert summary.loc["p1", "geomean_vs_compile"] == pytest.approx((2.0 * 0.25) ** 0.5)
    assert summary.loc["p2", "evaluated"] == 1 and summary.loc["p2", "fast_0"] == 1.0


def test_later_record_for_same_candidate_replaces_earlier():
    frame = candidate_frame(RECORDS + [record("p1", "wrong", Status.CORRECT, "fixed", ms=1.0)])
    assert frame.set_index("candidate").loc["wrong", "status"] == "correct"
