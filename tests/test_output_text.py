"""Text from records is shown, never interpreted: rich markup, markdown, HTML and control characters
in reasons and names reach the terminal, the markdown reports and the charts as literal text, and
terminal tables fit the terminal's width with their headers whole."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.__main__ import main
from harness.core.config import ROOT
from harness.core.errors import ExitCode
from harness.core.records import RunHeader, Stricter, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore
from harness.views.leaderboard import candidate_frame, print_leaderboard, write_leaderboards
from harness.views.progress import Progress
from harness.views.text import markdown_code, markdown_text, terminal_text, visible
from tests.records import candidate_record
from tests.sources import scale_bias_relu

EVIL = {
    "closing_tag": "shape mismatch in [/x]",
    "markup": "[bold]red[/bold]",
    "link": "[link=https://evil]x[/link]",
    "escapes": "\x1b[2J\x1b[31m",
    "table_break": "a|b\rc",  # a record's reason is one line: \r and U+2028 are line breaks it may still hold
    "html": "<script>alert(1)</script>",
}
SHOWN = {name: visible(reason) for name, reason in EVIL.items()}  # as the terminal shows them: ESC as \x1b, CR as \r


def record(candidate, reason, status=Status.RUNTIME_ERROR, problem="p1", ms=None, stricter=None):
    timing = TimingStats.from_samples(ms, timer="cuda_events", warmup_calls=1, stopped_by="target_rse") if ms else None
    return candidate_record(
        run_id="run", problem=problem, problem_hash="ph", candidate=candidate, candidate_path=f"{candidate}.py", candidate_hash=f"hash-{candidate}",
        device="cuda", status=status, reason=reason, timing=timing, reference_ms=2.0, speedup=2.0 / ms[0] if ms and status is Status.CORRECT else None,
        stricter=stricter,
    )


RECORDS = [record(name, reason) for name, reason in EVIL.items()] + [
    record("strict", "max abs error 3e-3", Status.INCORRECT, stricter=Stricter("tolerance", "within KernelBench's 1e-2")),
    record("[bold]named[/bold]", "matched 10 calls", Status.CORRECT, ms=[1.0, 1.0]),
    record("two\nlines|<b>", "a name is not checked for line breaks", Status.INCORRECT),
]


def write_run(folder: Path, records) -> Path:
    store = RunStore(folder.parent, folder.name)
    store.append(RunHeader(run_id=folder.name, started_at="2026-11-21T00:00:00+00:00", argv=(), config={}, environment={}))
    for r in records:
        store.append(r)
    return folder


def cells(row: str) -> list[str]:
    """A markdown table row split at its unescaped pipes, as GitHub splits it."""
    parts, current, escaped = [], "", False
    for char in row.strip()[1:-1]:
        if char == "|" and not escaped:
            parts.append(current)
            current = ""
        else:
            current += char
        escaped = char == "\\" and not escaped
    return parts + [current]


def table_rows(markdown: str, heading: str) -> list[str]:
    """The rows of the first table under `heading`, header and rule included."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


def printed(records, width=200) -> str:
    console = Console(record=True, width=width)  # markup on, as rich's default console has it
    print_leaderboard(candidate_frame(records), (0.0, 1.0), console)
    return console.export_text()


# --- the helpers -------------------------------------------------------------------------------


def test_visible_writes_control_characters_as_escapes_and_leaves_printable_text_alone():
    assert visible("\x1b[2J\x1b[31mred") == "\\x1b[2J\\x1b[31mred"
    assert visible("a\tb\r\nc\x9b\u202e\x00") == "a\\tb\\r\\nc\\x9b\\u202e\\x00"  # C1 CSI, bidi override, NUL
    assert visible("a\nb", keep_newlines=True) == "a\nb"
    assert visible("naïve 名前 [bold] | <b>") == "naïve 名前 [bold] | <b>"
    assert visible(visible("\x1b")) == visible("\x1b")  # idempotent: escapes are plain text


def test_terminal_text_is_never_read_as_markup_or_emoji():
    console = Console(record=True, width=80)
    console.print(terminal_text("[/x] [bold]b[/bold] :smile: \x1b[31m"))
    assert console.export_text().rstrip("\n") == "[/x] [bold]b[/bold] :smile: \\x1b[31m"


def test_markdown_text_escapes_cell_breaks_html_and_link_closers_and_keeps_one_line():
    assert markdown_text("a|b\nc") == "a\\|b<br>c"
    assert markdown_text("<script>alert(1)</script> & co") == "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"
    assert markdown_text("[click](javascript:x) [a][b]") == "[click\\](javascript:x) [a\\][b]"  # no link can close
    assert markdown_text("0.97x [0.95, 0.99]") == "0.97x [0.95, 0.99]"  # plain brackets stay readable
    assert markdown_text("[x]", brackets=True) == "\\[x\\]"  # inside a link's own text
    assert markdown_text("x\\|y `code`") == "x\\\\\\|y \\`code\\`"  # a backslash cannot unescape the pipe
    assert markdown_text("\x1b[31m") == "\\x1b[31m"


def test_markdown_text_escapes_emphasis_strikethrough_math_and_heading_marks():
    assert markdown_text("**bold** *it* _it_ __init__") == "\\*\\*bold\\*\\* \\*it\\* \\_it\\_ \\_\\_init\\_\\_"
    assert markdown_text("~~gone~~ $x^2$") == "\\~\\~gone\\~\\~ \\$x^2\\$"
    assert markdown_text("# big ##") == "\\# big \\##" and markdown_text("a#b") == "a#b"  # a heading's runs
    assert markdown_text("37_Matmul_Sum") == "37_Matmul_Sum"  # between letters, `_` never emphasises
    assert markdown_text("[x]_*", brackets=True) == "\\[x\\]\\_\\*"


def test_markdown_code_is_a_code_span_whatever_backticks_it_holds():
    assert markdown_code("runs/a") == "`runs/a`"
    assert markdown_code("a`b") == "`` a`b ``"
    assert markdown_code("x\ny\x1b") == "`x y\\x1b`"


# --- the terminal ------------------------------------------------------------------------------


def test_the_console_is_as_wide_as_columns_says_else_120_off_a_terminal_and_reads_no_markup(monkeypatch, capsys):
    from harness.views.terminal import DEFAULT_WIDTH, terminal_console, terminal_width

    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(io.StringIO()) == DEFAULT_WIDTH == 120
    monkeypatch.setenv("COLUMNS", "87")
    console = terminal_console()
    assert console.width == 87
    console.print("[bold]x[/bold] :smile: [/x]")
    assert capsys.readouterr().out == "[bold]x[/bold] :smile: [/x]\n"



def test_the_terminal_leaderboard_shows_markup_and_escape_sequences_literally():
    text = printed(RECORDS)
    for name, shown in SHOWN.items():
        assert f"{name}: {shown}" in text  # each reason, under its table, whole
    assert "[stricter than KernelBench: tolerance] max abs error 3e-3" in text
    assert "[bold]named[/bold]" in text and "two\\nlines|<b>" in text
    assert "\x1b" not in text and "\\x1b[2J\\x1b[31m" in text


def test_terminal_headers_wrap_between_words_never_inside_one_at_100_columns():
    text = printed(RECORDS + [record("a_rather_long_candidate_name_that_folds", "ok", Status.CORRECT, ms=[0.5, 0.5])], width=100)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    vocabulary = {"rank", "candidate", "status", "flags", "speedup", "protocol", "vs", "compile", "sol", "pct", "floor", "own", "share", "gradients", "ms", "reference",
                  "max", "abs", "error", "problem", "candidates", "evaluated", "correct", "fast_0", "fast_1", "geomean"}
    rules = [n for n, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"}]
    assert len(rules) == 2  # one problem, then the summary
    for rule in rules:
        header = []
        for line in reversed(lines[:rule]):
            if not line.startswith(" ") and not line.startswith("rank") and not line.startswith("problem"):
                break  # the title line
            header.append(line)
        words = {word for line in header for word in line.split()}
        assert words and words <= vocabulary, words - vocabulary


def test_the_terminal_names_the_columns_it_leaves_out_and_puts_reasons_under_the_table():
    text = printed(RECORDS, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "left out at 80 columns:" in text and "max abs" in text.split("left out at 80 columns:")[1]
    assert "reason" not in text.split("reasons")[0]  # no reason column: the reasons are notes


def test_progress_lines_show_names_and_reasons_literally(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no line cut to the width of whatever terminal (or pipe) runs the tests
    for live in (False, True):
        with Progress(total=2) as progress:
            progress.live = live
            progress.problem("[bold]p[/bold]", 2)
            progress.started("[/x]")
            progress.finished(record("[/x]", EVIL["escapes"] + EVIL["closing_tag"]))
            progress.message("note: [link=https://evil]x[/link]")
        err = capsys.readouterr().err
        assert "[bold]p[/bold]: 2 candidate(s)" in err or live
        assert "[/x]: runtime error - \\x1b[2J\\x1b[31mshape mismatch in [/x]" in err
        assert "note: [link=https://evil]x[/link]" in err and "\x1b[2J" not in err


# --- markdown ----------------------------------------------------------------------------------


def test_leaderboard_markdown_keeps_one_row_per_candidate_and_renders_reasons_inert(tmp_path):
    _, md_path = write_leaderboards(tmp_path, RECORDS, (0.0,), plots=False)
    markdown = md_path.read_text()
    rows = table_rows(markdown, "## p1")
    header = cells(rows[0])
    assert len(rows) == 2 + len(RECORDS) and all(len(cells(row)) == len(header) for row in rows)
    reasons = {cells(row)[1].strip(): cells(row)[header.index(" reason ")].strip() for row in rows[2:]}
    assert reasons["table_break"] == "a\\|b<br>c" and reasons["html"] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert reasons["strict"].startswith("[stricter than KernelBench: tolerance]")
    assert "<script>" not in markdown and "\x1b" not in markdown and "](https" not in markdown
    assert "two\\nlines\\|&lt;b&gt;" in reasons and not any(name.startswith("two<br>") for name in reasons)  # a name: `\n`


def test_leaderboard_csv_cells_a_spreadsheet_would_run_as_formulas_open_as_text(tmp_path):
    import csv

    formulas = [record("=HYPERLINK(\"https://evil\")", "+cmd|' /C calc'!A0"), record("@SUM(A1)", "-2+3", Status.INCORRECT)]
    csv_path, _ = write_leaderboards(tmp_path, formulas + [record("plain", "matched 10 calls", Status.CORRECT, ms=[1.0, 1.0])], (0.0,), plots=False)
    rows = {row["candidate"]: row for row in csv.DictReader(csv_path.open())}
    assert set(rows) == {"'=HYPERLINK(\"https://evil\")", "'@SUM(A1)", "plain"}
    assert rows["'=HYPERLINK(\"https://evil\")"]["reason"] == "'+cmd|' /C calc'!A0" and rows["'@SUM(A1)"]["reason"] == "'-2+3"
    assert rows["plain"]["reason"] == "matched 10 calls" and rows["'@SUM(A1)"]["rank"] == "-"  # the harness's own values stay as they are


def test_leaderboard_csv_cells_hold_control_characters_as_escapes_on_one_line(tmp_path):
    import csv

    named = [record("two\nlines\x1b[31m", "first\rsecond\u2028\x1b[2J"), record("\t=cmd", "ok", Status.INCORRECT)]
    csv_path, _ = write_leaderboards(tmp_path, named, (0.0,), plots=False)
    text = csv_path.read_text()
    assert "\x1b" not in text and "\r" not in text and len(text.splitlines()) == 1 + len(named)
    rows = {row["candidate"]: row for row in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"two\\nlines\\x1b[31m", "\\t=cmd"}
    assert rows["two\\nlines\\x1b[31m"]["reason"] == "first\\rsecond\\u2028\\x1b[2J"


def gate_runs(tmp_path, *, regress: bool) -> tuple[Path, Path]:
    """A baseline and a current run of the same candidates (names and reasons from EVIL): all of them
    correct and then failing (`regress`), else failing in both."""
    before = Status.CORRECT if regress else Status.INCORRECT
    base = write_run(tmp_path / "base", [record(f"{name} {reason}", "matched", before) for name, reason in EVIL.items()])
    now = write_run(tmp_path / "now", [record(f"{name} {reason}", reason) for name, reason in EVIL.items()])
    return base, now


def test_gate_markdown_keeps_one_row_per_candidate_and_renders_reasons_inert(tmp_path):
    base, now = gate_runs(tmp_path, regress=True)
    assert main(["gate", "--baseline", str(base), "--current", str(now), "--report", str(tmp_path / "gate.md")]) == ExitCode.REGRESSION
    markdown = (tmp_path / "gate.md").read_text()
    rows = table_rows(markdown, "## Regressions")
    assert len(rows) == 2 + len(EVIL) and all(len(cells(row)) == len(cells(rows[0])) for row in rows)
    assert "<script>" not in markdown and "\x1b" not in markdown and "](https" not in markdown
    assert "was correct, now runtime error: a\\|b<br>c" in markdown and "| p1 | table_break a\\|b<br>c |" in markdown


# --- the command line, end to end --------------------------------------------------------------


def cli(*args, cwd=ROOT):
    env = {**os.environ, "COLUMNS": "200"}  # wide enough that no note wraps
    return subprocess.run([sys.executable, "run.py", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_the_leaderboard_command_prints_reasons_with_markup_literally(tmp_path):
    run_dir = write_run(tmp_path / "results" / "run", RECORDS)
    done = cli("leaderboard", str(run_dir), "--no-plots")
    assert done.returncode == 0, done.stderr
    for name, shown in SHOWN.items():
        assert f"{name}: {shown}" in done.stdout
    assert "[stricter than KernelBench: tolerance]" in done.stdout and "\x1b" not in done.stdout
    assert "MarkupError" not in done.stderr


@pytest.mark.parametrize("regress, code", [(False, ExitCode.OK), (True, ExitCode.REGRESSION)])
def test_the_gate_command_keeps_its_exit_code_whatever_the_reasons_hold(tmp_path, regress, code):
    base, now = gate_runs(tmp_path, regress=regress)
    done = cli("gate", "--baseline", str(base), "--current", str(now))
    assert done.returncode == code, done.stderr
    assert "\x1b" not in done.stdout and (now / "gate.md").is_file() and "<script>" not in (now / "gate.md").read_text()
    if regress:  # the terminal shows each reason literally, as every view does
        assert all(shown in done.stdout for shown in SHOWN.values())


CANDIDATE = scale_bias_relu(forward='raise RuntimeError("shape mismatch in [/tmp/kernel.cu] [bold]x")')


def _as_correct(line):
    """A records file line, its candidate made correct (as a baseline where it still passed)."""
    if line.get("kind") == "candidate":
        line["decision"]["status"] = "correct"
    return line


@pytest.mark.slow
def test_a_run_whose_candidate_raises_markup_exits_2_prints_it_and_gates(tmp_path):
    """Before: rich read the reason as markup, the run ended in a MarkupError traceback (exit 1) and
    --gate never ran."""
    problems, solutions, results = tmp_path / "problems", tmp_path / "solutions" / "1_Scale_Bias_ReLU", tmp_path / "results"
    problems.mkdir()
    solutions.mkdir(parents=True)
    (problems / "1_Scale_Bias_ReLU.py").write_text((ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py").read_text())
    (solutions / "raises.py").write_text(CANDIDATE)
    common = ["--problems-dir", str(problems), "--problem", "1_Scale_Bias_ReLU", "--device", "cpu", "--no-timing", "--trials", "2",
              "--results", str(results), "--set", f"solutions_dir={tmp_path / 'solutions'}",
              "--set", f"build_cache_dir={tmp_path / 'builds'}", "--set", f"measurement_cache_dir={tmp_path / 'measurements'}"]
    first = cli(*common, "--run-id", "first")
    assert first.returncode == ExitCode.CANDIDATES_FAILED, first.stderr
    assert "raises: RuntimeError: shape mismatch in [/tmp/kernel.cu] [bold]x" in first.stdout and "Traceback" not in first.stderr
    lines = (results / "first" / "records.jsonl").read_text().splitlines()
    baseline = tmp_path / "baseline.jsonl"  # the same candidate, correct in the baseline
    baseline.write_text("\n".join(json.dumps(_as_correct(json.loads(line))) for line in lines) + "\n")
    gated = cli(*common, "--run-id", "gated", "--gate", str(baseline))
    assert gated.returncode == ExitCode.REGRESSION, gated.stderr
    assert "was correct, now runtime error: RuntimeError: shape mismatch in [/tmp/kernel.cu] [bold]x" in (results / "gated" / "gate.md").read_text()


# --- charts and order ---------------------------------------------------------------------------


def test_a_chart_draws_names_with_dollar_signs_and_escapes_as_plain_text(tmp_path):
    pytest.importorskip("matplotlib")
    from harness.views import plots
    from harness.views.leaderboard import problem_table

    named = [record("a$\\frac{1", "ok", Status.CORRECT, problem="p$\\frac{", ms=[1.0, 1.0]), record("b\x1b[2J$$", "ok", Status.CORRECT, problem="p$\\frac{", ms=[2.0, 2.0])]
    assert plots.plot_problem(problem_table(candidate_frame(named), "p$\\frac{"), "p$\\frac{", tmp_path / "chart.png")  # mathtext would raise
    assert (tmp_path / "chart.png").stat().st_size > 0


def test_problems_and_candidates_are_listed_in_natural_order(tmp_path):
    records = [record(c, "why", problem=p) for p in ("l1_p10", "l1_p2") for c in ("c10", "c2")]
    _, md_path = write_leaderboards(tmp_path, records, (0.0,), plots=False)
    markdown = md_path.read_text()
    assert markdown.index("## l1_p2") < markdown.index("## l1_p10")
    assert [cells(row)[1].strip() for row in table_rows(markdown, "## l1_p2")[2:]] == ["c2", "c10"]
    text = printed(records)
    assert text.index("l1_p2") < text.index("l1_p10") and text.index("c2 ") < text.index("c10 ")
