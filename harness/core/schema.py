"""A record as one line of a records file, and back: the one codec the store and the Ray lanes use.

A line is the record's `to_dict` with its kind first: {"kind": "candidate", ...}, and carries the
schema version it was written under. A line of an earlier version is upgraded on reading, one version
step at a time (`migrate`), so a run recorded then reads as a record of today.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

from harness.core.records import RECORD_KINDS, SCHEMA_VERSION, from_dict, to_dict

# A record's kind as versions 1-5 wrote it: a migration step matches these spellings, which stay frozen
# whatever the record kinds (RECORD_KINDS) or the roles (protocol.Role) are called later.
CANDIDATE_KIND = "candidate"  # as versions 1-5 wrote a candidate's kind
REFERENCE_KIND = "reference"  # as versions 1-5 wrote a reference's kind

KINDS: dict[type, str] = {cls: name for name, cls in RECORD_KINDS.items()}  # record class -> its kind in a records file


class LineError(ValueError):
    """A line that is no record this harness can read: its message follows the line's place."""


def encode_line(record: Any) -> str:
    """One record as one JSON line (no newline)."""
    return json.dumps({"kind": KINDS[type(record)], **to_dict(record)}, sort_keys=False)


def decode_line(line: str) -> Any:
    """The record one line of a records file holds. Raises LineError for text that is not JSON, a
    version newer than this harness or an unknown kind."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        raise LineError("is not JSON (a run killed mid-write leaves at most its last line so)") from None
    data = upgrade(data)
    kind = data.pop("kind", None)
    if kind not in RECORD_KINDS:
        raise LineError(f"has unknown record kind {kind!r}")
    return from_dict(RECORD_KINDS[kind], data)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A line's data in today's layout, from the schema version it says it was written under (a line
    with none is version 1's); raises LineError for a version newer than this harness's."""
    return migrate(data, data.get("schema_version", 1))


def migrate(data: dict[str, Any], version: int) -> dict[str, Any]:
    """A line's data (its kind included) written under `version`, upgraded in place to SCHEMA_VERSION's
    layout: each step from one version to the next in turn. Raises LineError for a version newer than this harness's."""
    if version > SCHEMA_VERSION:
        raise LineError(f"has schema version {version}; this harness reads up to {SCHEMA_VERSION} (upgrade it)")
    for step in range(max(version, 1), SCHEMA_VERSION):
        data = STEPS[step](data)
        data["schema_version"] = step + 1
    return data


def _fill(data: Any, added: dict[str, Any]) -> None:
    """The fields a version added, at the values that mean "not measured", where a line lacks them."""
    if isinstance(data, dict):
        for name, value in added.items():
            data.setdefault(name, value)


def _timings(data: dict[str, Any]) -> Iterator[Any]:
    """Every timing (TimingStats) a candidate or reference line holds, wherever it is nested."""
    pairs = [data.get("paired")] + [b.get("paired") for b in data.get("baselines") or ()]
    if data.get("null_floor"):
        pairs.append(data["null_floor"].get("paired"))
    yield data.get("timing")
    yield from (b.get("timing") for b in data.get("baselines") or ())
    yield from (p.get("reference") for p in pairs if p)


def _to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the timing protocol (mode, sync, overhead, flush, clock), profiles, baselines,
    the speed-of-light floor and the run end record."""
    if data.get("kind") == CANDIDATE_KIND:
        _fill(data, {"baseline_ms": {}, "speedups": {}, "sol_ms": None, "sol_fraction": None, "profile": None})
    if data.get("kind") == REFERENCE_KIND:
        _fill(data, {"baselines": [], "speed_of_light": None, "profile": None, "timing_reused_from": ""})
    for timing in _timings(data):
        protocol: dict[str, Any] = {
            "mode": "eager",
            "sync": "stream",
            "sync_reason": "",
            "fallback": "",
            "overhead_ms": 0.0,
            "overhead_subtracted": False,
        }
        _fill(timing, {**protocol, "input_sets": 1, "flush_bytes": 0, "sm_clock_mhz": None})
    return data


def _to_3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added paired rounds (a candidate's and each baseline's) and the null floor; lines of
    version 2 may lack what was added while it was current: lanes, training parity, the other-size
    trial, the declarations, the data plane, own-kernel shares and clock-event reasons."""
    if data.get("kind") == CANDIDATE_KIND:
        _fill(data, {"paired": None, "custom_kernel_share": None, "lane": "", "gradients": ""})
    if data.get("kind") == REFERENCE_KIND:
        _fill(
            data,
            {
                "null_floor": None,
                "other_size": {},
                "other_size_note": "",
                "lane": "",
                "declared": {},
                "data_plane": "",
                "peak_bytes": 0,
                "notes": [],
            },
        )
        for baseline in data["baselines"]:
            _fill(baseline, {"paired": None})
    for timing in _timings(data):
        _fill(timing, {"clock_event_reasons": ""})
    _fill(data.get("profile"), {"busy_after_return": 0})
    return data


def _to_4(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 added integrity flags, sanitizer runs and the persisting-L2 reset; lines of version 3
    may lack the counts of extension calls; since then: the stricter check, weight pairing, the
    observed ATen operators and the reference's timing mode."""
    if data.get("kind") == CANDIDATE_KIND:
        found: dict[str, Any] = {
            "flags": [],
            "sanitizer": [],
            "weight_mapping": [],
            "stricter": None,
            "weights": "",
            "forward_ops": None,
        }
        _fill(data, {**found, "sol_floor": "", "notes": [], "extension_calls": {}, "timed_extension_calls": {}})
        for check in [*data.get("checks", []), data.get("same_seed")]:
            _fill(check, {"within_kernelbench": None, "note": ""})
    if data.get("kind") == REFERENCE_KIND:
        _fill(
            data,
            {
                "forward_ops": None,
                "profile_reused_from": "",
                "phase_seconds": {},
                "timing_mode": "",
                "timing_mode_reason": "",
            },
        )
    for timing in _timings(data):
        _fill(timing, {"l2_reset": False, "l2_persisting_found": 0})
    return data


# Version 5's parts of a candidate record, and the version 4 fields each gathers (renamed where the part
# names them otherwise: a candidate's `checks` list is checks.results, its `timing` timing.stats).
PARTS: dict[str, dict[str, str]] = {
    "identity": {
        name: name
        for name in (
            "run_id",
            "problem",
            "problem_hash",
            "candidate",
            "candidate_path",
            "candidate_hash",
            "device",
            "lane",
        )
    },
    "decision": {name: name for name in ("status", "reason", "stricter", "warnings", "notes")},
    "checks": {"checks": "results", **{name: name for name in ("same_seed", "weights", "weight_mapping", "gradients")}},
    "timing": {
        "timing": "stats",
        **{
            name: name
            for name in (
                "reference_ms",
                "speedup",
                "paired",
                "baseline_ms",
                "speedups",
                "sol_ms",
                "sol_fraction",
                "sol_floor",
            )
        },
    },
    "integrity": {
        name: name
        for name in (
            "flags",
            "sanitizer",
            "profile",
            "custom_kernel_share",
            "forward_ops",
            "extension_calls",
            "timed_extension_calls",
        )
    },
    "provenance": {name: name for name in ("builds", "phase_seconds", "wall_seconds", "log_path", "finished_at")},
}


def _to_5(data: dict[str, Any]) -> dict[str, Any]:
    """Version 5 gave a candidate record its parts (identity, decision, checks, timing, integrity,
    provenance) in place of 40 flat fields; the other kinds are unchanged. A field the line lacks
    stays out of its part, which then takes its default."""
    if data.get("kind") != CANDIDATE_KIND:
        return data
    nested: dict[str, Any] = {key: data.pop(key) for key in ("kind",) if key in data}
    for part, fields in PARTS.items():
        nested[part] = {new: data.pop(old) for old, new in fields.items() if old in data}
    nested.update(data)  # the line's version fields (and anything unknown, which reading then refuses)
    return nested


# Version 6's parts of a reference record, and the version 5 fields each gathers (renamed where the part
# names them otherwise)
REFERENCE_PARTS: dict[str, dict[str, str]] = {
    "identity": {
        name: name for name in ("run_id", "problem", "problem_hash", "problem_path", "device", "device_name", "lane")
    },
    "outcome": {
        name: name
        for name in ("ok", "reason", "notes", "declared", "other_size", "other_size_note", "data_plane", "peak_bytes")
    },
    "profile": {name: name for name in ("profile", "forward_ops", "speed_of_light", "profile_reused_from")},
    "timing": {
        "timing": "stats",
        **{
            name: name
            for name in ("baselines", "null_floor", "timing_mode", "timing_mode_reason", "timing_reused_from")
        },
    },
    "provenance": {name: name for name in ("wall_seconds", "phase_seconds", "finished_at")},
}


def _v5_timings(data: dict[str, Any]) -> Iterator[Any]:
    """Every timing (TimingStats) a version 5 line holds: a candidate's in its timing part, a
    reference's where version 4 kept them."""
    if data.get("kind") != CANDIDATE_KIND:
        yield from _timings(data)
        return
    part = data.get("timing") or {}
    yield part.get("stats")
    yield (part.get("paired") or {}).get("reference")


def _to_6(data: dict[str, Any]) -> dict[str, Any]:
    """Version 6 named a timing's mode `timing_mode`, and gave a reference record its parts
    (identity, outcome, profile, timing, provenance) in place of 30 flat fields. A field the line
    lacks stays out of its part, which then takes its default."""
    for timing in _v5_timings(data):
        if isinstance(timing, dict) and "mode" in timing:
            timing["timing_mode"] = timing.pop("mode")
    if data.get("kind") != REFERENCE_KIND:
        return data
    nested: dict[str, Any] = {key: data.pop(key) for key in ("kind",) if key in data}
    for part, fields in REFERENCE_PARTS.items():
        nested[part] = {new: data.pop(old) for old, new in fields.items() if old in data}
    _fill(nested["provenance"], {"builds": [], "log_path": ""})  # a reference's provenance: no builds, no log named
    nested.update(data)  # the line's version fields (and anything unknown, which reading then refuses)
    return nested


def _to_7(data: dict[str, Any]) -> dict[str, Any]:
    """Version 7 recorded how a candidate's build ahead ended (provenance.ahead, which a reference's
    provenance has too, always none), and a cached build found changed (provenance.builds[].tampered);
    an older line's run said nothing of either: no build pool, nothing found changed."""
    if data.get("kind") in (CANDIDATE_KIND, REFERENCE_KIND):
        provenance = data.setdefault("provenance", {})
        _fill(provenance, {"ahead": {"outcome": "none", "detail": "", "seconds": 0.0}})
        for build in provenance.get("builds") or []:
            _fill(build, {"tampered": ""})
    return data


def _v7_timings(data: dict[str, Any]) -> Iterator[Any]:
    """Every timing (TimingStats) a version 6, 7 or 8 line holds, in its timing part: the stats, the paired
    rounds' reference side, and a reference's baselines and null floor."""
    part: dict[str, Any] = data.get("timing") or {}
    yield part.get("stats")
    pairs: list[Any] = [part.get("paired"), (part.get("null_floor") or {}).get("paired")]
    for baseline in part.get("baselines") or ():
        yield baseline.get("timing")
        pairs.append(baseline.get("paired"))
    yield from ((pair or {}).get("reference") for pair in pairs)


def _to_8(data: dict[str, Any]) -> dict[str, Any]:
    """Version 8 recorded the hold that timed regions are queued behind (held_ms, host_waits); an older
    line's timings were not held."""
    for timing in _v7_timings(data):
        _fill(timing, {"held_ms": 0.0, "host_waits": 0})
    return data


def _to_9(data: dict[str, Any]) -> dict[str, Any]:
    """Version 9 says when the holding ended (hold_ended); an older line's hold is not known to have ended."""
    for timing in _v7_timings(data):
        _fill(timing, {"hold_ended": False})
    return data


def _to_10(data: dict[str, Any]) -> dict[str, Any]:
    """Version 10 says whether a build ahead was given the precompiled torch/extension.h; an older line's was not
    (there was none)."""
    if data.get("kind") in (CANDIDATE_KIND, REFERENCE_KIND):
        _fill((data.get("provenance") or {}).get("ahead"), {"header": False})
    return data


# version -> the step to the next
STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _to_2,
    2: _to_3,
    3: _to_4,
    4: _to_5,
    5: _to_6,
    6: _to_7,
    7: _to_8,
    8: _to_9,
    9: _to_10,
}
