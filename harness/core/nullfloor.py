"""The null floor: what the built-in null candidate (the problem's own Model, run through the
candidate path) reads as a speedup. Identical code should read 1.00x; the distance from 1.00 is
how far this run's speedups on that problem are off.

Views of ReferenceRecord.null_floor shared by the leaderboard, the run's end warnings and the gate.
A problem evaluated on several lanes has a floor per lane; the worst one stands for the problem.
"""

from __future__ import annotations

from typing import Iterable, Optional

from harness.core.config import Device
from harness.core.records import NullFloor, ReferenceRecord
from harness.core.status import Status

DEFAULT_TOLERANCE = 0.03  # timing.null_tolerance when a run's config does not say
_SLACK = 1e-9  # 1.03 - 1 is a hair above 0.03 in floating point


def failed(floor: NullFloor) -> bool:
    """The null candidate did not pass its checks (so nothing was timed)."""
    return floor.status != Status.CORRECT.value


def distance(floor: NullFloor) -> float:
    """How far the floor lies from 1.00 (inf when the null candidate failed, 0 when it was not timed)."""
    if failed(floor):
        return float("inf")
    return abs(floor.speedup - 1.0) if floor.speedup is not None else 0.0


def off(floor: Optional[NullFloor], tolerance: float) -> bool:
    """The floor lies outside 1.00 +/- tolerance, or the null candidate failed."""
    return floor is not None and distance(floor) > tolerance + _SLACK


def moved(old: Optional[NullFloor], new: Optional[NullFloor], tolerance: float) -> bool:
    """Both floors were timed and lie further apart than `tolerance`."""
    if old is None or new is None or old.speedup is None or new.speedup is None:
        return False
    return abs(new.speedup - old.speedup) > tolerance + _SLACK


def worst(floors: Iterable[Optional[NullFloor]]) -> Optional[NullFloor]:
    """The floor furthest from 1.00 (a failed null candidate first); None when there is none.
    Ties keep the first."""
    chosen: Optional[NullFloor] = None
    for floor in floors:
        if floor is None:
            continue
        if chosen is None or _rank(floor) > _rank(chosen):
            chosen = floor
    return chosen


def _rank(floor: NullFloor) -> tuple[int, float]:
    if failed(floor):
        return (2, 0.0)
    if floor.speedup is None:
        return (0, 0.0)
    return (1, distance(floor))


def by_problem(references: Iterable[ReferenceRecord]) -> dict[str, NullFloor]:
    """Each problem's worst null floor over its reference records (one per lane); problems without
    a floor are left out."""
    floors: dict[str, list[NullFloor]] = {}
    for reference in references:
        if reference.timing.null_floor is not None:
            floors.setdefault(reference.identity.problem, []).append(reference.timing.null_floor)
    return {problem: chosen for problem, found in floors.items() if (chosen := worst(found)) is not None}


def describe(floor: Optional[NullFloor]) -> str:
    """ "1.00x [0.99, 1.01]" (the speedup and its 95% interval), "failed: incorrect", or "" when
    there is no floor or it was not timed."""
    if floor is None:
        return ""
    if failed(floor):
        return f"failed: {floor.status}"
    if floor.paired is None:
        return ""
    return f"{floor.paired.speedup:.2f}x [{floor.paired.low:.2f}, {floor.paired.high:.2f}]"


def warnings(references: Iterable[ReferenceRecord], tolerance: float) -> list[str]:
    """One line per problem whose null floor lies outside 1.00 +/- tolerance or whose null candidate failed."""
    references = list(references)
    on_gpu = {r.identity.problem for r in references if r.identity.device == Device.CUDA}
    lines = []
    for problem, floor in sorted(by_problem(references).items()):
        if not off(floor, tolerance):
            continue
        if failed(floor):
            lines.append(
                f"{problem}: the null candidate (the problem's own Model through the candidate path) failed "
                f"({floor.status}: {floor.reason}); this run has no fairness floor for the problem, so its speedups "
                "are not checked against 1.00x"
            )
        else:
            assert floor.speedup is not None
            lines.append(
                f"{problem}: null floor {describe(floor)}, outside 1.00x +/- {tolerance * 100:g}%: the problem's own "
                "Model reads "
                f"{floor.speedup:.2f}x against itself, so speedups on this problem are off by about "
                f"{_percent(floor.speedup)}; "
                + (
                    "quiet the machine or use timing.mode=graph"
                    if problem in on_gpu
                    else "quiet the machine (its CPU is the device)"
                )
            )
    return lines


def _percent(speedup: float) -> str:
    return f"{(speedup - 1) * 100:+.1f}%"
