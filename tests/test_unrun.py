"""A check that could not run is loud: it reaches the record's warnings, the run's summary and, when
the check was asked for explicitly, the exit code."""

import dataclasses

import pytest

from harness.core import unrun
from harness.core.errors import ExitCode
from harness.core.records import AheadBuild, AheadOutcome, ExtensionBuild, Integrity, SanitizerResult
from harness.core.status import Status
from harness.parent.prebuild import ahead_outcome
from tests.records import candidate_record

ERROR_304 = "exit code 255: RuntimeError: Unexpected error from cudaGetDeviceCount() ... Error 304"
CLEAN = SanitizerResult("memcheck", "clean", "0 errors")
FOUND = SanitizerResult("memcheck", "errors", "Invalid __global__ write of size 4 bytes")
FAILED = SanitizerResult("memcheck", "failed", ERROR_304)
COMPILED_IN_LANE = (ExtensionBuild("fused", "k1", cached=False, seconds=51.0),)
FOUND_BUILT = (ExtensionBuild("fused", "k1", cached=True, seconds=0.4),)


def record(status=Status.CORRECT, sanitizer=(), ahead=AheadBuild(), builds=(), warnings=(), name="c"):
    made = candidate_record(status=status, candidate=name, builds=builds, warnings=warnings)
    return dataclasses.replace(
        made,
        integrity=Integrity(sanitizer=tuple(sanitizer)),
        provenance=dataclasses.replace(made.provenance, ahead=ahead),
    )


def test_a_sanitizer_run_that_could_not_run_is_a_warning_and_clean_or_errors_are_not():
    assert unrun.sanitizer_warnings([CLEAN, FOUND]) == []
    assert unrun.sanitizer_warnings([FAILED]) == [f"memcheck could not run (failed): {ERROR_304}"]
    timeout = SanitizerResult("memcheck", "timeout", "no verdict within sanitizer.timeout=240 s")
    assert unrun.sanitizer_warnings([timeout]) == ["memcheck could not run (timeout): no verdict within sanitizer.timeout=240 s"]


@pytest.mark.parametrize(
    "ahead, builds, status, expected",
    [
        (AheadBuild(), COMPILED_IN_LANE, Status.CORRECT, []),  # no build pool: nothing to say
        (AheadBuild(AheadOutcome.BUILT, "[('fused', 'built')]"), FOUND_BUILT, Status.CORRECT, []),
        (AheadBuild(AheadOutcome.NOTHING), (), Status.CORRECT, []),  # Triton or torch only
        (
            AheadBuild(AheadOutcome.FAILED, "needs CUDA extension 'fused' compiles CUDA sources"),
            COMPILED_IN_LANE,
            Status.CORRECT,
            [
                "the build ahead failed: needs CUDA extension 'fused' compiles CUDA sources; the lane compiled fused "
                "(51 s of the lane's time)"
            ],
        ),
        (AheadBuild(AheadOutcome.TIMEOUT, "ended after 900 s"), (), Status.INCORRECT, ["the build ahead timeout: ended after 900 s"]),
        (AheadBuild(AheadOutcome.FAILED, "build failed x.cu:3: error"), (), Status.BUILD_FAILED, []),  # the status says it
        (
            AheadBuild(AheadOutcome.NOTHING),
            COMPILED_IN_LANE,
            Status.CORRECT,
            [
                "compiled in the lane, not ahead: the lane compiled fused (51 s of the lane's time); the build ahead "
                "built nothing (an extension built later than import and construction)"
            ],
        ),
    ],
)
def test_a_build_ahead_that_did_not_spare_the_lane_a_compile_is_a_warning(ahead, builds, status, expected):
    assert unrun.ahead_warnings(ahead, builds, status) == expected


@pytest.mark.parametrize(
    "stdout, stderr, code, outcome, detail",
    [
        ("ok [('fused', 'built')]\n", "", 0, "built", "[('fused', 'built')]"),
        ("noise from the candidate\nok []\n", "", 0, "nothing", ""),
        ("build failed main.cu:5: error: x undefined\n", "", 0, "failed", "build failed main.cu:5: error: x undefined"),
        ("", "harness sandbox: cannot enter the boundary: no Landlock\n", 70, "failed",
         "the build process exited 70: harness sandbox: cannot enter the boundary: no Landlock"),
    ],
)
def test_a_build_processs_last_line_is_its_outcome(stdout, stderr, code, outcome, detail):
    found = ahead_outcome(stdout, stderr, code, 1.5)
    assert (found.outcome, found.detail, found.seconds) == (outcome, detail, 1.5)


def test_the_run_summary_counts_each_check_that_could_not_run_with_its_commonest_reason():
    records = [
        record(sanitizer=[FAILED], name="a"),
        record(sanitizer=[FAILED], name="b"),
        record(sanitizer=[SanitizerResult("memcheck", "timeout", "no verdict")], name="c"),
        record(sanitizer=[CLEAN], name="d"),
        record(ahead=AheadBuild(AheadOutcome.FAILED, "import error boom"), name="e"),
        record(ahead=AheadBuild(AheadOutcome.NOTHING), builds=COMPILED_IN_LANE, name="f"),
        record(warnings=("profiling the candidate failed: CUPTI_ERROR_NOT_INITIALIZED",), name="g"),
        record(status=Status.BUILD_FAILED, ahead=AheadBuild(AheadOutcome.FAILED, "build failed"), name="h"),
    ]
    assert unrun.run_summary(records) == [
        f"memcheck could not run on 3 candidates: failed: {ERROR_304} (and 1 other reason)",
        "the build ahead did not finish for 1 candidate: failed: import error boom",
        "1 candidate compiled in the lane, not ahead (its build ahead: nothing)",
        "the profiled call failed on 1 candidate: CUPTI_ERROR_NOT_INITIALIZED",
    ]
    assert unrun.run_summary([record(sanitizer=[CLEAN, FOUND])]) == []


def test_memcheck_asked_for_explicitly_that_could_not_run_fails_the_run_with_exit_4():
    from harness.commands.run import exit_code

    failed = [record(sanitizer=[CLEAN], name="a"), record(sanitizer=[FAILED], name="b")]
    why = unrun.required_unrun(failed, sanitizer_required=True)
    assert why.startswith("sanitizer.enabled is on, and memcheck could not run on 1 candidate (first: p/b: failed:")
    assert unrun.required_unrun(failed, sanitizer_required=False) == ""  # auto: a warning, not a failure
    assert unrun.required_unrun([record(sanitizer=[CLEAN, FOUND])], sanitizer_required=True) == ""
    assert exit_code(failed, required_unrun=why) is ExitCode.INTERNAL
    assert exit_code(failed) is ExitCode.OK
    assert exit_code(failed, interrupted=True, required_unrun=why) is ExitCode.INTERRUPTED
