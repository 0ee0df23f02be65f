"""The regression gate: compare a current run with a baseline, candidate by candidate.

A candidate regresses when it was correct and is not now, whatever changed between the runs (its
source, the problem's, the device or the timing protocol), or when its median is slower by more
than the threshold **and** the raw samples differ significantly (two-sided Mann-Whitney U at a
strict p). Improvements are found the same way. "Not comparable" applies to times only: they are
not compared when the problem's source, the device or the timing protocol differ (or the
candidate's source, with across_changes off), or when a run's null floor for the problem (the
problem's own Model timed as a candidate) lies outside 1.00 +/- timing.null_tolerance, or moved by
more than that between the runs. A candidate skipped on one side (`needs CUDA`) is not comparable:
a skip is no verdict on the kernel. Only the problems the current run evaluated are gated: there, a
baseline candidate that was correct and is absent now fails (unless missing candidates are
allowed), and so does a new candidate that is not correct (one skipped for `needs CUDA` is no
verdict). The verdict follows the `--fail-on` rules; the markdown report is always written, and
shown on the terminal as tables that fit it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, TypedDict

from harness.core import nullfloor
from harness.core.config import PROTOCOL_SETTINGS
from harness.core.errors import UserError
from harness.core.records import CandidateRecord, NullFloor, ReferenceRecord, RunHeader, latest_per_candidate
from harness.core.status import Status, Vocabulary
from harness.core.store import read_records, resolve_run
from harness.sources.problem import natural_key
from harness.views.terminal import Column, fitted_table, left_out, notes
from harness.views.text import markdown_code, markdown_text, terminal_text

# Settings of the timing protocol that change what a median means; a baseline taken under other
# values is not comparable (harness.core.config.PROTOCOL_SETTINGS).
PROTOCOL_KEYS = PROTOCOL_SETTINGS
# a protocol setting that a run's config lacks, read at the value every run before the setting existed had
BEFORE_SETTING: dict[str, Any] = {"timing.hold": False}


class GateOutcome(Vocabulary):
    """What became of one candidate between the runs, in the order the report counts them."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NOT_COMPARABLE = "not comparable"
    NEW = "new"
    MISSING = "missing"


class Regression(Vocabulary):
    """The rule a candidate fails: how it regressed (each has its own `--fail-on` rule), or a correct
    candidate gone, or a new one not correct (both with correctness: `status`)."""

    STATUS = "status"  # it was correct and is not now (rule: status)
    TIME = "time"  # it is correct on both sides and significantly slower (rule: median)
    MISSING = "missing"  # it was correct and is absent from a problem the run evaluated (rule: status, unless allowed)
    NEW_NOT_CORRECT = "new-not-correct"  # not in the baseline, and evaluated and not correct now (rule: status)


class FailOn(Vocabulary):
    """The words of `--fail-on` (`GateRules.parse`): a rule of `GateRules` each, or a whole set of them."""

    DEFAULT = "default"  # correctness and median at the command's default threshold (as an empty --fail-on)
    NONE = "none"  # nothing fails the gate
    STATUS = "status"  # GateRules.status
    MEDIAN = "median"  # median:N%, GateRules.median
    GEOMEAN = "geomean"  # geomean:N%, GateRules.geomean
    MISSING = "missing"  # GateRules.missing
    INCOMPARABLE = "incomparable"  # GateRules.incomparable


REGRESSED, IMPROVED, UNCHANGED, NOT_COMPARABLE, NEW, MISSING = GateOutcome
VERDICTS = tuple(GateOutcome)


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of a comparison: the records of a run folder, a records file or a baseline file."""

    source: str  # what the user named: a baseline file, run folder, run id or records.jsonl
    header: Optional[RunHeader]  # the run's header (its config holds the timing protocol), when there is one
    references: dict[str, ReferenceRecord]  # problem -> its (first) reference record
    candidates: dict[tuple[str, str], CandidateRecord]  # (problem, candidate) -> its latest record
    # problem -> its worst null floor over its references (lanes)
    null_floors: dict[str, NullFloor] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One (problem, candidate) compared between the baseline and the current run."""

    problem: str  # problem name
    candidate: str  # candidate name
    verdict: GateOutcome  # what became of it
    reason: str  # one line: why that verdict (the change in time and its p, or what changed)
    baseline_status: Optional[str] = None  # its status in the baseline (None: not there)
    current_status: Optional[str] = None  # its status now (None: not in this run)
    baseline_ms: Optional[float] = None  # its median in the baseline, when times were compared
    current_ms: Optional[float] = None  # its median now, when times were compared
    ratio: Optional[float] = None  # current / baseline median (> 1: slower)
    p_value: Optional[float] = None  # two-sided Mann-Whitney U over the raw samples
    reference_ratio: Optional[float] = None  # the eager reference's own current / baseline median
    # the rule it fails: how it regressed, or a correct one missing, or a new one not correct
    regression: Optional[Regression] = None


class _Statuses(TypedDict):
    """The statuses part of a Comparison, passed as keywords."""

    baseline_status: str
    current_status: str


class _Times(TypedDict):
    """The times part of a Comparison, passed as keywords."""

    baseline_ms: float
    current_ms: float
    ratio: float
    p_value: float
    reference_ratio: Optional[float]


@dataclasses.dataclass(frozen=True)
class GateRules:
    """What fails the gate (`--fail-on`): comma-separated `median:10%`, `geomean:5%`, `missing`,
    `incomparable`; correctness (`status`) is always checked, unless the rule is `none`."""

    status: bool = True  # a candidate that was correct and is not now
    median: Optional[float] = 0.10  # a significant slowdown beyond this fraction (None: never)
    geomean: Optional[float] = None  # the geometric mean of comparable ratios slower beyond this
    missing: bool = False  # any baseline candidate absent from the current run (a correct one fails with status)
    incomparable: bool = False  # any result that could not be compared
    allow_missing: bool = False  # a correct baseline candidate absent from the current run fails nothing

    @classmethod
    def parse(cls, text: str, median_default: float, allow_missing: bool = False) -> "GateRules":
        text = text.strip()
        if text in ("", FailOn.DEFAULT):
            return cls(median=median_default, allow_missing=allow_missing)
        if text == FailOn.NONE:
            return cls(status=False, median=None, allow_missing=allow_missing)
        fields: dict[str, Any] = {"status": True, "median": None}
        for item in (part.strip() for part in text.split(",")):
            match = re.fullmatch(rf"({FailOn.MEDIAN}|{FailOn.GEOMEAN}):(\d+(?:\.\d+)?)%", item)
            if match:
                fields[match.group(1)] = float(match.group(2)) / 100
            elif item in (FailOn.STATUS, FailOn.MISSING, FailOn.INCOMPARABLE):
                fields[item] = True
            else:
                raise UserError(
                    f"--fail-on: cannot read {item!r}; use comma-separated status, median:10%, geomean:5%, missing, "
                    "incomparable or none"
                )
        if allow_missing and fields.get(FailOn.MISSING):
            raise UserError(
                "--allow-missing contradicts --fail-on missing (which fails on any missing candidate); pass one of them"
            )
        return cls(**fields, allow_missing=allow_missing)

    def describe(self) -> str:
        parts = [FailOn.STATUS if self.status else ""]
        parts.append(f"{FailOn.MEDIAN}:{self.median:.0%}" if self.median is not None else "")
        parts.append(f"{FailOn.GEOMEAN}:{self.geomean:.0%}" if self.geomean is not None else "")
        parts += [FailOn.MISSING if self.missing else "", FailOn.INCOMPARABLE if self.incomparable else ""]
        return ",".join(p for p in parts if p) or FailOn.NONE


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The gate's comparisons and its verdict."""

    baseline: str  # the baseline's source, as named
    current: str  # the current run's source, as named
    rules: GateRules  # what fails the gate
    alpha: float  # a change in time counts when the Mann-Whitney p is below this
    comparisons: tuple[Comparison, ...]  # one per (problem, candidate) of either side, sorted, on the problems gated
    geomean_ratio: Optional[float]  # over candidates compared on time
    failures: tuple[str, ...]  # why the gate fails; empty when it passes
    left_out: tuple[str, ...] = ()  # the baseline's problems that the current run did not evaluate: not gated

    @property
    def passed(self) -> bool:
        return not self.failures

    def count(self, verdict: GateOutcome) -> int:
        return sum(c.verdict == verdict for c in self.comparisons)


def load_side(where: str, results_dir: Path) -> Side:
    """Records from a run folder, a run id under `results_dir`, a records file or a baseline file."""
    path = resolve_run(where, results_dir)
    records = read_records(path)
    header = next((r for r in records if isinstance(r, RunHeader)), None)
    every_reference = [r for r in records if isinstance(r, ReferenceRecord)]
    references: dict[str, ReferenceRecord] = {}
    for record in every_reference:
        references.setdefault(record.identity.problem, record)
    candidates = latest_per_candidate(r for r in records if isinstance(r, CandidateRecord))
    if not candidates:
        raise UserError(f"{where}: holds no candidate records")
    return Side(str(where), header, references, candidates, nullfloor.by_problem(every_reference))


def _setting(header: Optional[RunHeader], dotted: str) -> Any:
    """A setting of a run's config (None without a header); one the config lacks is read as BEFORE_SETTING says."""
    if header is None:
        return None
    value: Any = header.config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return BEFORE_SETTING.get(dotted) if value is None else value


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value (scipy); 1.0 when either side has too few samples to tell."""
    from scipy.stats import mannwhitneyu

    if len(a) < 2 or len(b) < 2:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


# a change that the times are compared across, unless across_changes is off
CANDIDATE_CHANGED = "the candidate file changed"


def _changes(baseline: Side, current: Side, old: CandidateRecord, new: CandidateRecord) -> list[str]:
    """What differs between the runs for this candidate, each a short clause, in the order they
    are named; empty when nothing does."""
    found: list[str] = []
    if old.identity.problem_hash != new.identity.problem_hash:
        found.append("the problem file changed")
    if old.identity.candidate_hash != new.identity.candidate_hash:
        found.append(CANDIDATE_CHANGED)
    if old.identity.device != new.identity.device:
        found.append(f"device {old.identity.device} then, {new.identity.device} now")
    old_ref, new_ref = baseline.references.get(old.identity.problem), current.references.get(new.identity.problem)
    if (
        old_ref is not None
        and new_ref is not None
        and old_ref.identity.device_name
        and new_ref.identity.device_name
        and old_ref.identity.device_name != new_ref.identity.device_name
    ):
        found.append(f"{old_ref.identity.device_name} then, {new_ref.identity.device_name} now")
    for key in PROTOCOL_KEYS:
        then, now = _setting(baseline.header, key), _setting(current.header, key)
        if then is not None and now is not None and then != now:
            found.append(f"{key} was {then!r}, is {now!r}")
    return found


def _incomparable(changes: list[str], across_changes: bool) -> str:
    """Why the times cannot be compared, from the runs' `changes`; "" when they can."""
    for change in changes:
        if change != CANDIDATE_CHANGED:
            return change
        if not across_changes:
            return f"{CANDIDATE_CHANGED} (compare anyway with --across-changes)"
    return ""


def _skipped(old: CandidateRecord, new: CandidateRecord) -> str:
    """Why a candidate skipped (`needs CUDA`) on one side only is not comparable; "" when it was
    evaluated on both sides or skipped on both."""
    if (old.decision.status is Status.NEEDS_CUDA) == (new.decision.status is Status.NEEDS_CUDA):
        return ""
    if new.decision.status is Status.NEEDS_CUDA:
        return f"was {old.decision.status.value}, skipped now (needs CUDA): this run could not evaluate it"
    return f"not evaluated in the baseline (needs CUDA), now {new.decision.status.value}"


def null_tolerance_of(current: Side) -> float:
    """timing.null_tolerance from the current run's header config, else the default (0.03)."""
    value = _setting(current.header, "timing.null_tolerance")
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        else nullfloor.DEFAULT_TOLERANCE
    )


def _floor_reason(baseline: Side, current: Side, problem: str, tolerance: float) -> str:
    """Why times on `problem` cannot be compared because of the runs' null floors; "" when they can
    (or when the runs have no floors)."""
    old, new = baseline.null_floors.get(problem), current.null_floors.get(problem)
    for floor, which in ((new, "the current run"), (old, "the baseline")):
        if floor is None or not nullfloor.off(floor, tolerance):
            continue
        if nullfloor.failed(floor):
            return f"the null candidate failed in {which} ({floor.status}): the run has no null floor for this problem"
        return (
            f"the null floor is {nullfloor.describe(floor)} in {which}, outside 1.00x +/- {tolerance * 100:g}%: "
            "times on this problem are off by about that much"
        )
    if nullfloor.moved(old, new, tolerance):
        assert old is not None and new is not None and old.speedup is not None and new.speedup is not None
        return f"the null floor moved from {old.speedup:.2f}x to {new.speedup:.2f}x (more than {tolerance * 100:g}%)"
    return ""


def compare_one(
    baseline: Side,
    current: Side,
    key: tuple[str, str],
    threshold: float,
    alpha: float,
    across_changes: bool = True,
    null_tolerance: float = nullfloor.DEFAULT_TOLERANCE,
) -> Comparison:
    problem, name = key
    old, new = baseline.candidates.get(key), current.candidates.get(key)
    if old is None or new is None:
        return _one_side(problem, name, old, new)
    statuses: _Statuses = {"baseline_status": old.decision.status.value, "current_status": new.decision.status.value}
    skipped = _skipped(old, new)
    if skipped:  # a skip is no verdict on the kernel: nothing to compare it with
        return Comparison(problem, name, NOT_COMPARABLE, skipped, **statuses)
    changes = _changes(baseline, current, old, new)
    status_change = _status_change(old, new, "; ".join(changes))
    if status_change is not None:  # correctness is compared whatever changed between the runs
        verdict, reason = status_change
        return Comparison(
            problem, name, verdict, reason, **statuses, regression=Regression.STATUS if verdict == REGRESSED else None
        )
    why = _incomparable(changes, across_changes)
    if why:
        return Comparison(problem, name, NOT_COMPARABLE, why, **statuses)
    if old.timing.stats is None or new.timing.stats is None:
        return Comparison(problem, name, UNCHANGED, "correct; not timed on both sides", **statuses)
    floor = _floor_reason(baseline, current, problem, null_tolerance)
    if floor:  # correctness was compared above; only the times are not
        return Comparison(problem, name, NOT_COMPARABLE, floor, **statuses)
    old_ms, new_ms = old.timing.stats.median_ms, new.timing.stats.median_ms
    ratio = new_ms / old_ms if old_ms > 0 else math.inf
    p = mann_whitney_p(old.timing.stats.corrected_samples(), new.timing.stats.corrected_samples())
    reference_ratio = (
        new.timing.reference_ms / old.timing.reference_ms
        if old.timing.reference_ms and new.timing.reference_ms
        else None
    )
    times: _Times = {
        "baseline_ms": old_ms,
        "current_ms": new_ms,
        "ratio": ratio,
        "p_value": p,
        "reference_ratio": reference_ratio,
    }
    changed = " (source changed)" if old.identity.candidate_hash != new.identity.candidate_hash else ""
    beyond = ratio > 1 + threshold or ratio < 1 / (1 + threshold)
    if beyond and p < alpha:
        if ratio > 1:
            return Comparison(
                problem,
                name,
                REGRESSED,
                f"{_percent(ratio)} (p={p:.1e}){changed}",
                **statuses,
                **times,
                regression=Regression.TIME,
            )
        return Comparison(problem, name, IMPROVED, f"{_percent(ratio)} (p={p:.1e}){changed}", **statuses, **times)
    if beyond:
        return Comparison(
            problem,
            name,
            UNCHANGED,
            f"{_percent(ratio)}, not significant (p={p:.2g} >= {alpha:g}){changed}",
            **statuses,
            **times,
        )
    return Comparison(
        problem, name, UNCHANGED, f"{_percent(ratio)}, within {threshold:.0%}{changed}", **statuses, **times
    )


MISSING_HINT = (
    "if it was renamed or deleted on purpose, save a new baseline from this run (run.py baseline save RUN --out FILE) "
    "or pass --allow-missing"
)


def _one_side(problem: str, name: str, old: Optional[CandidateRecord], new: Optional[CandidateRecord]) -> Comparison:
    """A candidate on one side only: new (a failure when it was evaluated and is not correct) or
    missing (a failure when it was correct)."""
    if old is None:
        assert new is not None
        status = new.decision.status
        if status is Status.CORRECT:
            return Comparison(problem, name, NEW, "not in the baseline", current_status=status.value)
        if status is Status.NEEDS_CUDA:  # a skip is no verdict on the kernel
            reason = "not in the baseline, skipped now (needs CUDA): this run could not evaluate it"
            return Comparison(problem, name, NEW, reason, current_status=status.value)
        reason = f"not in the baseline, and {status.value} now: {new.decision.reason}"
        failing = Regression.NEW_NOT_CORRECT
        return Comparison(problem, name, NEW, reason, current_status=status.value, regression=failing)
    status = old.decision.status
    if status is not Status.CORRECT:
        return Comparison(problem, name, MISSING, "in the baseline, not in this run", baseline_status=status.value)
    reason = f"was correct, not in this run ({MISSING_HINT})"
    return Comparison(problem, name, MISSING, reason, baseline_status=status.value, regression=Regression.MISSING)


def _status_change(old: CandidateRecord, new: CandidateRecord, changed: str) -> Optional[tuple[GateOutcome, str]]:
    """The verdict and reason when the candidate is not correct on both sides; None when it is.
    `changed` names what differs between the runs (its source, the problem's, the device, the
    protocol), for the reason: none of it keeps correctness from being compared."""
    was, now = old.decision.status is Status.CORRECT, new.decision.status is Status.CORRECT
    if was and now:
        return None
    note = f" ({changed})" if changed else ""
    if was:
        return REGRESSED, f"was correct, now {new.decision.status.value}{note}: {new.decision.reason}"
    if now:
        return IMPROVED, f"was {old.decision.status.value}, now correct{note}"
    if old.decision.status is Status.NEEDS_CUDA:
        return UNCHANGED, "not evaluated on either side (needs CUDA)"
    same = "" if old.decision.status is new.decision.status else f" (was {old.decision.status.value})"
    return UNCHANGED, f"still not correct{same}"


def gate(baseline: Side, current: Side, rules: GateRules, alpha: float, across_changes: bool = True) -> GateResult:
    """Compare the runs on the problems the current run evaluated (its candidates' and its references'
    problems); the baseline's other problems are left out, not gated. A run of every problem (`--all`)
    covers the baseline's every problem: one it no longer has (its solutions folder deleted) is missing."""
    threshold = rules.median if rules.median is not None else 0.10
    tolerance = null_tolerance_of(current)
    covered = {problem for problem, _ in current.candidates} | set(current.references)
    if runs_everything(current):
        covered |= {problem for problem, _ in baseline.candidates}
    keys = sorted(key for key in set(baseline.candidates) | set(current.candidates) if key[0] in covered)
    compared = (compare_one(baseline, current, key, threshold, alpha, across_changes, tolerance) for key in keys)
    comparisons = tuple(_allowed(comparison, rules) for comparison in compared)
    ratios = [
        c.ratio for c in comparisons if c.ratio is not None and c.verdict != NOT_COMPARABLE and 0 < c.ratio < math.inf
    ]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    left = tuple(sorted({problem for problem, _ in baseline.candidates} - covered, key=natural_key))
    failures = _failures(comparisons, rules, geomean)
    return GateResult(baseline.source, current.source, rules, alpha, comparisons, geomean, failures, left)


def runs_everything(side: Side) -> bool:
    """Whether the side's run was asked for every problem (`run.py --all`, as its header's command line says)."""
    return side.header is not None and "--all" in side.header.argv


def _allowed(comparison: Comparison, rules: GateRules) -> Comparison:
    """A correct candidate missing now, when missing candidates are allowed: reported, failing nothing."""
    if comparison.regression is not Regression.MISSING or not rules.allow_missing:
        return comparison
    allowed = "was correct, not in this run (allowed: --allow-missing)"
    return dataclasses.replace(comparison, reason=allowed, regression=None)


def _failures(comparisons: Sequence[Comparison], rules: GateRules, geomean: Optional[float]) -> tuple[str, ...]:
    """Why the gate fails under `rules`, one clause per rule that fails; empty when it passes."""

    def failing(regression: Regression) -> int:
        return sum(c.regression is regression for c in comparisons)

    failures = []
    if rules.status and failing(Regression.STATUS):
        failures.append(f"{failing(Regression.STATUS)} candidate(s) no longer correct")
    if rules.status and failing(Regression.MISSING):
        what_to_do = "save a new baseline from this run with run.py baseline save, or pass --allow-missing"
        failures.append(f"{failing(Regression.MISSING)} correct candidate(s) missing ({what_to_do})")
    if rules.status and failing(Regression.NEW_NOT_CORRECT):
        failures.append(f"{failing(Regression.NEW_NOT_CORRECT)} new candidate(s) not correct")
    if rules.median is not None and failing(Regression.TIME):
        failures.append(f"{failing(Regression.TIME)} candidate(s) significantly slower than {1 + rules.median:.2f}x")
    if rules.geomean is not None and geomean is not None and geomean > 1 + rules.geomean:
        failures.append(f"geometric mean {_percent(geomean)}, over {rules.geomean:.0%}")
    if rules.missing and any(c.verdict == MISSING for c in comparisons):
        failures.append(f"{sum(c.verdict == MISSING for c in comparisons)} baseline candidate(s) missing")
    if rules.incomparable and any(c.verdict == NOT_COMPARABLE for c in comparisons):
        failures.append(f"{sum(c.verdict == NOT_COMPARABLE for c in comparisons)} result(s) not comparable")
    return tuple(failures)


def _percent(ratio: float) -> str:
    if ratio == math.inf:
        return "infinitely slower"
    return f"{(ratio - 1) * 100:+.1f}%"


def _ms(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4g}"


def _in_order(rows: Iterable[Comparison]) -> list[Comparison]:
    """Natural order (`l1_p2` before `l1_p10`), by problem then candidate."""
    return sorted(rows, key=lambda c: (natural_key(c.problem), natural_key(c.candidate)))


def _shown(c: Comparison) -> dict[str, str]:
    """A comparison's cells as the report shows them, by column, its names and reason left out."""
    return {
        "baseline ms": _ms(c.baseline_ms),
        "current ms": _ms(c.current_ms),
        "ratio": f"{c.ratio:.3f}x" if c.ratio is not None else "",
        "p": f"{c.p_value:.1e}" if c.p_value is not None else "",
        "reference moved": _percent(c.reference_ratio) if c.reference_ratio is not None else "",
        "statuses": (c.current_status or "")
        if c.baseline_status == c.current_status
        else f"{c.baseline_status or '-'} → {c.current_status or '-'}",
    }


# The markdown table's cells after the names and the change, as `_shown` writes them.
MARKDOWN_COLUMNS = ("baseline ms", "current ms", "ratio", "p", "reference moved", "statuses")


def _table(rows: Iterable[Comparison]) -> list[str]:
    """One row per comparison, in natural order; names and reasons as literal text."""
    lines = [
        "| problem | candidate | change | baseline ms | current ms | ratio | p | reference moved | statuses |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in _in_order(rows):
        shown = _shown(c)
        cells = [markdown_text(c.problem), markdown_text(c.candidate), markdown_text(c.reason)]
        cells += [shown[header] for header in MARKDOWN_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _about(result: GateResult, quoted: Callable[[str], str]) -> str:
    """What was compared under which rules, and what the gate left alone: missing candidates allowed,
    the problems not gated. `quoted` writes a path and the rules (a code span in markdown)."""
    said = [
        f"Baseline {quoted(result.baseline)}, current {quoted(result.current)}. Fails on: "
        f"{quoted(result.rules.describe())}; a change in time counts when Mann-Whitney U gives p < {result.alpha:g}."
    ]
    if result.rules.allow_missing:
        said.append("Correct baseline candidates missing from this run are allowed (`--allow-missing`).")
    if result.left_out:
        said.append(f"{len(result.left_out)} problem(s) of the baseline are not in this run and are not gated.")
    return " ".join(said)


SECTIONS = (
    (REGRESSED, "Regressions"),
    (IMPROVED, "Improvements"),
    (NOT_COMPARABLE, "Not comparable"),
    (MISSING, "Missing"),
    (NEW, "New"),
)


def report(result: GateResult) -> str:
    """The markdown report: the verdict, counts, regressions and improvements in full, the rest folded."""
    verdict = "**PASS**" if result.passed else "**FAIL**: " + "; ".join(result.failures)
    lines = [
        "# Regression gate",
        "",
        f"{verdict}",
        "",
        _about(result, markdown_code),
        "",
        "| " + " | ".join(VERDICTS) + " | geomean ratio |",
        "|" + "---:|" * (len(VERDICTS) + 1),
        "| "
        + " | ".join(str(result.count(v)) for v in VERDICTS)
        + f" | {f'{result.geomean_ratio:.3f}x' if result.geomean_ratio else ''} |",
    ]
    for verdict_name, title in SECTIONS:
        rows = [c for c in result.comparisons if c.verdict == verdict_name]
        if rows:
            lines += ["", f"## {title}", "", *_table(rows)]
    unchanged = [c for c in result.comparisons if c.verdict == UNCHANGED]
    if unchanged:
        lines += [
            "",
            f"<details><summary>{len(unchanged)} unchanged</summary>",
            "",
            *_table(unchanged),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"


# The terminal's view of a section: the names, then the cells of `_shown` under these headers; the reason
# goes under the table as a note, and columns are left out highest `drop` first when the table does not fit.
TERMINAL_COLUMNS = (
    Column("problem"),
    Column("candidate"),
    Column("statuses"),
    Column("ratio", numeric=True),
    Column("p", numeric=True, drop=2),
    Column("reference moved", numeric=True, drop=1),
    Column("baseline ms", numeric=True, drop=4),
    Column("current ms", numeric=True, drop=3),
)


def print_report(result: GateResult, console: Any, where: str = "gate.md") -> None:
    """The report on `console`, fitted to its width: the verdict, the counts, then each section as a
    table with its reasons as notes under it; unchanged candidates are counted (`where`, the markdown
    report, lists them). Every name and reason is shown literally."""
    verdict = "PASS" if result.passed else "FAIL: " + "; ".join(result.failures)
    console.print(terminal_text(f"Regression gate: {verdict}", style="bold"))
    console.print(terminal_text(_about(result, str)))
    geomean = f"; geomean ratio {result.geomean_ratio:.3f}x" if result.geomean_ratio else ""
    console.print(terminal_text(", ".join(f"{result.count(v)} {v}" for v in VERDICTS) + geomean))
    for verdict_name, title in SECTIONS:
        rows = _in_order(c for c in result.comparisons if c.verdict == verdict_name)
        if not rows:
            continue
        every = [[c.problem, c.candidate, *(_shown(c)[column.header] for column in TERMINAL_COLUMNS[2:])] for c in rows]
        kept = [i for i in range(len(TERMINAL_COLUMNS)) if any(row[i] for row in every)]  # no column empty in every row
        columns, cells = [TERMINAL_COLUMNS[i] for i in kept], [[row[i] for i in kept] for row in every]
        styles = ["red" if c.regression else "" for c in rows]
        table, dropped = fitted_table(title, columns, cells, console.width, styles)
        reasons: dict[str, list[str]] = {}
        for c in rows:
            reasons.setdefault(c.reason, []).append(f"{c.problem}/{c.candidate}")
        console.print()
        console.print(table)
        console.print(notes("reasons", reasons))
        if dropped:
            console.print(left_out(dropped, console.width, where))
    if result.count(UNCHANGED):
        console.print()
        console.print(terminal_text(f"{result.count(UNCHANGED)} unchanged ({where} lists them)"))
