"""Reports from stored records: charts next to the leaderboard, and `run.py leaderboard` rebuilding it."""
import dataclasses
import sys

import pytest
from test_leaderboard import GOLDEN, RECORDS, record

from harness.__main__ import main
from harness.core.errors import ExitCode
from harness.core.records import RunEnd, RunHeader
from harness.core.status import Status
from harness.core.store import RunStore
from harness.views import plots
from harness.views.leaderboard import candidate_frame, problem_table, write_leaderboards

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST_P = (0.0, 1.0, 2.0)


def without_chart_lines(markdown):
    """The markdown minus chart links (each followed by a blank line) and the matplotlib note."""
    lines = markdown.split("\n")
    kept, skip_blank = [], False
    for line in lines:
        if skip_blank and line == "":
            skip_blank = False
            continue
        skip_blank = line.startswith("![") or line.startswith("Charts need matplotlib")
        if not skip_blank:
            kept.append(line)
    return "\n".join(kept)


def store_run(results, run_id, records, fast_p=FAST_P, charts=False):
    """A run folder as the run command leaves it: header, candidate records, end, leaderboards."""
    records = [dataclasses.replace(r, identity=dataclasses.replace(r.identity, run_id=run_id)) for r in records]
    store = RunStore(results, run_id)
    store.append(RunHeader(run_id=run_id, started_at="2026-11-21T00:00:00+00:00", argv=("--all",),
                           config={"leaderboard": {"fast_p": list(fast_p)}}, environment={}))
    for r in records:
        store.append(r)
    store.append(RunEnd(run_id=run_id, finished_at="2026-11-21T00:01:00+00:00", gpu_end={}))
    write_leaderboards(store.dir, records, fast_p, plots=charts)
    return store.dir


def sections(markdown):
    return [line[3:] for line in markdown.splitlines() if line.startswith("## ") and line != "## Summary"]


def test_charts_are_written_as_png_and_linked_under_each_problem_heading(tmp_path):
    pytest.importorskip("matplotlib")
    _, md_path = write_leaderboards(tmp_path, RECORDS, FAST_P)
    for problem in ("p1", "p2"):
        png = tmp_path / "plots" / f"{problem}.png"
        assert png.stat().st_size > 0 and png.read_bytes()[:8] == PNG_MAGIC
    lines = md_path.read_text().splitlines()
    for problem in ("p1", "p2"):
        heading = lines.index(f"## {problem}")
        assert lines[heading + 2] == f"![{problem}: speedups](plots/{problem}.png)"
    # the charts add their links and nothing else
    golden = (GOLDEN / "leaderboard.md").read_text()
    assert without_chart_lines(md_path.read_text()).replace(tmp_path.name, "RUN") == golden
    assert (tmp_path / "leaderboard.csv").read_text() == (GOLDEN / "leaderboard.csv").read_text()


def test_problem_without_a_correct_candidate_gets_no_chart_and_no_link(tmp_path):
    pytest.importorskip("matplotlib")
    write_leaderboards(tmp_path, RECORDS + [record("p3", "ok_once", Status.CORRECT, "matched", ms=1.0)], FAST_P)
    assert (tmp_path / "plots" / "p3.png").is_file()
    later = [record("p3", "ok_once", Status.INCORRECT, "trial 1: differs"), record("p3", "other", Status.BUILD_FAILED, "error")]
    _, md_path = write_leaderboards(tmp_path, RECORDS + later, FAST_P)
    markdown = md_path.read_text()
    assert not (tmp_path / "plots" / "p3.png").exists()  # the earlier chart no longer applies
    assert "plots/p3.png" not in markdown and "## p3" in markdown
    assert (tmp_path / "plots" / "p1.png").is_file() and "plots/p1.png" in markdown


def test_without_matplotlib_no_chart_no_link_and_one_note_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert not plots.available()
    _, md_path = write_leaderboards(tmp_path, RECORDS, FAST_P)
    markdown = md_path.read_text()
    assert not (tmp_path / "plots").exists() and "](plots/" not in markdown
    notes = [line for line in markdown.splitlines() if "pip install '.[plots]'" in line]
    assert len(notes) == 1
    assert without_chart_lines(markdown).replace(tmp_path.name, "RUN") == (GOLDEN / "leaderboard.md").read_text()


def test_chart_caption_counts_what_is_not_drawn():
    records = RECORDS + [record("p1", "late", Status.INCORRECT, "differs"), record("p1", "gpu", Status.NEEDS_CUDA, "needs CUDA")]
    table = problem_table(candidate_frame(records), "p1")
    assert plots.caption(table, drawn=3, plottable=3) == "4 not correct (2 incorrect, 1 build failed, 1 no custom kernel); 1 skipped (needs CUDA)"
    assert plots.caption(table, drawn=1, plottable=3).endswith("showing the fastest 1 of 3 correct")


def test_leaderboard_command_rebuilds_the_same_files_from_a_run_folder(tmp_path, capsys):
    run_dir = store_run(tmp_path / "results", "run-a", RECORDS, charts=True)
    original = {name: (run_dir / name).read_text() for name in ("leaderboard.md", "leaderboard.csv")}
    charts = sorted(p.name for p in (run_dir / "plots").glob("*.png")) if plots.available() else []
    for name in original:
        (run_dir / name).unlink()
    if charts:
        for png in (run_dir / "plots").iterdir():
            png.unlink()
    assert main(["leaderboard", str(run_dir)]) == ExitCode.OK
    assert {name: (run_dir / name).read_text() for name in original} == original  # fast_p came from the run's header
    assert sorted(p.name for p in (run_dir / "plots").glob("*.png")) == charts
    out = capsys.readouterr()
    assert "fast" in out.out and "summary" in out.out  # the rich tables
    assert out.err.startswith("wrote ")


def test_leaderboard_command_finds_a_run_by_id_or_records_file(tmp_path):
    run_dir = store_run(tmp_path / "results", "run-a", RECORDS)
    original = (run_dir / "leaderboard.md").read_text()
    assert main(["leaderboard", "run-a", "--results", str(tmp_path / "results"), "--no-plots"]) == ExitCode.OK
    assert (run_dir / "leaderboard.md").read_text() == original
    assert main(["leaderboard", str(run_dir / "records.jsonl"), "--out", str(tmp_path / "copy"), "--no-plots"]) == ExitCode.OK
    assert "## p1" in (tmp_path / "copy" / "leaderboard.md").read_text()


def test_leaderboard_command_filters_by_problem_and_status(tmp_path):
    run_dir = store_run(tmp_path / "results", "run-a", RECORDS + [record("p10", "x", Status.CORRECT, "matched", ms=1.0)])
    out = tmp_path / "out"
    assert main(["leaderboard", str(run_dir), "--out", str(out), "--problem", "p1", "--no-plots"]) == ExitCode.OK
    assert sections((out / "leaderboard.md").read_text()) == ["p1"]  # an exact name is not a prefix
    assert main(["leaderboard", str(run_dir), "--out", str(out), "--problem", "p", "--no-plots"]) == ExitCode.OK
    assert sections((out / "leaderboard.md").read_text()) == ["p1", "p2", "p10"]  # natural order
    assert main(["leaderboard", str(run_dir), "--out", str(out), "--status", "build failed", "--status", "INCORRECT", "--no-plots"]) == ExitCode.OK
    csv = (out / "leaderboard.csv").read_text().splitlines()
    assert sorted(line.split(",")[2] for line in csv[1:]) == ["broken", "wrong"]
    assert main(["leaderboard", str(run_dir), "--out", str(out), "--problem", "p1", "--status", "correct", "--no-plots"]) == ExitCode.OK
    assert [line.split(",")[2] for line in (out / "leaderboard.csv").read_text().splitlines()[1:]] == ["fast", "side", "slow"]


def test_a_filtered_leaderboard_goes_beside_the_runs_own_never_over_it(tmp_path, capsys):
    run_dir = store_run(tmp_path / "results", "run-a", RECORDS)
    original = {name: (run_dir / name).read_text() for name in ("leaderboard.md", "leaderboard.csv")}
    assert main(["leaderboard", str(run_dir), "--status", "correct", "--no-plots"]) == ExitCode.OK
    assert {name: (run_dir / name).read_text() for name in original} == original
    view = run_dir / "views" / "status-correct"
    assert {line.split(",")[3] for line in (view / "leaderboard.csv").read_text().splitlines()[1:]} == {"correct"}
    assert str(view / "leaderboard.md") in capsys.readouterr().err
    assert main(["leaderboard", str(run_dir), "--problem", "p1", "--status", "build failed", "--no-plots"]) == ExitCode.OK
    assert (run_dir / "views" / "problem-p1_status-build-failed" / "leaderboard.md").is_file()
    assert {name: (run_dir / name).read_text() for name in original} == original


def test_combined_runs_later_record_wins_and_run_filter_keeps_one_run(tmp_path):
    results = tmp_path / "results"
    first = store_run(results, "run-a", RECORDS)
    second = store_run(results, "run-b", [record("p1", "wrong", Status.CORRECT, "fixed", ms=1.0)])
    out = tmp_path / "combined"
    assert main(["leaderboard", str(first), str(second), "--out", str(out), "--no-plots"]) == ExitCode.OK
    rows = {line.split(",")[2]: line.split(",")[3] for line in (out / "leaderboard.csv").read_text().splitlines()[1:]}
    assert rows["wrong"] == "correct" and rows["fast"] == "correct" and len(rows) == 8
    assert main(["leaderboard", str(first), str(second), "--out", str(out), "--run", "run-a", "--no-plots"]) == ExitCode.OK
    rows = {line.split(",")[2]: line.split(",")[3] for line in (out / "leaderboard.csv").read_text().splitlines()[1:]}
    assert rows["wrong"] == "incorrect"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--status", "fast"], "--status 'fast' is not a status; one of: correct, incorrect, extract failed"),
        (["--problem", "q9"], "--problem 'q9': no records for such a problem"),
        (["--run", "run-z"], "--run 'run-z': no records of that run id; these records have run-a"),
        (["--problem", "p2", "--status", "incorrect"], "no candidate records left after --problem p2 --status 'incorrect'"),
        (["RUN_B"], "2 runs are combined: say where the leaderboard goes with --out DIR"),
    ],
)
def test_leaderboard_usage_errors_exit_1_with_one_line(tmp_path, capsys, extra, message):
    run_dir = store_run(tmp_path / "results", "run-a", RECORDS)
    extra = [str(run_dir) if e == "RUN_B" else e for e in extra]
    before = (run_dir / "leaderboard.md").read_text()
    assert main(["leaderboard", str(run_dir), *extra, "--no-plots"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert (run_dir / "leaderboard.md").read_text() == before  # nothing rewritten


def test_leaderboard_of_a_missing_run_is_a_usage_error(tmp_path, capsys):
    assert main(["leaderboard", "no-such-run", "--results", str(tmp_path)]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err == f"error: no run 'no-such-run': not a records file, a run folder or a run id with records in {tmp_path}"
