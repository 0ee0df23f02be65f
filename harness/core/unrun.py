"""Checks that could not run are loud: every check has three results (passed, found something,
could not run), and the third reaches the record's warnings and the run's summary, never only a
field nobody reads.

The checks that can fail to run without failing the candidate: the build ahead (the lane then
compiles, on the GPU's time), compute-sanitizer's tools (memory safety unchecked) and the profiled
call (the integrity flags that read it unchecked). The gradient check's own failures are verdicts
(`forward only`, `wrong gradients`), not checks that could not run.

Pure functions of records: `ahead_warnings` and `sanitizer_warnings` give a record's warnings,
`run_summary` the run's lines ("memcheck could not run on 12 candidates: ..."), and `required_unrun`
why a run that asked for a check explicitly (`sanitizer.enabled: on`) must fail (exit 4).
"""

from __future__ import annotations

import collections
from typing import Iterable

from harness.core.records import (
    AheadBuild,
    AheadOutcome,
    CandidateRecord,
    ExtensionBuild,
    SanitizerOutcome,
    SanitizerResult,
)
from harness.core.status import Status

# a check ran and gave its answer: clean or errors; anything else could not run
SANITIZER_RAN = (SanitizerOutcome.CLEAN, SanitizerOutcome.ERRORS)
# statuses that say themselves why the candidate never loaded: its build ahead failed the same way
LOAD_FAILURES = (
    Status.EXTRACT_FAILED,
    Status.SYNTAX_ERROR,
    Status.IMPORT_ERROR,
    Status.INTERFACE_ERROR,
    Status.BUILD_FAILED,
    Status.NEEDS_CUDA,
)
PROFILE_FAILED = "profiling the candidate failed: "  # the start of the verdict's warning for a failed profiled call


def _lane_compiled(builds: Iterable[ExtensionBuild]) -> str:
    """What the lane's worker compiled itself (nothing when every build was found in the cache)."""
    compiled = [b for b in builds if not b.cached]
    if not compiled:
        return ""
    names = ", ".join(sorted({b.name for b in compiled}))
    return f"the lane compiled {names} ({sum(b.seconds for b in compiled):.0f} s of the lane's time)"


def ahead_warnings(ahead: AheadBuild, builds: Iterable[ExtensionBuild], status: Status) -> list[str]:
    """A record's warnings about its build ahead: it failed, ran out of time or was skipped while the
    candidate then loaded in its lane, or it finished and the lane compiled anyway. None without a
    build pool, or where the status already says why the candidate never loaded."""
    if ahead.outcome is AheadOutcome.NONE or status in LOAD_FAILURES:
        return []
    compiled = _lane_compiled(builds)
    if ahead.went_wrong:
        tail = f"; {compiled}" if compiled else ""
        return [f"the build ahead {ahead.outcome}: {ahead.detail}{tail}"]
    if compiled:
        why = (
            "the build ahead built nothing (an extension built later than import and construction)"
            if ahead.outcome is AheadOutcome.NOTHING
            else f"the build ahead's extensions were not the lane's ({ahead.detail})"
        )
        return [f"compiled in the lane, not ahead: {compiled}; {why}"]
    return []


def sanitizer_warnings(runs: Iterable[SanitizerResult]) -> list[str]:
    """A record's warnings for each compute-sanitizer tool that could not give its answer."""
    return [f"{r.tool} could not run ({r.outcome}): {r.detail}" for r in runs if r.outcome not in SANITIZER_RAN]


def _most_common(details: list[str]) -> str:
    detail, count = collections.Counter(details).most_common(1)[0]
    others = len(details) - count
    return f"{detail[:160]}" + (f" (and {others} other reason{'s' if others > 1 else ''})" if others else "")


def _candidates(count: int) -> str:
    return f"{count} candidate{'s' if count != 1 else ''}"


def run_summary(records: Iterable[CandidateRecord]) -> list[str]:
    """One line per check that could not run on some of the run's candidates: how many, and the
    commonest reason."""
    tools: dict[str, list[str]] = collections.defaultdict(list)
    ahead: list[str] = []
    lane: list[str] = []
    profile: list[str] = []
    for record in records:
        for run in record.integrity.sanitizer:
            if run.outcome not in SANITIZER_RAN:
                tools[run.tool].append(f"{run.outcome}: {run.detail}")
        status = record.decision.status
        built = record.provenance.ahead
        if built.outcome is not AheadOutcome.NONE and status not in LOAD_FAILURES:
            if built.went_wrong:
                ahead.append(f"{built.outcome}: {built.detail}")
            elif _lane_compiled(record.provenance.builds):
                lane.append(f"its build ahead: {built.outcome}")
        profile += [w[len(PROFILE_FAILED) :] for w in record.decision.warnings if w.startswith(PROFILE_FAILED)]
    lines = [
        f"{tool} could not run on {_candidates(len(details))}: {_most_common(details)}"
        for tool, details in sorted(tools.items())
    ]
    if ahead:
        lines.append(f"the build ahead did not finish for {_candidates(len(ahead))}: {_most_common(ahead)}")
    if lane:
        lines.append(f"{_candidates(len(lane))} compiled in the lane, not ahead ({_most_common(lane)})")
    if profile:
        lines.append(f"the profiled call failed on {_candidates(len(profile))}: {_most_common(profile)}")
    return lines


def required_unrun(records: Iterable[CandidateRecord], sanitizer_required: bool) -> str:
    """Why a run that asked for compute-sanitizer explicitly (sanitizer.enabled: on) fails: a tool
    could not run on one of its candidates; "" when every asked-for check ran."""
    if not sanitizer_required:
        return ""
    missed = [
        (record, run) for record in records for run in record.integrity.sanitizer if run.outcome not in SANITIZER_RAN
    ]
    if not missed:
        return ""
    record, run = missed[0]
    return (
        f"sanitizer.enabled is on, and {run.tool} could not run on {_candidates(len({r.key for r, _ in missed}))} "
        f"(first: {record.identity.problem}/{record.identity.candidate}: {run.outcome}: {run.detail[:200]})"
    )
