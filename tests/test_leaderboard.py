"""Leaderboards are views of records: golden markdown and CSV from synthetic records."""
import dataclasses
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.core.records import CheckResult, Flag, NullFloor, PairedSpeedup, ReferenceRecord, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.views.leaderboard import candidate_frame, print_leaderboard, problem_table, summary_table, write_leaderboards
from tests.records import candidate_record, reference_record

GOLDEN = Path(__file__).parent / "golden"


def record(problem, candidate, status, reason, ms=None, ref=2.0, compiled=1.0, floor=0.1, share=None, flags=()):
    timing = TimingStats.from_samples([ms, ms], timer="cuda_events", warmup_calls=1, stopped_by="target_rse") if ms else None
    correct = ms and status is Status.CORRECT
    return candidate_record(
        run_id="golden", problem=problem, problem_hash="h", candidate=candidate, candidate_path=f"{candidate}.py",
        candidate_hash="x", device="cuda", status=status, reason=reason,
        checks=(CheckResult("trial 1 (eval)", status is Status.CORRECT, "ok", 3e-6, 1e-5, 0.0),),
        timing=timing, reference_ms=ref, speedup=ref / ms if correct else None,
        baseline_ms={"torch.compile(default)": compiled} if correct else {},
        speedups={"torch.compile(default)": compiled / ms} if correct else {},
        sol_ms=floor if correct else None, sol_fraction=floor / ms if correct else None, sol_floor="roofline" if correct else "",
        custom_kernel_share=share, flags=tuple(Flag(code, policy, "why") for code, policy in flags),
    )


RECORDS = [
    record("p1", "fast", Status.CORRECT, "matched 10 calls", ms=0.5, share=0.42),
    record("p1", "slow", Status.CORRECT, "matched 10 calls", ms=4.0),
    record("p1", "wrong", Status.INCORRECT, "trial 1 (train): output | 3% of elements differ"),
    record("p1", "broken", Status.BUILD_FAILED, "main.cpp:3: error: x"),
    record("p1", "side", Status.CORRECT, "matched 10 calls", ms=2.0, flags=[("side-stream", "flag"), ("side-stream", "flag")]),
    record("p1", "passthrough", Status.NO_CUSTOM_KERNEL, "no-custom-kernel: it brings no kernel of its own", ms=0.2, flags=[("no-custom-kernel", "fail"), ("fallback", "flag")]),
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


def test_the_share_of_gpu_time_in_the_candidates_own_kernels_is_a_column():
    table = problem_table(candidate_frame(RECORDS), "p1").set_index("candidate")
    assert table.loc["fast", "own_share"] == pytest.approx(0.42) and pd.isna(table.loc["slow", "own_share"])


def test_fast_p_counts_only_evaluated_candidates_and_geomean_only_correct():
    summary = summary_table(candidate_frame(RECORDS), fast_p=(0.0, 1.0, 2.0)).set_index("problem")
    assert summary.loc["p1", "fast_0"] == pytest.approx(3 / 6)  # the failed pass-through counts as evaluated, never as fast
    assert summary.loc["p1", "fast_1"] == pytest.approx(1 / 6)  # 4x faster; 0.5x and 1.0x are not
    assert summary.loc["p1", "geomean_speedup"] == pytest.approx((4.0 * 0.5 * 1.0) ** (1 / 3))
    assert summary.loc["p1", "geomean_vs_compile"] == pytest.approx((2.0 * 0.25 * 0.5) ** (1 / 3))
    assert summary.loc["p2", "evaluated"] == 1 and summary.loc["p2", "fast_0"] == 1.0


def test_flags_are_a_column_and_a_failing_flag_is_never_ranked():
    table = problem_table(candidate_frame(RECORDS), "p1").set_index("candidate")
    assert table.loc["side", "flags"] == "side-stream" and table.loc["side", "rank"] != "-"  # flagged, still ranked
    assert table.loc["passthrough", "flags"] == "no-custom-kernel!, fallback" and table.loc["passthrough", "rank"] == "-"
    assert table.loc["fast", "flags"] == "" and table.loc["fast", "rank"] == "1"


def test_later_record_for_same_candidate_replaces_earlier():
    frame = candidate_frame(RECORDS + [record("p1", "wrong", Status.CORRECT, "fixed", ms=1.0)])
    assert frame.set_index("candidate").loc["wrong", "status"] == "correct"


def null_floor(speedup=None, low=None, high=None, status="correct"):
    """A null candidate's result: timed at `speedup` [low, high], or failed with `status`."""
    if speedup is None:
        return NullFloor(status=status, reason="trial 1 (eval): output 0 differs" if status != "correct" else "ok")
    reference = TimingStats.from_samples([1.0, 1.01], timer="cuda_events", warmup_calls=1, stopped_by="target_rse")
    paired = PairedSpeedup(speedup=speedup, low=low, high=high, rounds=8, protocol="eager, stream sync", ratios=(speedup,) * 8, reference=reference)
    return NullFloor(status=status, reason="ok", paired=paired)


def reference(problem, floor=None, lane="", run_id="golden"):
    return reference_record(
        run_id=run_id, problem=problem, problem_hash="h", problem_path=f"{problem}.py", device="cuda",
        device_name="NVIDIA H100 80GB HBM3", ok=True, reason="ok", lane=lane, null_floor=floor,
    )


def summary_row(markdown, problem):
    return next(line for line in markdown.splitlines() if line.startswith(f"| {problem} | "))


def test_summary_shows_the_null_floor_with_its_interval_and_the_lane_furthest_from_one(tmp_path):
    references = [
        reference("p1", null_floor(1.01, 1.00, 1.02), lane="cuda:0"),
        reference("p1", null_floor(0.97, 0.95, 0.99), lane="cuda:1"),  # furthest from 1.00: shown
        reference("p2"),  # no null candidate on this problem
    ]
    _, md_path = write_leaderboards(tmp_path, RECORDS, fast_p=(0.0, 1.0, 2.0), plots=False, references=references)
    markdown = md_path.read_text()
    assert "| geomean_speedup | geomean_vs_compile | null_floor |" in markdown
    assert summary_row(markdown, "p1").endswith("| 1.26x | 0.63x | 0.97x [0.95, 0.99] |")
    assert summary_row(markdown, "p2").endswith("| 1.50x | 1.00x |  |")  # absent floor: empty cell
    summary = summary_table(candidate_frame(RECORDS), (0.0, 1.0, 2.0), references).set_index("problem")
    assert summary.loc["p1", "null_floor"] == pytest.approx(0.97)  # the frame keeps the plain number
    assert pd.isna(summary.loc["p2", "null_floor"])


def test_a_failed_null_candidate_shows_its_status_and_no_number(tmp_path):
    references = [reference("p1", null_floor(status="incorrect")), reference("p1", null_floor(1.00, 0.99, 1.01), lane="cuda:1")]
    _, md_path = write_leaderboards(tmp_path, RECORDS, fast_p=(0.0,), plots=False, references=references)
    assert summary_row(md_path.read_text(), "p1").endswith("| failed: incorrect |")
    summary = summary_table(candidate_frame(RECORDS), (0.0,), references).set_index("problem")
    assert pd.isna(summary.loc["p1", "null_floor"])


def test_without_null_floors_the_summary_is_unchanged(tmp_path):
    _, md_path = write_leaderboards(tmp_path, RECORDS, fast_p=(0.0, 1.0, 2.0), plots=False, references=[reference("p1"), reference("p2")])
    assert md_path.read_text().replace(tmp_path.name, "RUN") == (GOLDEN / "leaderboard.md").read_text()
    assert "null_floor" not in summary_table(candidate_frame(RECORDS), (0.0,), []).columns


def test_the_terminal_summary_shows_the_null_floor():
    from rich.console import Console

    console = Console(record=True, width=250)
    print_leaderboard(candidate_frame(RECORDS), (0.0,), console, [reference("p1", null_floor(1.02, 1.01, 1.03))])
    text = console.export_text()
    assert "null floor" in text and "1.02x [1.01, 1.03]" in text  # the terminal's header: words apart


def end_warnings(tmp_path, references, tolerance=0.03):
    from harness.api import finish_run

    store = RunStore(tmp_path, "run")
    for r in references:
        store.append(r)
    end = finish_run(store, "cpu", tolerance)
    assert read_records(store.records_path)[-1] == end  # the warnings are part of the stored RunEnd
    return [w for w in end.warnings if "null" in w]


def test_a_null_floor_outside_the_tolerance_is_a_run_warning(tmp_path):
    warnings = end_warnings(tmp_path, [reference("p1", null_floor(1.00, 0.99, 1.01)), reference("p1", null_floor(1.06, 1.04, 1.08), lane="cuda:1")])
    assert len(warnings) == 1
    assert warnings[0].startswith("p1: null floor 1.06x [1.04, 1.08], outside 1.00x +/- 3%")
    assert "speedups on this problem are off by about +6.0%" in warnings[0] and "timing.mode=graph" in warnings[0]


def test_a_failed_null_candidate_is_a_run_warning(tmp_path):
    (warning,) = end_warnings(tmp_path, [reference("p1", null_floor(status="incorrect"))])
    assert warning.startswith("p1: the null candidate") and "failed (incorrect: trial 1 (eval): output 0 differs)" in warning


def test_a_null_floor_inside_the_tolerance_or_none_gives_no_warning(tmp_path):
    inside = [reference("p1", null_floor(0.98, 0.97, 0.99)), reference("p2", null_floor(1.03, 1.02, 1.04)), reference("p3")]
    assert end_warnings(tmp_path / "a", inside) == []
    assert end_warnings(tmp_path / "b", [reference("p1", null_floor(1.04, 1.03, 1.05))], tolerance=0.05) == []  # the run's own tolerance


def test_the_leaderboard_command_reads_the_null_floors_from_the_records(tmp_path):
    from harness.__main__ import main
    from harness.core.records import RunHeader

    store = RunStore(tmp_path, "golden")
    store.append(RunHeader(run_id="golden", started_at="2026-11-21T00:00:00+00:00", argv=(), config={}, environment={}))
    for r in [reference("p1", null_floor(1.00, 0.99, 1.01)), reference("p2", null_floor(status="incorrect"))] + RECORDS:
        store.append(r)
    assert main(["leaderboard", str(store.dir), "--no-plots"]) == 0
    markdown = (store.dir / "leaderboard.md").read_text()
    assert summary_row(markdown, "p1").endswith("| 1.00x [0.99, 1.01] |") and summary_row(markdown, "p2").endswith("| failed: incorrect |")


def test_each_ranked_speedup_says_the_protocol_it_was_timed_under():
    graph = TimingStats.from_samples([0.5, 0.5], timer="cuda_graphs", warmup_calls=1, stopped_by="target_rse", timing_mode="graph")
    fell_back = TimingStats.from_samples(
        [0.8, 0.8], timer="cuda_events", warmup_calls=1, stopped_by="target_rse", fallback="graph capture failed: cudaErrorStreamCaptureUnsupported"
    )
    records = [
        dataclasses.replace(RECORDS[0], timing=dataclasses.replace(RECORDS[0].timing, stats=graph)),
        dataclasses.replace(RECORDS[1], timing=dataclasses.replace(RECORDS[1].timing, stats=fell_back)),
        RECORDS[2],
    ]
    table = problem_table(candidate_frame(records), "p1").set_index("candidate")
    assert table.loc["fast", "protocol"] == "graph"
    assert table.loc["slow", "protocol"] == "eager, fallback"  # ranked beside a graph ratio: the column says so
    assert pd.isna(table.loc["wrong", "protocol"])  # never timed
