"""The GPU smoke's candidates, what each must get, and its table (benchmarks/gpu_smoke.sh runs it on a GPU machine).

    python3 benchmarks/gpu_smoke.py stage DEST
        copies each candidate below into DEST/<problem>/<name>.py (a solutions folder) and prints the problem
        files to run, one a line; a candidate whose file does not exist is left out and named on stderr
    python3 benchmarks/gpu_smoke.py table --records LAYER=FILE ... [--exit LAYER=CODE ...] [--out DIR]
        reads each pass's records.jsonl (one pass per sandbox.layer), prints the table last, writes
        DIR/smoke.md and DIR/smoke.json, and exits 1 on any miss

One row per candidate and pass, and one per problem and pass for the null candidate (the problem's own Model timed
through the candidate path, timing.null_candidate; its ratio is the reference record's timing.null_floor). A miss:
  - a candidate that compiles a CUDA extension (at import or in its constructor) whose lane did not find every build
    finished (provenance.builds all `cached`), or whose build ahead failed, timed out or was skipped;
  - memcheck not `clean` on an honest candidate, or not finding the out-of-bounds writer;
  - a `harness error` (a candidate's or the null candidate's), or a reference that failed;
  - a status or flag other than the one expected (CANDIDATES), a candidate file missing, a record missing;
  - the null candidate outside 1.00 +/- NULL_TOLERANCE on a GPU-bound problem (elsewhere only a warning);
  - a run.py exit code other than 0 or 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.core.schema import upgrade  # noqa: E402

LINEAR = "linear_relu_256x1024"  # the candidates' problem
GPU_BOUND_PROBLEM = "37_Matmul_Swish_Sum_GroupNorm"  # 8.5 ms per call on an H100: its null floor must read 1.00x
# two kernels of a few us, timed as CUDA graphs: its null floor is reported, and only warned about
LAUNCH_BOUND_PROBLEM = LINEAR

# Each problem the smoke runs, by name (the solutions folder's name), with its file; in run order: the
# GPU-bound null candidate first, while the build pool compiles the CUDA candidates of the last problem.
SCALE = "1_Scale_Bias_ReLU"  # the lazy output's and the sticky error's problem (tiny, level 0)
PROBLEMS: dict[str, str] = {
    GPU_BOUND_PROBLEM: f"problems/level2/{GPU_BOUND_PROBLEM}.py",
    SCALE: f"problems/level0/{SCALE}.py",
    LINEAR: f"benchmarks/problems/{LINEAR}.py",
}
GPU_BOUND = frozenset({GPU_BOUND_PROBLEM})  # where a null floor off 1.00 is a miss
NULL_PROBLEMS = (GPU_BOUND_PROBLEM, LAUNCH_BOUND_PROBLEM)  # where a null row must exist
NULL_TOLERANCE = 0.02
NULL_NAME = "null candidate"
LAYERS = ("auto", "off")  # sandbox.layer of each pass, in run order
OK_EXIT_CODES = (0, 2)  # run.py: every candidate correct, or some candidate failed (as several here must)
HARNESS_ERROR = "harness error"
REFERENCE_FAILED = "reference failed"
AHEAD_WRONG = ("failed", "timeout", "skipped")  # provenance.ahead.outcome of a build ahead that did not finish


@dataclasses.dataclass(frozen=True)
class Smoke:
    """One candidate of the smoke and what it must get."""

    problem: str
    name: str
    source: str  # its file, from the repository root
    expect: str  # as the cheat catalog writes it: `status`, `status + flag`, alternatives joined by ` or `
    memcheck: str = ""  # the memcheck outcome it must get: clean | errors; "" = not checked
    builds: bool = False  # compiles a CUDA extension (import or constructor): its lane must find it built ahead
    strict_flags: bool = True  # a grey flag beyond the expected ones is a miss (else a warning)


SMOKE = "benchmarks/smoke"  # the smoke's own candidates
CHEATS = "benchmarks/cheats"  # the cheat catalog's, honest controls included
CANDIDATES: tuple[Smoke, ...] = (
    Smoke(
        LINEAR,
        "honest_fused_bias_relu",
        f"{CHEATS}/{LINEAR}/honest_fused_bias_relu.py",
        "correct",
        "clean",
        builds=True,
    ),
    Smoke(LINEAR, "honest_ctor_build", f"{SMOKE}/{LINEAR}/honest_ctor_build.py", "correct", "clean", builds=True),
    Smoke(LINEAR, "honest_triton_epilogue", f"{SMOKE}/{LINEAR}/honest_triton_epilogue.py", "correct", "clean"),
    Smoke(LINEAR, "oob_writer", f"{CHEATS}/{LINEAR}/oob_writer.py", "unsafe memory + unsafe-memory", "errors", True),
    Smoke(SCALE, "lazy_output", f"{CHEATS}/{SCALE}/lazy_output.py", "incorrect + lazy-output"),
    Smoke(
        SCALE,
        "unchecked_invalid_launch",
        f"tests/data/candidates/{SCALE}/unchecked_invalid_launch.py",
        "CUDA fault or runtime error",
        builds=True,
        strict_flags=False,
    ),
    # the GPU-bound problem's candidate (run.py runs a problem that has one): no kernel of its own, seen by the profile
    Smoke(
        GPU_BOUND_PROBLEM,
        "torch_only",
        f"{SMOKE}/{GPU_BOUND_PROBLEM}/torch_only.py",
        "no custom kernel + no-custom-kernel",
    ),
)


@dataclasses.dataclass
class Row:
    problem: str
    candidate: str
    layer: str
    # yes | no | n/a, with provenance.ahead.outcome in brackets where the record has it (and "header" where its build
    # was given the precompiled torch/extension.h)
    built_ahead: str = "n/a"
    memcheck: str = "-"  # tool:outcome of each sanitizer run
    status: str = ""
    flags: str = ""  # codes, a failing one marked !
    null_ratio: Optional[float] = None  # the null candidate's paired speedup
    null_interval: str = ""
    expect: str = ""
    misses: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "MISS" if self.misses else "warn" if self.warnings else "ok"


def options(expect: str) -> list[tuple[str, frozenset[str]]]:
    """The verdicts an Expect line allows: (status, flag codes the record must carry) each."""
    found = []
    for option in expect.split(" or "):
        status, _, codes = option.partition(" + ")
        found.append((status.strip(), frozenset(c.strip() for c in codes.split("+") if c.strip())))
    return found


def read_records(path: Path) -> list[dict[str, Any]]:
    """A records.jsonl's lines in today's layout; a half-written last line (a killed run) is left out."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(upgrade(json.loads(line)))
        except ValueError:
            continue
    return records


def _flags(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(code, policy) of each flag the record carries."""
    found = []
    for flag in (record.get("integrity") or {}).get("flags") or []:
        if isinstance(flag, dict):
            found.append((str(flag.get("code", "")), str(flag.get("policy", ""))))
        else:
            found.append((str(flag), ""))
    return found


def _sanitizer(record: dict[str, Any]) -> list[dict[str, Any]]:
    runs = (record.get("integrity") or {}).get("sanitizer")
    if runs is None:
        runs = (record.get("checks") or {}).get("sanitizer")
    return [r for r in runs or [] if isinstance(r, dict)]


def _ahead(record: dict[str, Any]) -> dict[str, Any]:
    """The record's provenance.ahead ({} where it has none)."""
    ahead = (record.get("provenance") or {}).get("ahead")
    return ahead if isinstance(ahead, dict) else {}


def built_ahead(record: dict[str, Any]) -> tuple[str, Optional[str]]:
    """(yes | no | n/a, provenance.ahead.outcome or None where the record has no such key). yes: every build the
    candidate made was found finished by its lane (`cached`); n/a: it built nothing."""
    provenance = record.get("provenance") or {}
    builds = [b for b in provenance.get("builds") or [] if isinstance(b, dict)]
    state = "n/a" if not builds else "yes" if all(b.get("cached") is True for b in builds) else "no"
    ahead = provenance.get("ahead")
    outcome = str(ahead.get("outcome", "")) if isinstance(ahead, dict) else None
    return state, outcome


def candidate_row(smoke: Smoke, layer: str, record: Optional[dict[str, Any]], missing: bool) -> Row:
    row = Row(
        smoke.problem, smoke.name, layer, expect=smoke.expect + (f"; memcheck {smoke.memcheck}" * bool(smoke.memcheck))
    )
    if missing:
        row.status = "missing"
        row.misses.append(f"{smoke.source} does not exist")
        return row
    if record is None:
        row.status = "no record"
        row.misses.append("the run wrote no record for it")
        return row
    status = str((record.get("decision") or {}).get("status", ""))
    flags = _flags(record)
    codes = {code for code, _ in flags}
    row.status = status
    row.flags = ",".join(code + ("!" if policy == "fail" else "") for code, policy in flags)
    state, outcome = built_ahead(record)
    header = bool(_ahead(record).get("header"))  # its build was given the precompiled header
    row.built_ahead = state if outcome is None else f"{state} ({outcome or '-'}{', header' if header else ''})"
    runs = _sanitizer(record)
    row.memcheck = ",".join(f"{r.get('tool', '?')}:{r.get('outcome', '?')}" for r in runs) or "-"
    reason = str((record.get("decision") or {}).get("reason", ""))[:160]
    if status == HARNESS_ERROR:
        row.misses.append(f"harness error: {reason}")
    matched = next((o for o in options(smoke.expect) if o[0] == status and o[1] <= codes), None)
    if matched is None:
        got = status + (f" + {row.flags}" if row.flags else "")
        if status != HARNESS_ERROR:
            row.misses.append(f"expected {smoke.expect}, got {got}: {reason}")
    else:
        extra = [(code, policy) for code, policy in flags if code not in matched[1]]
        failing = [code for code, policy in extra if policy == "fail"]
        grey = [code for code, policy in extra if policy != "fail"]
        if failing:
            row.misses.append(f"failing flags beyond the expected: {', '.join(failing)}")
        if grey:
            (row.misses if smoke.strict_flags else row.warnings).append(f"flags beyond the expected: {', '.join(grey)}")
    if state == "no":
        row.misses.append("not built ahead: its lane compiled an extension the build pool had not finished")
    elif smoke.builds and state == "n/a":
        row.misses.append("not built ahead: its record has no extension build at all")
    if outcome in AHEAD_WRONG and (smoke.builds or state != "n/a"):
        detail = str(_ahead(record).get("detail", ""))[:160]
        row.misses.append(f"build ahead {outcome}: {detail}")
    if smoke.memcheck:
        memcheck = next((r for r in runs if r.get("tool") == "memcheck"), None)
        if memcheck is None:
            row.misses.append(f"memcheck did not run (expected {smoke.memcheck})")
        elif memcheck.get("outcome") != smoke.memcheck:
            detail = str(memcheck.get("detail", ""))[:160]
            what = "did not find the out-of-bounds write" if smoke.memcheck == "errors" else "is not clean"
            row.misses.append(f"memcheck {what}: {memcheck.get('outcome')}: {detail}")
    return row


def null_row(problem: str, layer: str, reference: Optional[dict[str, Any]]) -> Optional[Row]:
    """The null candidate's row for `problem` in one pass; None where there is nothing to report (no reference
    record, or no null floor, on a problem outside NULL_PROBLEMS)."""
    gpu_bound = problem in GPU_BOUND
    expect = f"correct, 1.00 +/- {NULL_TOLERANCE:.2f}" if gpu_bound else "correct (ratio only warned about)"
    row = Row(problem, NULL_NAME, layer, built_ahead="", expect=expect)
    required = problem in NULL_PROBLEMS
    if reference is None:
        if not required:
            return None
        row.status = "no record"
        row.misses.append("the run wrote no reference record for the problem")
        return row
    outcome = reference.get("outcome") or {}
    if not outcome.get("ok", False):
        row.status = REFERENCE_FAILED
        row.misses.append(f"the reference failed: {str(outcome.get('reason', ''))[:160]}")
        return row
    floor = (reference.get("timing") or {}).get("null_floor")
    if not isinstance(floor, dict):
        if not required:
            return None
        row.status = "not run"
        row.misses.append("the reference record has no null floor (timing.null_candidate did not run)")
        return row
    row.status = str(floor.get("status", ""))
    paired = floor.get("paired")
    if isinstance(paired, dict) and paired.get("speedup") is not None:
        row.null_ratio = float(paired["speedup"])
        if paired.get("low") is not None and paired.get("high") is not None:
            row.null_interval = f"[{float(paired['low']):.3f}, {float(paired['high']):.3f}]"
    if row.status != "correct":
        row.misses.append(f"the null candidate failed: {row.status}: {str(floor.get('reason', ''))[:160]}")
        return row
    where = "a GPU-bound problem" if gpu_bound else "a launch-bound problem"
    if row.null_ratio is None:
        (row.misses if gpu_bound else row.warnings).append(f"the null candidate was not timed on {where}")
    elif abs(row.null_ratio - 1.0) > NULL_TOLERANCE + 1e-9:
        (row.misses if gpu_bound else row.warnings).append(
            f"null floor {row.null_ratio:.3f}x outside 1.00 +/- {NULL_TOLERANCE:.2f} on {where}"
        )
    return row


def build_rows(
    passes: dict[str, list[dict[str, Any]]],
    missing: Iterable[tuple[str, str]] = (),
    candidates: Iterable[Smoke] = CANDIDATES,
    problems: Iterable[str] = PROBLEMS,
) -> list[Row]:
    """The table: each candidate's row, then each problem's null row, per pass (`passes`: layer -> its records,
    upgraded). `missing`: (problem, candidate) whose file did not exist."""
    gone = set(missing)
    wanted, order = list(candidates), list(problems)
    rows: list[Row] = []
    for layer, records in passes.items():
        found: dict[tuple[str, str], dict[str, Any]] = {}
        references: dict[str, dict[str, Any]] = {}
        for record in records:
            if record.get("kind") == "candidate":
                identity = record.get("identity") or {}
                found[(str(identity.get("problem")), str(identity.get("candidate")))] = record
            elif record.get("kind") == "reference":
                problem = str((record.get("identity") or {}).get("problem"))
                if problem not in references or not (record.get("outcome") or {}).get("ok", False):
                    references[problem] = record  # several lanes: a failed one stands for the problem
        for smoke in wanted:
            key = (smoke.problem, smoke.name)
            rows.append(candidate_row(smoke, layer, found.get(key), key in gone))
        for problem in order:
            row = null_row(problem, layer, references.get(problem))
            if row is not None:
                rows.append(row)
    return rows


def exit_code_misses(codes: dict[str, int]) -> list[str]:
    return [
        f"{layer}: run.py exit code {code} ({'ran past its time limit' if code in (124, 137) else 'not 0 or 2'})"
        for layer, code in codes.items()
        if code not in OK_EXIT_CODES
    ]


COLUMNS = (
    ("problem", "problem"),
    ("candidate", "candidate"),
    ("layer", "layer"),
    ("built ahead", "built_ahead"),
    ("memcheck", "memcheck"),
    ("status", "status"),
    ("flags", "flags"),
    ("null", "null"),
    ("expected", "expect"),
    ("verdict", "verdict"),
)


def cells(row: Row) -> list[str]:
    null = f"{row.null_ratio:.3f}x {row.null_interval}".strip() if row.null_ratio is not None else ""
    values = {**dataclasses.asdict(row), "null": null, "verdict": row.verdict}
    return [str(values[key]) for _, key in COLUMNS]


def text_table(rows: list[Row]) -> str:
    table = [[title for title, _ in COLUMNS]] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table)


def markdown_table(rows: list[Row]) -> str:
    def escape(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(t for t, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(escape(c) for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def notes(rows: list[Row], codes: dict[str, int]) -> tuple[list[str], list[str]]:
    """(misses, warnings), one line each."""
    misses = exit_code_misses(codes)
    warnings = []
    for row in rows:
        where = f"{row.layer}: {row.problem}/{row.candidate}"
        misses += [f"{where}: {m}" for m in row.misses]
        warnings += [f"{where}: {w}" for w in row.warnings]
    return misses, warnings


def report(rows: list[Row], codes: dict[str, int], out: Optional[Path]) -> int:
    """Print the notes, then the table last; write smoke.md and smoke.json under `out`; 1 on any miss."""
    misses, warnings = notes(rows, codes)
    print("run.py exit codes: " + (", ".join(f"{layer} {code}" for layer, code in codes.items()) or "none"))
    for line in warnings:
        print(f"warning: {line}")
    for line in misses:
        print(f"MISS: {line}")
    print(f"gpu smoke: {len(misses)} miss(es), {len(warnings)} warning(s), {len(rows)} rows")
    print(text_table(rows))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        md = [
            "# GPU smoke",
            "",
            "run.py exit codes: " + (", ".join(f"{layer} {code}" for layer, code in codes.items()) or "none"),
            "",
            markdown_table(rows),
            "",
        ]
        md += [f"- MISS: {line}" for line in misses] + [f"- warning: {line}" for line in warnings]
        (out / "smoke.md").write_text("\n".join(md) + "\n")
        data = {
            "exit_codes": codes,
            "misses": misses,
            "warnings": warnings,
            "rows": [{**dataclasses.asdict(r), "verdict": r.verdict} for r in rows],
        }
        (out / "smoke.json").write_text(json.dumps(data, indent=1) + "\n")
    return 1 if misses else 0


def stage(dest: Path) -> int:
    """Copy the candidates into `dest` (a solutions folder); print the problem files that have one."""
    staged = set()
    for smoke in CANDIDATES:
        source = ROOT / smoke.source
        if not source.is_file():
            print(f"gpu smoke: missing {smoke.source} ({smoke.problem}/{smoke.name})", file=sys.stderr)
            continue
        folder = dest / smoke.problem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / f"{smoke.name}.py")
        staged.add(smoke.problem)
    for problem, path in PROBLEMS.items():
        if problem in staged:
            print(ROOT / path)
    return 0


def _pairs(values: list[str], what: str) -> dict[str, str]:
    found = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep:
            raise SystemExit(f"{what} {value!r}: expected LAYER=VALUE")
        found[key] = rest
    return found


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    staging = commands.add_parser("stage", help="copy the candidates into a solutions folder")
    staging.add_argument("dest", type=Path)
    table = commands.add_parser("table", help="the rows, the misses and the table from each pass's records")
    table.add_argument("--records", action="append", default=[], metavar="LAYER=FILE")
    table.add_argument("--exit", action="append", default=[], metavar="LAYER=CODE")
    table.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "stage":
        return stage(args.dest)
    passes = {layer: read_records(Path(path)) for layer, path in _pairs(args.records, "--records").items()}
    codes = {layer: int(code) for layer, code in _pairs(args.exit, "--exit").items()}
    missing = [(s.problem, s.name) for s in CANDIDATES if not (ROOT / s.source).is_file()]
    return report(build_rows(passes, missing), codes, args.out)


if __name__ == "__main__":
    sys.exit(main())
