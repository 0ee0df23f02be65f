"""Integrity flags: what the checks found about how a candidate gets its result, as data.

Every finding has a stable code. A policy per code (config `flags.*`, or a problem's
HARNESS_FLAGS) says what it does: `fail` changes a correct verdict into a failing status (never
ranked, never in fast_p or the geomean), `flag` keeps the verdict and shows the code in the
leaderboard's `flags` column, `ignore` drops it. docs/integrity.md#flags says why each default is
what it is.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from harness.core.config import Policy
from harness.core.records import Flag
from harness.core.status import Code, Finding, Status

# The status a correct candidate gets when a flag with policy `fail` is raised.
FAILING_STATUS: dict[Code, Status] = {
    Code.NO_CUSTOM_KERNEL: Status.NO_CUSTOM_KERNEL,
    Code.WRONG_GRADIENTS: Status.WRONG_GRADIENTS,
    Code.FORWARD_ONLY: Status.FORWARD_ONLY,
    Code.UNSAFE_MEMORY: Status.UNSAFE_MEMORY,
    Code.WEIGHTS_BY_SEED: Status.WEIGHTS_MISMATCH,
    Code.BELOW_FLOAT32: Status.LESS_PRECISE,
    Code.LAZY_OUTPUT: Status.INCORRECT,  # an output with no values of its own was never compared: not a match
}


def decide(
    status: Status, reason: str, found: Iterable[Finding], policies: Mapping[str, str]
) -> tuple[Status, str, tuple[Flag, ...]]:
    """Apply each finding's policy to a verdict. The first failing finding turns a correct verdict
    into its failing status; a verdict that already failed keeps its status and the flags. Findings
    of one code are one flag, their evidence joined: a record lists each code once."""
    merged: dict[Code, list[str]] = {}
    for code, why in found:
        merged.setdefault(code, []).append(why)
    flags = []
    for code, whys in merged.items():
        why = "; ".join(dict.fromkeys(whys))
        policy = policies[code.key]
        if policy == Policy.IGNORE:
            continue
        flags.append(Flag(code.value, policy, " ".join(why.split())))
        if policy == Policy.FAIL and status is Status.CORRECT:
            status = FAILING_STATUS.get(code, Status.FLAGGED)
            reason = f"{code.value}: {why}"
    return status, reason, tuple(flags)


def column(flags: Iterable[Flag]) -> str:
    """The leaderboard's `flags` cell: each code once, failing ones marked with `!`."""
    seen: dict[str, str] = {}
    for f in flags:
        if seen.get(f.code) != Policy.FAIL:
            seen[f.code] = f.policy
    return ", ".join(f"{code}!" if policy == Policy.FAIL else code for code, policy in seen.items())
