"""benchmarks/gpu_smoke.py without a GPU: from records written as the harness writes them (fabricated), the rows
it builds and the misses it calls (memcheck, builds ahead, harness errors, statuses and flags, the null floor)."""

import importlib.util
import json
import sys
from pathlib import Path

from harness.core.records import (
    ExtensionBuild,
    Flag,
    NullFloor,
    PairedSpeedup,
    SanitizerResult,
    TimingStats,
)
from harness.core.schema import encode_line
from harness.core.status import Status
from tests.records import candidate_record, reference_record

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "benchmarks" / "gpu_smoke.py")
smoke = importlib.util.module_from_spec(_spec)
sys.modules["gpu_smoke"] = smoke
_spec.loader.exec_module(smoke)

LINEAR, GPU_BOUND, LAUNCH_BOUND = smoke.LINEAR, smoke.GPU_BOUND_PROBLEM, smoke.LAUNCH_BOUND_PROBLEM
HONEST = smoke.Smoke(LINEAR, "honest", "honest.py", "correct", "clean", builds=True)
TRITON = smoke.Smoke(LINEAR, "triton", "triton.py", "correct", "clean")
OOB = smoke.Smoke(LINEAR, "oob", "oob.py", "unsafe memory + unsafe-memory", "errors", builds=True)
STICKY = smoke.Smoke(LINEAR, "sticky", "sticky.py", "CUDA fault or runtime error", strict_flags=False)
CANDIDATES = (HONEST, TRITON, OOB, STICKY)


def line(record) -> dict:
    """A record as a records.jsonl line reads back."""
    return json.loads(encode_line(record))


def candidate(name, status=Status.CORRECT, memcheck="clean", cached=(True,), flags=(), reason="ok"):
    record = candidate_record(
        problem=LINEAR,
        candidate=name,
        device="cuda",
        status=status,
        reason=reason,
        flags=tuple(Flag(code, policy, "evidence") for code, policy in flags),
        sanitizer=(SanitizerResult("memcheck", memcheck, "0 errors"),) if memcheck else (),
        builds=tuple(ExtensionBuild(f"ext{i}", f"k{i}", c, 0.1) for i, c in enumerate(cached)),
    )
    return line(record)


def paired(speedup):
    reference = TimingStats(samples_ms=(8.5, 8.6), timer="cuda_events", warmup_calls=1, stopped_by="budget")
    return PairedSpeedup(speedup, speedup - 0.005, speedup + 0.005, 4, "eager, stream sync", (speedup,) * 4, reference)


def reference(problem, speedup=1.0, status="correct", ok=True):
    floor = NullFloor(status, "matched 8 calls", paired(speedup) if status == "correct" else None)
    record = reference_record(
        problem=problem, device="cuda", ok=ok, reason="ok" if ok else "it broke", null_floor=floor
    )
    return line(record)


def healthy(**replace) -> list[dict]:
    """One pass's records where everything is as expected; `replace`: a candidate's name -> its record instead."""
    records = {
        "honest": candidate("honest"),
        "triton": candidate("triton", cached=()),
        "oob": candidate(
            "oob", Status.UNSAFE_MEMORY, memcheck="errors", flags=[("unsafe-memory", "fail")], reason="memcheck"
        ),
        "sticky": candidate("sticky", Status.CUDA_FAULT, memcheck="", cached=(True,)),
    }
    records.update(replace)
    return [*records.values(), reference(GPU_BOUND), reference(LAUNCH_BOUND)]


def rows(records, missing=()):
    return smoke.build_rows({"auto": records}, missing, CANDIDATES, smoke.PROBLEMS)


def row(rows_, name, problem=LINEAR):
    return next(r for r in rows_ if r.candidate == name and r.problem == problem)


def test_a_healthy_pass_has_no_miss_and_its_rows_say_what_ran():
    found = rows(healthy())
    assert [r.misses for r in found] == [[] for _ in found]
    assert [(r.candidate, r.verdict) for r in found] == [
        ("honest", "ok"),
        ("triton", "ok"),
        ("oob", "ok"),
        ("sticky", "ok"),
        (smoke.NULL_NAME, "ok"),
        (smoke.NULL_NAME, "ok"),
    ]
    honest = row(found, "honest")
    assert (honest.built_ahead.split()[0], honest.memcheck, honest.status) == ("yes", "memcheck:clean", "correct")
    assert row(found, "triton").built_ahead.split()[0] == "n/a"
    assert row(found, "oob").flags == "unsafe-memory!"
    assert row(found, smoke.NULL_NAME, GPU_BOUND).null_ratio == 1.0
    assert smoke.notes(found, {"auto": 2}) == ([], [])


def test_memcheck_not_clean_on_an_honest_candidate_is_a_miss():
    found = row(rows(healthy(honest=candidate("honest", memcheck="failed"))), "honest")
    assert found.verdict == "MISS" and any("memcheck is not clean" in m for m in found.misses)
    found = row(rows(healthy(honest=candidate("honest", memcheck=""))), "honest")
    assert any("memcheck did not run" in m for m in found.misses)


def test_memcheck_must_find_the_out_of_bounds_writer():
    found = row(rows(healthy(oob=candidate("oob", Status.CORRECT, memcheck="clean"))), "oob")
    assert any("did not find the out-of-bounds write" in m for m in found.misses)
    assert any("expected unsafe memory + unsafe-memory, got correct" in m for m in found.misses)


def test_a_harness_error_is_a_miss_whoever_gets_it():
    found = row(rows(healthy(sticky=candidate("sticky", Status.HARNESS_ERROR, memcheck="", reason="a bug"))), "sticky")
    assert found.misses == ["harness error: a bug"]
    records = [r for r in healthy() if r.get("kind") == "candidate"] + [
        reference(GPU_BOUND, status="harness error"),
        reference(LAUNCH_BOUND),
    ]
    null = row(rows(records), smoke.NULL_NAME, GPU_BOUND)
    assert null.status == "harness error" and null.verdict == "MISS"


def test_the_null_floor_on_the_gpu_bound_problem_must_read_one_within_two_percent():
    def null(speedup, problem=GPU_BOUND):
        records = [r for r in healthy() if r.get("kind") == "candidate"]
        records += [reference(GPU_BOUND, speedup if problem == GPU_BOUND else 1.0)]
        records += [reference(LAUNCH_BOUND, speedup if problem == LAUNCH_BOUND else 1.0)]
        return row(rows(records), smoke.NULL_NAME, problem)

    assert null(1.05).verdict == "MISS" and "outside 1.00 +/- 0.02" in null(1.05).misses[0]
    assert null(0.97).verdict == "MISS"
    assert null(1.01).verdict == "ok" and null(1.01).null_ratio == 1.01
    launch = null(1.05, LAUNCH_BOUND)  # launch-bound: reported, only warned about
    assert (launch.verdict, launch.misses, launch.null_ratio) == ("warn", [], 1.05)
    assert "launch-bound" in launch.warnings[0]


def test_a_missing_null_floor_or_reference_is_a_miss():
    candidates = [r for r in healthy() if r.get("kind") == "candidate"]
    found = rows(candidates + [reference(GPU_BOUND)])
    assert row(found, smoke.NULL_NAME, LAUNCH_BOUND).status == "no record"
    failed = rows(candidates + [reference(GPU_BOUND, ok=False), reference(LAUNCH_BOUND)])
    assert row(failed, smoke.NULL_NAME, GPU_BOUND).status == "reference failed"


def test_a_cuda_candidate_its_lane_had_to_build_is_a_miss():
    found = row(rows(healthy(honest=candidate("honest", cached=(True, False)))), "honest")
    assert found.built_ahead.split()[0] == "no" and any("not built ahead" in m for m in found.misses)
    found = row(rows(healthy(honest=candidate("honest", cached=()))), "honest")
    assert any("no extension build" in m for m in found.misses)


def test_the_build_pools_outcome_is_shown_and_a_failed_build_ahead_is_a_miss():
    record = candidate("honest")
    record["provenance"]["ahead"] = {"outcome": "built", "detail": "ok", "seconds": 40.0}
    assert row(rows(healthy(honest=record)), "honest").built_ahead == "yes (built)"
    record["provenance"]["ahead"] = {"outcome": "built", "detail": "ok", "seconds": 40.0, "header": True}
    assert row(rows(healthy(honest=record)), "honest").built_ahead == "yes (built, header)"
    record["provenance"]["ahead"] = {"outcome": "timeout", "detail": "timeout after 900 s", "seconds": 900.0}
    found = row(rows(healthy(honest=record)), "honest")
    assert found.built_ahead == "yes (timeout)" and any("build ahead timeout" in m for m in found.misses)
    del record["provenance"]["ahead"]  # a record from before the field: tolerated
    assert row(rows(healthy(honest=record)), "honest").built_ahead == "yes"


def test_statuses_and_flags_other_than_the_expected_are_misses():
    found = row(rows(healthy(honest=candidate("honest", Status.INCORRECT, memcheck="", reason="differs"))), "honest")
    assert any(m.startswith("expected correct, got incorrect") for m in found.misses)
    grey = candidate("honest", flags=[("side-stream", "flag")])
    assert any("side-stream" in m for m in row(rows(healthy(honest=grey)), "honest").misses)
    # a candidate written elsewhere may carry a grey flag: a warning only; a failing one is a miss anyway
    sticky = candidate("sticky", Status.RUNTIME_ERROR, memcheck="", flags=[("fallback", "flag")])
    found = row(rows(healthy(sticky=sticky)), "sticky")
    assert (found.verdict, found.warnings) == ("warn", ["flags beyond the expected: fallback"])


def test_a_missing_file_or_record_is_a_miss():
    records = [r for r in healthy() if (r.get("identity") or {}).get("candidate") != "sticky"]
    found = rows(records, missing=[(LINEAR, "sticky")])
    assert row(found, "sticky").status == "missing" and row(found, "sticky").verdict == "MISS"
    assert row(rows(records), "sticky").status == "no record"


def test_the_report_writes_its_table_and_fails_on_a_miss_or_a_bad_exit_code(tmp_path, capsys):
    found = rows(healthy())
    assert smoke.report(found, {"auto": 2, "off": 0}, tmp_path) == 0
    assert smoke.report(found, {"auto": 124}, tmp_path) == 1
    printed = capsys.readouterr().out
    assert printed.rstrip().splitlines()[-1].startswith(LAUNCH_BOUND)  # the table comes last
    assert "MISS: auto: run.py exit code 124" in printed
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["exit_codes"] == {"auto": 124} and len(data["rows"]) == len(found)
    assert "| honest | auto |" in (tmp_path / "smoke.md").read_text()


def test_records_are_read_through_the_schema_and_a_cut_last_line_is_left_out(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in healthy()) + '{"kind": "cand')
    assert len(smoke.read_records(path)) == len(healthy())
    assert smoke.read_records(tmp_path / "absent.jsonl") == []


def test_every_candidate_of_the_smoke_has_an_expectation_the_catalog_syntax_reads():
    for each in smoke.CANDIDATES:
        assert each.problem in smoke.PROBLEMS
        assert all(status for status, _ in smoke.options(each.expect))
    assert smoke.options("CUDA fault or runtime error") == [("CUDA fault", frozenset()), ("runtime error", frozenset())]
    assert smoke.options("incorrect + lazy-output") == [("incorrect", frozenset({"lazy-output"}))]


def test_the_smoke_refuses_a_limit_too_short_for_its_passes_and_the_header_it_makes_first(tmp_path):
    import os
    import subprocess

    tools = tmp_path / "bin"  # the system's tools but nvidia-smi: on a GPU machine too, no smoke really runs
    tools.mkdir()
    for folder in ("/usr/bin", "/bin"):
        for name in os.listdir(folder):
            if name != "nvidia-smi" and not (tools / name).exists():
                (tools / name).symlink_to(Path(folder) / name)

    def smoke_with(**env):
        done = subprocess.run(
            ["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh")],
            env={**os.environ, "OUT": str(tmp_path / "out"), "PATH": str(tools), **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode, done.stderr

    code, said = smoke_with(SMOKE_LIMIT="300")  # the header (53 s) and both passes do not fit
    assert code == 2 and "give at least 325 whole seconds" in said
    code, said = smoke_with(SMOKE_LIMIT="300", SMOKE_HEADER="off")  # they fit without it: on to the GPU check
    assert code == 2 and "SMOKE_LIMIT" not in said and "no GPU here" in said
    code, said = smoke_with(SMOKE_LIMIT="264", SMOKE_HEADER="off")
    assert code == 2 and "give at least 265 whole seconds" in said
