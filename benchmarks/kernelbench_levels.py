"""KernelBench levels 1-3 through the harness, problem by problem, resumable and in parts.

    python3 benchmarks/kernelbench_levels.py --tree DIR [--fetch-from GIT_DIR]
    python3 benchmarks/kernelbench_levels.py --tree DIR --state STATE [--levels 1 2 3] [--only level1/19_ReLU ...]
                                             [--start N --count M] [--budget-s S] [--timeout S] [--redo]
                                             [--device auto|cuda|cpu] [--set KEY=VALUE ...] [--no-lint] [--batch N]
                                             [--queue FILE]
    python3 benchmarks/kernelbench_levels.py --state STATE [--merge-from DIR ...] [--summary OUT.md] [--tree DIR]
                                             [--kernelbench-baseline FILE_OR_GIT_DIR]

--tree is KernelBench's problem folder (the one holding level1/ level2/ level3/). --fetch-from
writes levels 1-3 into it from a git directory (or a checkout) of the public KernelBench
repository, skipping files already there; without --state that is all it does.

For each problem, in (level, problem id) order:
  - the lint (`run.py lint`): its verdict (fail > warn > pass) and the checks behind it;
  - the null candidate: the problem file with its class `Model` renamed `ModelNew` (identifiers
    only: `Model` in strings and comments, docstrings included, is left as it is; `x.Model`, an
    attribute of something else, too), run as `run.py --solution` against the problem with the
    harness's own null candidate off (this one is it), the torch.compile baseline on, and the
    no-custom-kernel and wraps-reference flags at `flag` (a null candidate is torch and runs every
    reference kernel: at `fail` it would get no speedup) and the sanitizer off;
  - one JSON line in STATE/results.jsonl, written as soon as the problem is done: `problem`
    (level1/19_ReLU), `level`, `id`, `exit` (run.py's; null when it was stopped), `timed_out`,
    `wall_s` (lint + run), `status` and `reason` (the null candidate's record; status null when
    there is none), `speedup`, `low`, `high`, `protocol` (its paired rounds), `reference_ms` (the
    eager reference's median in those rounds), `reference_eager_ms` and `reference_mode` (the
    reference record's own timing), `compile` (the torch.compile baseline: ok, reason, speedup over
    eager with its interval, ms), `sol_fraction`, `flags`, `warnings`, `lint_verdict`
    (pass | warn | fail | timeout | error), `lint_reason`, `lint_checks`, and tails of the logs
    when something failed.
Each problem runs with TMPDIR, the build cache and torch.compile's caches in STATE/tmp/<problem>/,
and its run folder in STATE/results/; both are removed when the problem is done (killed or not),
so nothing of a large problem stays on disk. A problem that already has a line is skipped (unless
--redo); a killed invocation loses at most the problem in flight.

--budget-s S stops before starting a problem once the elapsed time plus the median problem wall
time so far would pass S, and cuts the per-problem limits to what is left: a problem cut short by
the budget (not by its own --timeout) gets no line, so the next invocation runs it again.

--batch N (N > 1) amortises the start-up of run.py (its judge, the torch.compile baseline's
workers): the problems still to run go in groups of up to N, each group within one level, and each
group is ONE `run.py --all` over the group's null candidates (written to a solutions tree in the
group's scratch, STATE/tmp/<group>/solutions/<problem>/null.py) with --timeout times the group's
size as its limit (cut to the budget that is left). The lint is skipped, as with --no-lint: it is
one subprocess per problem. Each problem of the group gets its line from the run folder's records,
with `batch` (the group's size), `wall_s` and `run_wall_s` the group's wall divided evenly over the
problems that got a line, and `batch_wall_s` the group's whole wall. A group stopped at its limit
gives lines only to the problems that have their candidate record; the others run again next
time (a group of one problem is judged as --batch 1 would judge it). --batch 1 (the default) is
the problem-by-problem run above.

--queue FILE shares one sitting's problems among several invocations, one per GPU, each with a state
of its own (benchmarks/kernelbench_gpus.sh starts them): each group (or problem, with --batch 1) is
claimed in FILE, under a lock, just before it runs, so a GPU that finishes early takes the next one
and no problem runs twice. A claimed problem that the budget cut short gets no line; a later sitting
with a fresh FILE runs it.

--merge-from DIR ... writes STATE/results.jsonl from those states' lines (per problem the line that
finished last; STATE itself may be among them); with --queue FILE, FILE starts afresh with the merged
problems as claimed; with --summary, the report follows.

--summary writes a markdown report from STATE/results.jsonl alone (nothing is run).
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import html
import io
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import tokenize
from pathlib import Path
from typing import Any, Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.core.schema import upgrade  # noqa: E402

LEVELS = (1, 2, 3)
RUN_DEFAULTS = (  # before the caller's --set, which may override them
    "timing.null_candidate=off",
    "flags.no_custom_kernel=flag",
    "flags.wraps_reference=flag",
    "sanitizer.enabled=off",
)
DEGENERATE_CHECKS = ("deterministic", "zeros fail", "constant fails", "depends on inputs", "depends on weights")
KERNELBENCH_BASELINE = "results/timing/H100_Modal/baseline_time_torch.json"
STOP_GRACE_S = 30.0  # after SIGTERM, how long a run may take to end its workers before they are killed
LINT_STARTUP_S = 60.0  # the lint's own per-problem limit plus this is its wall-clock limit


# ---------------------------------------------------------------- the problem list


@dataclasses.dataclass(frozen=True)
class Entry:
    level: int
    number: int
    name: str  # file stem, e.g. 19_ReLU
    path: Path

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.name}"

    @property
    def slug(self) -> str:
        return f"level{self.level}_{self.name}"


def problem_list(tree: Path, levels: Iterable[int]) -> list[Entry]:
    """Every problem file of the chosen levels, in (level, problem id, name) order."""
    found = []
    for level in sorted(set(levels)):
        for path in (tree / f"level{level}").glob("*.py"):
            head = path.stem.split("_", 1)[0]
            if not path.name.startswith("_"):
                found.append(Entry(level, int(head) if head.isdigit() else 10**9, path.stem, path))
    return sorted(found, key=lambda e: (e.level, e.number, e.name))


def normalise_key(text: str) -> str:
    return text.strip().removesuffix(".py")


def select(entries: list[Entry], only: list[str], start: int, count: Optional[int]) -> list[Entry]:
    """--only (level<L>/<name>, with or without .py, or level<L>/<id>), then --start/--count over what is left."""
    if only:
        wanted = [normalise_key(o) for o in only]
        chosen = [e for e in entries if e.key in wanted or f"level{e.level}/{e.number}" in wanted]
        missing = [w for w in wanted if not any(w in (e.key, f"level{e.level}/{e.number}") for e in chosen)]
        if missing:
            raise SystemExit(f"error: --only: not in the tree: {', '.join(missing)}")
        entries = chosen
    end = None if count is None else start + count
    return entries[start:end]


def fetch_tree(source: Path, tree: Path, levels: Iterable[int] = LEVELS) -> int:
    """Write KernelBench/level<L>/*.py from a KernelBench git directory or checkout into `tree`,
    skipping files already there; the number of files written."""
    written = 0
    for level in levels:
        folder = f"KernelBench/level{level}"
        (tree / f"level{level}").mkdir(parents=True, exist_ok=True)
        for name in _listed(source, folder):
            target = tree / f"level{level}" / name
            if not target.exists():
                target.write_bytes(_read_source(source, f"{folder}/{name}"))
                written += 1
    return written


def _listed(source: Path, folder: str) -> list[str]:
    if (source / folder).is_dir():
        return sorted(p.name for p in (source / folder).glob("*.py"))
    listed = subprocess.run(["git", "--git-dir", str(source), "ls-tree", "--name-only", f"HEAD:{folder}"], capture_output=True, text=True, check=False)
    if listed.returncode:
        raise SystemExit(f"error: {folder} is neither in {source} nor in its git HEAD: {listed.stderr.strip()}")
    return sorted(n for n in listed.stdout.split() if n.endswith(".py"))


def _read_source(source: Path, relative: str) -> bytes:
    """A file of the KernelBench repository, from a checkout or from a git directory's HEAD."""
    if (source / relative).is_file():
        return (source / relative).read_bytes()
    return subprocess.run(["git", "--git-dir", str(source), "show", f"HEAD:{relative}"], capture_output=True, check=True).stdout


# ---------------------------------------------------------------- the null candidate


def null_candidate(source: str) -> str:
    """`source` with every identifier `Model` renamed `ModelNew`: the class, `super(Model, self)`,
    any other use by name. Whole names only (`ModelConfig` stays); not an attribute of something
    else (`x.Model`); not inside strings or comments (a docstring's "Model that ..." stays).
    A source that does not tokenize gets the same rename by regular expression, strings included."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return re.sub(r"(?<![.\w])Model\b", "ModelNew", source)
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    spots, previous = [], None
    for token in tokens:
        if token.type == tokenize.NAME and token.string == "Model" and not (previous is not None and previous.type == tokenize.OP and previous.string == "."):
            spots.append(token.start)
        if token.type not in skip:
            previous = token
    lines = io.StringIO(source).readlines()  # split as tokenize's readline split them
    for row, col in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "ModelNew" + line[col + len("Model"):]
    return "".join(lines)


# ---------------------------------------------------------------- subprocesses and their trees


def _start_time(pid: int) -> Optional[str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root` (the harness starts its workers in sessions of their own, so
    a process group does not reach them), with its start time: pid -> start time."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        start = _start_time(pid)
        if start is not None and pid not in found:
            found[pid] = start
            todo += children.get(pid, [])
    return found


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM the process (run.py ends its workers on it), then SIGKILL whatever of its tree is left."""
    tree = descendants(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            tree.update(descendants(proc.pid))
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    for pid, start in tree.items():
        if _start_time(pid) == start:  # still the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclasses.dataclass
class Finished:
    exit: Optional[int]  # None when it was stopped at its limit
    wall_s: float
    stdout: str
    stderr: str
    timed_out: bool
    limit: float


def run_bounded(command: list[str], limit: float, env: dict[str, str], folder: Path, name: str) -> Finished:
    """`command` in ROOT, its output in files under `folder`, stopped (with its whole tree) after `limit` s."""
    out_path, err_path = folder / f"{name}.stdout", folder / f"{name}.stderr"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=max(limit, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.poll() is None:  # the limit, or an interrupt of this script
                previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
                try:
                    stop_tree(proc)
                finally:
                    signal.signal(signal.SIGTERM, previous)
    wall = time.monotonic() - started
    return Finished(None if timed_out else proc.returncode, round(wall, 2), read_text(out_path), read_text(err_path), timed_out, limit)


def tail(text: str, chars: int = 600) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-6:])[-chars:]


# ---------------------------------------------------------------- one problem


class BudgetCut(Exception):
    """The invocation's budget ran out while a problem was in flight: it gets no line (unless it
    had the whole budget to itself). `partial`: what it had found by then (the lint)."""

    partial: dict[str, Any] = {}


def problem_env(scratch: Path) -> dict[str, str]:
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch / "tmp"), "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
            "TRITON_CACHE_DIR": str(scratch / "triton"), "PYTHONUNBUFFERED": "1"}


def harness_sets(args: argparse.Namespace, scratch: Path, state: Path) -> list[str]:
    sets = [f"build_cache_dir={json.dumps(str(scratch / 'builds'))}", f"measurement_cache_dir={json.dumps(str(state / 'cache' / 'measurements'))}"]
    sets += list(RUN_DEFAULTS) + list(args.set)
    return [part for s in sets for part in ("--set", s)]


def run_lint(entry: Entry, args: argparse.Namespace, scratch: Path, state: Path, limit: float) -> dict[str, Any]:
    out = scratch / "lint.md"
    command = [sys.executable, "run.py", "lint", entry.key, "--device", args.device, "--out", str(out),
               "--set", f"problems_dir={json.dumps(str(args.tree))}", "--set", f"lint.timeout_s={args.lint_timeout:g}", *harness_sets(args, scratch, state)]
    done = run_bounded(command, limit, problem_env(scratch), scratch, "lint")
    if done.timed_out and limit < args.lint_timeout + LINT_STARTUP_S:
        raise BudgetCut(entry.key)
    checks = parse_lint(out.read_text(encoding="utf-8"), entry.name) if out.is_file() else []
    if done.timed_out:
        verdict, reason = "timeout", f"the lint ran past {limit:.0f} s"
    elif not checks:
        verdict, reason = "error", f"exit {done.exit}: {tail(done.stderr) or 'no report'}"
    else:
        verdict, reason = lint_verdict(checks)
    return {"lint_verdict": verdict, "lint_reason": reason, "lint_checks": {c: v for c, v, _ in checks}, "lint_exit": done.exit, "lint_wall_s": done.wall_s}


CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell ends at a pipe the report did not escape
ESCAPED = re.compile(r"\\(.)")


def cell_text(cell: str) -> str:
    """A report cell as plain text: the report writes names and details as literal markdown
    (harness.views.text.markdown_text: `\\_`, `\\|`, `&lt;`, `<br>`), which this undoes."""
    return html.unescape(ESCAPED.sub(r"\1", cell.strip().replace("<br>", "\n")))


def parse_lint(markdown: str, name: str) -> list[tuple[str, str, str]]:
    """(check, verdict, detail) for `name` from run.py lint's markdown table."""
    rows = []
    for line in markdown.splitlines():
        cells = [cell_text(c) for c in CELL_SPLIT.split(line.strip().removeprefix("|").removesuffix("|"))]
        if len(cells) == 4 and cells[0] == name:
            rows.append((cells[1], cells[2].strip("*"), cells[3]))
    return rows


def lint_verdict(checks: list[tuple[str, str, str]]) -> tuple[str, str]:
    """fail when a check fails, else warn when one warns, else pass; the reason names those checks."""
    for verdict in ("fail", "warn"):
        hits = [f"{c}: {d}" for c, v, d in checks if v == verdict]
        if hits:
            return verdict, "; ".join(hits)[:600]
    return "pass", ""


def run_null(entry: Entry, args: argparse.Namespace, scratch: Path, state: Path, limit: float) -> dict[str, Any]:
    candidate = write_null(entry, scratch / "null" / "null.py")
    results = state / "results"
    shutil.rmtree(results / entry.slug, ignore_errors=True)  # a killed invocation's leftovers
    command = [sys.executable, "run.py", "--problems-dir", str(args.tree), "--problem", entry.key, "--solution", str(candidate),
               "--run-id", entry.slug, "--results", str(results), "--json", "--quiet", "--device", args.device, *harness_sets(args, scratch, state)]
    try:
        done = run_bounded(command, limit, problem_env(scratch), scratch, "run")
        if done.timed_out and limit < args.timeout:
            raise BudgetCut(entry.key)
        records = read_run_folder(results / entry.slug)
        printed = next((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")), None)  # run.py --json: the record without its kind
        candidate_record = upgrade({"kind": "candidate", **printed}) if printed else records.get("candidate")
        keep_records(args, state, results / entry.slug)
        return with_log_tail(outcome(candidate_record, records.get("reference"), done), results / entry.slug, entry)
    finally:
        shutil.rmtree(results / entry.slug, ignore_errors=True)


def write_null(entry: Entry, path: Path) -> Path:
    """The problem's null candidate (the file with Model renamed ModelNew) at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(null_candidate(entry.path.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def keep_records(args: argparse.Namespace, state: Path, folder: Path) -> None:
    """With --keep-records: the run folder's records.jsonl into STATE/records/, named after the run."""
    if args.keep_records and (folder / "records.jsonl").is_file():
        (state / "records").mkdir(exist_ok=True)
        shutil.copyfile(folder / "records.jsonl", state / "records" / f"{folder.name}.jsonl")


def with_log_tail(line: dict[str, Any], folder: Path, entry: Entry) -> dict[str, Any]:
    """`line`, with the end of the null candidate's log from the run `folder` when it is not correct."""
    if line["status"] not in (None, "correct"):
        line["log_tail"] = tail(read_text(folder / "logs" / entry.name / "null.log"), 800)
    return line


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def last_lines(path: Path, key: str) -> dict[str, dict[str, Any]]:
    """The last JSON object per value of `key` in a JSON-lines file (a half-written line is skipped)."""
    found: dict[str, dict[str, Any]] = {}
    for text in read_text(path).splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and line.get(key):
            found[line[key]] = line
    return found


def read_run_folder(folder: Path) -> dict[str, dict[str, Any]]:
    """The last record of each kind in a run folder's records.jsonl, in this harness's layout (a line of
    an earlier schema version upgraded: harness.core.schema.upgrade)."""
    return {kind: upgrade(line) for kind, line in last_lines(folder / "records.jsonl", "kind").items()}


def read_run_folder_by_problem(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """A run folder of several problems (--batch): problem name (`identity.problem`, the file stem) ->
    the last record of each kind for it, upgraded as read_run_folder's are. Records of no problem (the
    run's own start and end) and half-written lines are left out."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for text in read_text(folder / "records.jsonl").splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(line, dict) or not line.get("kind"):
            continue
        line = upgrade(line)
        problem = (line.get("identity") or {}).get("problem")
        if problem:
            found.setdefault(problem, {})[line["kind"]] = line
    return found


def _interval(paired: Optional[dict[str, Any]]) -> tuple[Any, Any, Any]:
    paired = paired or {}
    return paired.get("speedup"), paired.get("low"), paired.get("high")


def outcome(candidate: Optional[dict[str, Any]], reference: Optional[dict[str, Any]], done: Finished) -> dict[str, Any]:
    """The result line's run fields from the candidate record (in its parts), the reference record and the process."""
    line: dict[str, Any] = {"exit": done.exit, "timed_out": done.timed_out, "run_wall_s": done.wall_s, "status": None, "reason": ""}
    if candidate is not None:
        decision, timing = candidate.get("decision") or {}, candidate.get("timing") or {}
        _, low, high = _interval(timing.get("paired"))
        line.update(status=decision.get("status"), reason=decision.get("reason", ""), speedup=timing.get("speedup"), low=low, high=high,
                    protocol=(timing.get("paired") or {}).get("protocol", ""), reference_ms=timing.get("reference_ms"),
                    candidate_ms=(timing.get("stats") or {}).get("median_ms"), sol_fraction=timing.get("sol_fraction"),
                    flags=[f.get("code") for f in (candidate.get("integrity") or {}).get("flags", [])], warnings=[w[:200] for w in decision.get("warnings", [])][:5],
                    candidate_wall_s=(candidate.get("provenance") or {}).get("wall_seconds"))
    elif done.timed_out:
        line["reason"] = f"run.py ran past its limit ({done.limit:.0f} s)"
    else:
        line["reason"] = f"no candidate record; run.py exit {done.exit}: {tail(done.stderr) or 'no output'}"
    if done.exit not in (0, 2) and not done.timed_out:
        line["stderr_tail"] = tail(done.stderr)
    if reference is not None:
        line.update(reference_fields(reference))
    return line


def reference_fields(reference: dict[str, Any]) -> dict[str, Any]:
    identity, outcome, profile, times, provenance = (
        reference.get(part) or {} for part in ("identity", "outcome", "profile", "timing", "provenance"))
    timing = times.get("stats") or {}
    sol = profile.get("speed_of_light") or {}
    fields: dict[str, Any] = {
        "reference_ok": outcome.get("ok"), "reference_reason": outcome.get("reason", "")[:300], "reference_wall_s": provenance.get("wall_seconds"),
        "reference_eager_ms": timing.get("median_ms"), "reference_mode": timing.get("timing_mode"), "device_name": identity.get("device_name", ""),
        "peak_bytes": outcome.get("peak_bytes"), "sol_floor_ms": sol.get("floor_ms"), "sol_bound": sol.get("bound"),
    }
    baselines = times.get("baselines") or []
    if baselines:
        first = baselines[0]
        speedup, low, high = _interval(first.get("paired"))
        fields["compile"] = {"name": first.get("name"), "ok": first.get("ok"), "reason": first.get("reason", "")[:300], "speedup": speedup, "low": low, "high": high,
                             "ms": (first.get("timing") or {}).get("median_ms"), "compile_s": first.get("compile_seconds")}
    return fields


def run_one(entry: Entry, args: argparse.Namespace, state: Path, remaining: float) -> dict[str, Any]:
    """Lint, then the null candidate; the problem's result line. Raises BudgetCut."""
    scratch = state / "tmp" / entry.slug
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    started = time.monotonic()
    line: dict[str, Any] = {"problem": entry.key, "level": entry.level, "id": entry.number, "name": entry.name}
    try:
        if not args.no_lint:
            line.update(run_lint(entry, args, scratch, state, min(args.lint_timeout + LINT_STARTUP_S, remaining)))
        left = remaining - (time.monotonic() - started)
        if left <= 0:
            raise BudgetCut(entry.key)
        line.update(run_null(entry, args, scratch, state, min(args.timeout, left)))
    except BudgetCut as cut:
        cut.partial = line
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    line["wall_s"] = round(time.monotonic() - started, 2)
    line["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return line


# ---------------------------------------------------------------- a group of problems in one run.py (--batch)


def groups_of(entries: list[Entry], size: int) -> list[list[Entry]]:
    """`entries` in order, in groups of up to `size`, each within one level (file stems repeat across
    levels, and one run takes one level's folder as its problem tree)."""
    groups: list[list[Entry]] = []
    for entry in entries:
        if groups and len(groups[-1]) < size and groups[-1][0].level == entry.level:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


class Claims:
    """A queue of problems shared by the invocations of one sitting (one per GPU, each with its own --state): a
    file of claimed problem keys, one per line. Each group is claimed under an exclusive lock on the file just
    before it runs, so no problem runs twice and a GPU that finishes early takes the next group."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def start(self, done: Iterable[str]) -> None:
        """A fresh queue for a sitting: the problems in `done` (those that already have a line) count as claimed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(f"{key}\n" for key in done), encoding="utf-8")

    def claim(self, pending: list[Entry], size: int) -> list[Entry]:
        """The next group of `pending` (up to `size`, one level) that nobody claimed, claimed now; [] when none is left."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            taken = set(f.read().split())
            left = [entry for entry in pending if entry.key not in taken]
            group = groups_of(left, size)[0] if left else []
            f.write("".join(entry.key + "\n" for entry in group))
            f.flush()
            os.fsync(f.fileno())
        return group


def next_groups(pending: list[Entry], size: int, claims: Optional[Claims]) -> Iterable[list[Entry]]:
    """The groups an invocation runs in turn: `pending` in groups of `size`, or, with a shared queue, each next
    group claimed from it only when it is asked for (after the budget check)."""
    if claims is None:
        yield from groups_of(pending, size)
        return
    while group := claims.claim(pending, size):
        yield group


@dataclasses.dataclass
class GroupDone:
    lines: list[dict[str, Any]]  # one per problem that got a line, in the group's order
    run: Finished
    cut: bool  # the budget (not the group's own limit) stopped the run
    wall_s: float


def run_group(group: list[Entry], args: argparse.Namespace, state: Path, remaining: float) -> GroupDone:
    """The null candidates of `group` (one level) in one `run.py --all`, each problem's result line
    from the run folder's records. A run stopped at its limit gives lines only to the problems with
    a candidate record (a group of one, stopped at its own --timeout, gets its line as run_null
    gives it); one that ended on its own gives every problem a line."""
    level, slug = group[0].level, f"{group[0].slug}_batch{len(group)}"
    scratch, results = state / "tmp" / slug, state / "results"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.rmtree(results / slug, ignore_errors=True)  # a killed invocation's leftovers
    started = time.monotonic()
    own_limit = args.timeout * len(group)
    limit = min(own_limit, remaining)
    lines: list[dict[str, Any]] = []
    try:
        solutions = scratch / "solutions"
        for entry in group:
            write_null(entry, solutions / entry.name / "null.py")
        # --all takes every problem of the level's folder that has candidates: the solutions tree holds
        # only the group's (run.py's --problem does not narrow --all)
        command = [sys.executable, "run.py", "--all", "--problems-dir", str(args.tree / f"level{level}"),
                   "--set", f"solutions_dir={json.dumps(str(solutions))}", "--run-id", slug, "--results", str(results),
                   "--json", "--quiet", "--device", args.device, *harness_sets(args, scratch, state)]
        done = run_bounded(command, limit, problem_env(scratch), scratch, "run")
        cut = done.timed_out and limit < own_limit
        found = read_run_folder_by_problem(results / slug)
        keep_records(args, state, results / slug)
        for entry in group:
            records = found.get(entry.name, {})
            if done.timed_out and records.get("candidate") is None and (len(group) > 1 or cut):
                continue  # no line: it runs again next time
            line: dict[str, Any] = {"problem": entry.key, "level": entry.level, "id": entry.number, "name": entry.name}
            line.update(outcome(records.get("candidate"), records.get("reference"), done))
            lines.append(with_log_tail(line, results / slug, entry))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(results / slug, ignore_errors=True)
    wall = time.monotonic() - started
    share = round(wall / max(len(lines), 1), 2)  # the group's wall, shared evenly by the problems that got a line
    for line in lines:
        line.update(run_wall_s=share, wall_s=share, batch=len(group), batch_wall_s=round(wall, 2),
                    finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return GroupDone(lines, done, cut, wall)


def progress_text(line: dict[str, Any]) -> str:
    return f"{line['problem']}: {line.get('status') or line.get('reason')} {fmt_x(line.get('speedup'))} lint {line.get('lint_verdict', '-')} ({line['wall_s']:.0f} s)"


def run_batches(pending: list[Entry], args: argparse.Namespace, state: Path, results_path: Path, walls: list[float], started: float) -> int:
    """run_all's loop for --batch N > 1: the groups of `pending` in turn, under the budget; the
    number of lines written."""
    ran, groups = 0, iter(next_groups(pending, args.batch, queue_of(args)))
    for number in range(len(pending)):
        elapsed = time.monotonic() - started
        if should_stop(args.budget_s, elapsed, walls):
            print(f"budget: stopping after {elapsed:.0f} s", file=sys.stderr)
            break
        group = next(groups, None)
        if group is None:
            break
        remaining = math.inf if args.budget_s is None else args.budget_s - elapsed
        names = group[0].name if len(group) == 1 else f"{group[0].name} .. {group[-1].name}"
        print(f"level{group[0].level}: a batch of {len(group)} ({names}) ...", file=sys.stderr, flush=True)
        done = run_group(group, args, state, remaining)
        for line in done.lines:
            append_line(results_path, line)
            walls.append(line["wall_s"])
            ran += 1
            print(progress_text(line), file=sys.stderr, flush=True)
        got = {line["problem"] for line in done.lines}
        missing = [entry for entry in group if entry.key not in got]
        if missing and done.cut and number == 0 and len(group) == 1:  # it had the whole budget to itself: it would never fit
            append_line(results_path, {**budget_line(missing[0], args.budget_s, done.wall_s), "batch": 1})
            ran += 1
            print(f"budget: {missing[0].key} alone ran past the budget; recorded as timed out", file=sys.stderr)
        elif missing and done.cut:
            print(f"budget: the batch was cut short; {len(missing)} problem(s) without a record will run again next time", file=sys.stderr)
        elif missing:
            print(f"the batch's run.py ran past its limit ({done.run.limit:.0f} s) before {len(missing)} problem(s) got a record; they run "
                  f"again next time (one that keeps this up: --batch 1 --only {missing[0].key})", file=sys.stderr)
        if done.cut:
            break
    return ran


# ---------------------------------------------------------------- the results file


def merge_states(folders: list[Path], into: Path) -> list[str]:
    """The lines of several states (one per GPU of a sitting; `into` may be among them) as one results file in
    `into`: per problem the line that finished last, in (level, id) order; the problems, in that order."""
    latest: dict[str, dict[str, Any]] = {}
    for folder in folders:
        for line in read_results(folder / "results.jsonl"):
            kept = latest.get(line["problem"])
            if kept is None or str(line.get("finished_at", "")) >= str(kept.get("finished_at", "")):
                latest[line["problem"]] = line
    into.mkdir(parents=True, exist_ok=True)
    ordered = sorted(latest.values(), key=lambda line: (line.get("level", 0), line.get("id", 0), line["problem"]))
    (into / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ordered))
    return [line["problem"] for line in ordered]


def read_results(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, the last one per problem winning; a half-written line is skipped."""
    return list(last_lines(path, "problem").values())


def append_line(path: Path, line: dict[str, Any]) -> None:
    """Append one JSON line, flushed and fsync'ed; a half-written last line (a killed writer) is cut first."""
    if path.is_file():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def lock_state(state: Path) -> Any:
    """Hold STATE/.lock for this invocation (a second one on the same state dir is refused), then
    remove what a killed invocation left in STATE/tmp and STATE/results."""
    state.mkdir(parents=True, exist_ok=True)
    handle = open(state / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"error: another invocation is using {state}") from None
    for leftover in ("tmp", "results"):
        shutil.rmtree(state / leftover, ignore_errors=True)
    return handle


def should_stop(budget: Optional[float], elapsed: float, walls: list[float]) -> bool:
    """With a budget: stop when the elapsed time plus the median problem wall time so far passes it."""
    if budget is None:
        return False
    expected = statistics.median(walls) if walls else 0.0
    return elapsed >= budget or elapsed + expected > budget


def budget_line(entry: Entry, budget: float, wall: float) -> dict[str, Any]:
    return {"problem": entry.key, "level": entry.level, "id": entry.number, "name": entry.name, "exit": None, "timed_out": True, "status": None,
            "reason": f"ran past the invocation's whole budget ({budget:.0f} s); rerun it with a larger --budget-s and --redo --only {entry.key}",
            "wall_s": round(wall, 2), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("terminated")


def queue_of(args: argparse.Namespace) -> Optional[Claims]:
    return Claims(Path(args.queue)) if args.queue else None


def run_singly(pending: list[Entry], args: argparse.Namespace, state: Path, results_path: Path, walls: list[float], started: float) -> int:
    """run_all's loop for --batch 1: the problems of `pending` in turn (lint, then the null candidate),
    under the budget; the number of lines written."""
    ran, groups = 0, iter(next_groups(pending, 1, queue_of(args)))
    for _ in range(len(pending)):
        elapsed = time.monotonic() - started
        if should_stop(args.budget_s, elapsed, walls):
            print(f"budget: stopping after {elapsed:.0f} s", file=sys.stderr)
            break
        claimed = next(groups, None)
        if claimed is None:
            break
        entry = claimed[0]
        remaining = math.inf if args.budget_s is None else args.budget_s - elapsed
        print(f"{entry.key} ...", file=sys.stderr, flush=True)
        try:
            line = run_one(entry, args, state, remaining)
        except BudgetCut as cut:
            if ran == 0:  # it had the whole budget to itself: it would never fit
                append_line(results_path, {**cut.partial, **budget_line(entry, args.budget_s, time.monotonic() - started - elapsed)})
                ran += 1
                print(f"budget: {entry.key} alone ran past the budget; recorded as timed out", file=sys.stderr)
            else:
                print(f"budget: {entry.key} was cut short; it will run again next time", file=sys.stderr)
            break
        append_line(results_path, line)
        walls.append(line["wall_s"])
        ran += 1
        print(progress_text(line), file=sys.stderr, flush=True)
    return ran


def run_all(args: argparse.Namespace) -> int:
    state = Path(args.state).resolve()
    handle = lock_state(state)
    (state / "tree.json").write_text(json.dumps({"tree": str(args.tree), "levels": {str(lv): len(problem_list(args.tree, [lv])) for lv in LEVELS}}))
    todo = select(problem_list(args.tree, args.levels), args.only, args.start, args.count)
    results_path = state / "results.jsonl"
    previous = read_results(results_path)
    done = set() if args.redo else {line["problem"] for line in previous}
    walls = [line["wall_s"] for line in previous if isinstance(line.get("wall_s"), (int, float))]
    started, ran = time.monotonic(), 0
    previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        pending = [e for e in todo if e.key not in done]
        if args.batch > 1:  # no lint: it is one subprocess per problem
            ran = run_batches(pending, args, state, results_path, walls, started)
        else:
            ran = run_singly(pending, args, state, results_path, walls, started)
    except KeyboardInterrupt:
        print(f"interrupted: the {'batch' if args.batch > 1 else 'problem'} in flight gets no line", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        handle.close()
    if args.queue:
        print(f"ran {ran} problem(s) from the queue {args.queue}; results in {results_path}", file=sys.stderr)
        return 0
    left = sum(1 for e in todo if e.key not in done) - ran
    print(f"ran {ran} problem(s); {left} of this part left; results in {results_path}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- the summary


def fmt_x(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.3f}x"


def fmt_interval(line: dict[str, Any]) -> str:
    if line.get("speedup") is None:
        return ""
    inside = f" [{line['low']:.3f}, {line['high']:.3f}]" if line.get("low") is not None and line.get("high") is not None else ""
    return f"{line['speedup']:.3f}x{inside}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def cell(text: Any) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def completed(line: dict[str, Any]) -> bool:
    """A verdict: the run wrote the null candidate's record."""
    return bool(line.get("status"))


def completion_section(lines: list[dict[str, Any]], total: Optional[int]) -> list[str]:
    verdicts = sum(completed(line) for line in lines)
    out = ["## Completion", "", f"- {verdicts} problem(s) with a verdict / {len(lines)} attempted / {total if total is not None else '?'} in the tree"]
    if total:
        out[-1] += f" ({verdicts / total:.1%} of the tree)"
    missing = [line for line in lines if not completed(line)]
    if missing:
        out += ["", "Did not complete:", "", "| problem | exit | timed out | wall s | reason |", "|---|---:|---|---:|---|"]
        out += [f"| {line['problem']} | {'' if line.get('exit') is None else line['exit']} | {'yes' if line.get('timed_out') else ''} | {line.get('wall_s', 0):.0f} | {cell(line.get('reason', ''))} |" for line in missing]
    wrong = [line for line in lines if completed(line) and line["status"] != "correct"]
    if wrong:
        out += ["", "The null candidate is not correct (it is the reference: each is a harness or problem issue):", "",
                "| problem | status | reason | log |", "|---|---|---|---|"]
        out += [f"| {line['problem']} | {line['status']} | {cell(line.get('reason', ''))} | {cell(line.get('log_tail', ''))[:300]} |" for line in wrong]
    return out + [""]


def null_section(lines: list[dict[str, Any]], band: float) -> list[str]:
    timed = [line for line in lines if line.get("speedup") is not None]
    inside = [line for line in timed if abs(line["speedup"] - 1.0) <= band]
    out = ["## Null candidate speedups", "", f"- {len(inside)} of {len(timed)} timed null candidates read 1.00 +/- {band:.2f}x"]
    if timed:
        values = [line["speedup"] for line in timed]
        out.append(f"- median {statistics.median(values):.3f}x, min {min(values):.3f}x, max {max(values):.3f}x")
    outside = sorted((line for line in timed if line not in inside), key=lambda line: abs(math.log(line["speedup"])), reverse=True)
    if outside:
        out += ["", "Outside the band:", "", "| problem | speedup [95% interval] | interval holds 1.00 | protocol | reference ms |", "|---|---|---|---|---:|"]
        for line in outside:
            holds = "yes" if line.get("low") is not None and line["low"] <= 1.0 <= line["high"] else "no"
            out.append(f"| {line['problem']} | {fmt_interval(line)} | {holds} | {cell(line.get('protocol', ''))} | {fmt_ms(line.get('reference_ms'))} |")
    return out + [""]


def fmt_ms(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4g}"


def wall_section(lines: list[dict[str, Any]]) -> list[str]:
    out = ["## Wall time per problem (lint + run, s)", ""]
    batched = [line for line in lines if (line.get("batch") or 1) > 1]
    if batched:
        out += [f"{len(batched)} problem(s) run in batches (--batch, no lint): wall time per problem is the batch's share.", ""]
    out += ["| level | problems | median | p90 | max | total |", "|---|---:|---:|---:|---:|---:|"]
    groups = [(f"level{lv}", [line for line in lines if line.get("level") == lv]) for lv in sorted({line.get("level") for line in lines if line.get("level") is not None})]
    for label, group in groups + [("all", lines)]:
        walls = [line["wall_s"] for line in group if isinstance(line.get("wall_s"), (int, float))]
        if walls:
            out.append(f"| {label} | {len(walls)} | {statistics.median(walls):.0f} | {percentile(walls, 0.9):.0f} | {max(walls):.0f} | {sum(walls):.0f} |")
    slowest = sorted((line for line in lines if isinstance(line.get("wall_s"), (int, float))), key=lambda line: line["wall_s"], reverse=True)[:10]
    if slowest:
        out += ["", "Slowest: " + ", ".join(f"{line['problem']} ({line['wall_s']:.0f} s)" for line in slowest)]
    return out + [""]


def lint_section(lines: list[dict[str, Any]]) -> list[str]:
    linted = [line for line in lines if line.get("lint_verdict")]
    counts = {v: sum(line["lint_verdict"] == v for line in linted) for v in ("pass", "warn", "fail", "timeout", "error")}
    out = ["## Lint", "", f"- {len(linted)} problem(s) linted" + "".join(f", {n} {v}" for v, n in counts.items() if n)]
    degenerate = [line for line in linted if any(line.get("lint_checks", {}).get(c) == "fail" for c in DEGENERATE_CHECKS)]
    out += ["", f"Degenerate (a wrong output would pass: {', '.join(DEGENERATE_CHECKS)}): {len(degenerate)}", ""]
    if degenerate:
        out += ["| problem | verdict | reason | note |", "|---|---|---|---|"]
        for line in degenerate:
            failing = {c for c in DEGENERATE_CHECKS if line["lint_checks"].get(c) == "fail"}
            note = "constant only: a one-element output (a loss) always matches its own mean" if failing == {"constant fails"} else ""
            out.append(f"| {line['problem']} | {line['lint_verdict']} | {cell(line.get('lint_reason', ''))} | {note} |")
    other = [line for line in linted if line not in degenerate and line["lint_verdict"] in ("fail", "timeout", "error")]
    if other:
        out += ["", "Other lint failures:", "", "| problem | verdict | reason |", "|---|---|---|"]
        out += [f"| {line['problem']} | {line['lint_verdict']} | {cell(line.get('lint_reason', ''))} |" for line in other]
    warned: dict[str, int] = {}
    for line in linted:
        for check, verdict in line.get("lint_checks", {}).items():
            if verdict == "warn":
                warned[check] = warned.get(check, 0) + 1
    if warned:
        out += ["", "Warnings by check: " + ", ".join(f"{c} {n}" for c, n in sorted(warned.items()))]
    return out + [""]


def our_reference_ms(line: dict[str, Any]) -> Optional[float]:
    """The eager reference's median: from the rounds paired with the null candidate, else with the compile baseline."""
    return line.get("reference_ms") or line.get("reference_eager_ms")


def baseline_section(lines: list[dict[str, Any]], theirs: dict[str, float], largest: int = 15) -> list[str]:
    rows = []
    for line in lines:
        ours, key = our_reference_ms(line), f"level{line.get('level')}/{line.get('name')}"
        if ours and theirs.get(key):
            rows.append((ours / theirs[key], line, ours, theirs[key]))
    out = ["## Eager reference time against KernelBench's baseline", "",
           "Ours: the median of the eager reference over the rounds paired with the null candidate (L2 flushed, launch overhead "
           "subtracted; CUDA graphs where the protocol says graph). KernelBench's: the mean of its trials (no flush, eager).", "",
           f"- {len(rows)} problem(s) in both; ratio = ours / KernelBench's"]
    if not rows:
        return out + [""]
    ratios = [r[0] for r in rows]
    out.append(f"- median ratio {statistics.median(ratios):.3f}, geomean {math.exp(statistics.fmean(math.log(r) for r in ratios)):.3f}; "
               f"{sum(0.9 <= r <= 1.1 for r in ratios)} within 10%, {sum(r < 0.5 or r > 2 for r in ratios)} off by more than 2x")
    head = "| problem | ours ms | KernelBench ms | ratio | our protocol |"
    biggest = sorted(rows, key=lambda r: abs(math.log(r[0])), reverse=True)[:largest]
    out += ["", f"Largest differences ({len(biggest)}):", "", head, "|---|---:|---:|---:|---|"]
    out += [f"| {r[1]['problem']} | {fmt_ms(r[2])} | {fmt_ms(r[3])} | {r[0]:.3f} | {cell(r[1].get('protocol') or r[1].get('reference_mode') or '')} |" for r in biggest]
    out += ["", "All, by ratio:", "", head, "|---|---:|---:|---:|---|"]
    out += [f"| {r[1]['problem']} | {fmt_ms(r[2])} | {fmt_ms(r[3])} | {r[0]:.3f} | {cell(r[1].get('protocol') or r[1].get('reference_mode') or '')} |" for r in sorted(rows, key=lambda r: r[0])]
    return out + [""]


def compile_section(lines: list[dict[str, Any]]) -> list[str]:
    compiled = [line for line in lines if line.get("compile")]
    ok = [line for line in compiled if line["compile"].get("speedup") is not None]
    out = ["## torch.compile baseline", "", f"- {len(ok)} of {len(compiled)} problem(s) with a compile baseline got a paired speedup over eager"]
    if ok:
        values = [line["compile"]["speedup"] for line in ok]
        out.append(f"- median {statistics.median(values):.3f}x; faster than eager on {sum(v > 1 for v in values)}")
    failed = [line for line in compiled if not line["compile"].get("ok")]
    if failed:
        out += ["", "Failed: " + "; ".join(f"{line['problem']}: {cell(line['compile'].get('reason', ''))[:160]}" for line in failed)]
    return out + [""]


def summarize(lines: list[dict[str, Any]], total: Optional[int] = None, kernelbench: Optional[dict[str, float]] = None, band: float = 0.02) -> str:
    """The markdown report over result lines (one per problem). `total`: problems in the tree;
    `kernelbench`: KernelBench's eager baseline, "level<L>/<name>" -> ms."""
    lines = sorted(lines, key=lambda line: (line.get("level") or 0, line.get("id") or 0, line.get("problem", "")))
    devices = sorted({line["device_name"] for line in lines if line.get("device_name")})
    out = ["# KernelBench levels 1-3: null candidates through the harness", "", f"Devices: {', '.join(devices) or 'unknown'}.", ""]
    out += completion_section(lines, total) + null_section(lines, band) + wall_section(lines) + lint_section(lines) + compile_section(lines)
    if kernelbench is not None:
        out += baseline_section(lines, kernelbench)
    return "\n".join(out)


def load_kernelbench_baseline(source: Path) -> dict[str, float]:
    """KernelBench's baseline_time_torch.json ({"level1": {"<file>.py": {"mean": ms, ...}}}), from the
    file itself or from a KernelBench git directory / checkout; "level<L>/<name>" -> mean ms."""
    data = json.loads(_read_source(source, KERNELBENCH_BASELINE) if source.is_dir() else source.read_bytes())
    return {f"{level}/{name.removesuffix('.py')}": float(v["mean"]) for level, files in data.items() for name, v in files.items() if isinstance(v, dict) and "mean" in v}


def tree_total(args: argparse.Namespace, state: Path) -> Optional[int]:
    if args.tree is not None and args.tree.is_dir():
        return len(problem_list(args.tree, args.levels))
    meta = state / "tree.json"
    if meta.is_file():
        return sum(n for lv, n in json.loads(meta.read_text())["levels"].items() if int(lv) in args.levels)
    return None


def write_summary(args: argparse.Namespace) -> int:
    state = Path(args.state)
    lines = [line for line in read_results(state / "results.jsonl") if line.get("level") in args.levels]
    baseline = load_kernelbench_baseline(Path(args.kernelbench_baseline)) if args.kernelbench_baseline else None
    text = summarize(lines, tree_total(args, state), baseline, args.null_band)
    Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
    Path(args.summary).write_text(text + "\n")
    print(f"wrote {args.summary} ({len(lines)} problem(s))", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- command line


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="KernelBench's problem folder (holding level1/ level2/ level3/)")
    parser.add_argument("--fetch-from", metavar="GIT_DIR", help="first write levels 1-3 into --tree from a KernelBench git dir or checkout")
    parser.add_argument("--state", metavar="DIR", help="results.jsonl and the per-problem scratch go here")
    parser.add_argument("--levels", type=int, nargs="+", choices=LEVELS, default=list(LEVELS))
    parser.add_argument("--only", nargs="+", default=[], metavar="PROBLEM", help="e.g. level1/19_ReLU (or level1/19)")
    parser.add_argument("--start", type=int, default=0, help="index into the ordered list (after --levels and --only)")
    parser.add_argument("--count", type=int, help="how many problems from --start")
    parser.add_argument("--budget-s", type=float, help="stop before a problem that would not fit in this many seconds")
    parser.add_argument("--timeout", type=float, default=600.0, help="wall-clock seconds per problem's run.py (default 600)")
    parser.add_argument("--lint-timeout", type=float, default=300.0, help="the lint's limit per problem (lint.timeout_s; default 300)")
    parser.add_argument("--no-lint", action="store_true")
    parser.add_argument("--batch", type=int, default=1, metavar="N",
                        help="run up to N problems of one level in one run.py (default 1: one run.py per problem); "
                             "N > 1 skips the lint, as --no-lint does (the lint is one subprocess per problem)")
    parser.add_argument("--redo", action="store_true", help="run problems that already have a line again")
    parser.add_argument("--queue", metavar="FILE",
                        help="a problem queue shared with other invocations of this sitting (one per GPU, each its own "
                             "--state): each group is claimed in FILE before it runs (benchmarks/kernelbench_gpus.sh)")
    parser.add_argument("--keep-records", action="store_true", help="keep each run's records.jsonl in STATE/records/")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed on to run.py and run.py lint")
    parser.add_argument("--merge-from", nargs="+", default=[], metavar="DIR",
                        help="first write STATE/results.jsonl from these states' lines (per problem the one that finished last)")
    parser.add_argument("--summary", metavar="OUT.md", help="write the report from STATE/results.jsonl (runs nothing)")
    parser.add_argument("--kernelbench-baseline", metavar="FILE", help="KernelBench's baseline_time_torch.json (or a KernelBench git dir)")
    parser.add_argument("--null-band", type=float, default=0.02, help="a null speedup within 1 +/- this counts as 1.00x (default 0.02)")
    args = parser.parse_args(argv)
    if args.tree is not None:
        args.tree = args.tree.resolve()
    if not args.state and not (args.fetch_from and args.tree):
        parser.error("give --state (to run or, with --summary, to report), or --tree with --fetch-from")
    if args.state and not args.summary and not args.merge_from and args.tree is None:
        parser.error("running needs --tree")
    if args.batch < 1:
        parser.error("--batch: give a group size of 1 or more")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.fetch_from:
        written = fetch_tree(Path(args.fetch_from), args.tree)
        print(f"wrote {written} KernelBench file(s) into {args.tree} (files already there kept)", file=sys.stderr)
    if args.merge_from:
        merged = merge_states([Path(d) for d in args.merge_from], Path(args.state))
        print(f"merged {len(merged)} problem(s) from {len(args.merge_from)} state(s) into {args.state}/results.jsonl", file=sys.stderr)
        if args.queue:  # a sitting's fresh queue: what has a line counts as claimed
            Claims(Path(args.queue)).start(merged)
        if not args.summary:
            return 0
    if args.summary:
        return write_summary(args)
    if not args.state:
        return 0
    if not args.tree.is_dir():
        raise SystemExit(f"error: --tree {args.tree}: not a folder (fill it with --fetch-from)")
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
