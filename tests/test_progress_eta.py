"""The estimate of the time left: none until two candidates have finished (the first one carries the
run's start-up: its first builds and the reference), then the rate since the first one finished."""

from harness.core.status import Status
from harness.views.progress import Progress
from tests.records import candidate_record


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(name: str):
    return candidate_record(run_id="r", problem="p", problem_hash="h", candidate=name, candidate_path=f"{name}.py",
                            candidate_hash="x", device="cpu", status=Status.CORRECT, reason="ok")


def test_no_estimate_until_a_second_candidate_has_finished_despite_a_slow_start(capsys):
    clock = Clock()
    with Progress(total=20, clock=clock) as progress:
        progress.problem("p", 20)
        clock.now = 90.0  # the first candidate: builds, the reference pass, torch.compile
        progress.finished(_record("a"))
        assert progress.seconds_left() is None
        clock.now = 96.0  # then one every 6 s
        progress.finished(_record("b"))
        assert progress.seconds_left() == 6.0 * 18
        clock.now = 102.0
        progress.finished(_record("c"))
        assert progress.seconds_left() == 6.0 * 17
    first, second, third = capsys.readouterr().err.splitlines()[1:]
    assert "ETA" not in first and second.endswith("ETA 1m48s)") and third.endswith("ETA 1m42s)")


def test_no_estimate_when_nothing_is_left_or_no_time_has_passed_since_the_first():
    clock = Clock()
    with Progress(total=2, clock=clock, quiet=True) as progress:
        progress.finished(_record("a"))
        progress.finished(_record("b"))  # at the same instant: no rate to tell
        assert progress.seconds_left() is None and "ETA" not in progress.overall()
    with Progress(total=3, clock=clock, quiet=True) as progress:
        progress.finished(_record("a"))
        clock.now += 5
        progress.finished(_record("b"))
        assert progress.seconds_left() == 5.0 and progress.overall().endswith("ETA 0m05s")
        clock.now += 5
        progress.finished(_record("c"))
        assert progress.seconds_left() is None


def test_a_progress_line_fits_an_80_column_terminal_its_reason_cut_not_its_counts(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    long = candidate_record(run_id="r", problem="p", problem_hash="h", candidate="k", candidate_path="k.py",
                            candidate_hash="x", device="cpu", status=Status.INCORRECT, reason="max abs error " + "x" * 200)
    with Progress(total=2) as progress:
        progress.problem("p", 2)
        progress.finished(long)
    line = capsys.readouterr().err.splitlines()[-1]
    assert len(line) <= 80 and line.endswith("(run 1/2, 1 queued, 1 failed)") and "max abs error xx" in line and "…" in line
