"""Candidate and reference records for tests, written as their fields: `candidate_record(status=...,
speedup=...)` puts each field into its part (harness.core.schema.PARTS: version 4's flat name -> the
part that holds it), `reference_record(ok=..., timing=...)` likewise (REFERENCE_PARTS: version 5's),
so a fixture names only what it is about."""

from __future__ import annotations

import typing
from typing import Any

from harness.core.records import CandidateRecord, ReferenceRecord
from harness.core.schema import PARTS, REFERENCE_PARTS

IDENTITY = dict(run_id="r", problem="p", problem_hash="h", candidate="c", candidate_path="c.py", candidate_hash="ch", device="cpu")
PART_TYPES = typing.get_type_hints(CandidateRecord)  # a part's name -> its class
REFERENCE_PART_TYPES = typing.get_type_hints(ReferenceRecord)


def candidate_record(**fields: Any) -> CandidateRecord:
    """A candidate record from flat fields (a candidate's `checks` list and `timing` stats by their
    version 4 names); the identity's fields default to IDENTITY's, the reason to "ok"."""
    fields = {**IDENTITY, "reason": "ok", **fields}
    parts: dict[str, Any] = {}
    for part, names in PARTS.items():
        given = {new: fields.pop(old) for old, new in names.items() if old in fields}
        if given or part in ("identity", "decision"):
            parts[part] = PART_TYPES[part](**given)
    return CandidateRecord(**parts, **fields)  # what is left: the version fields, or a typo CandidateRecord refuses


def reference_record(**fields: Any) -> ReferenceRecord:
    """A reference record from flat fields (its `timing` stats by their version 5 name); the identity
    defaults to IDENTITY's problem and device, the outcome to ok."""
    fields = {"run_id": "r", "problem": "p", "problem_hash": "h", "problem_path": "p.py", "device": "cpu",
              "device_name": "cpu", "ok": True, "reason": "ok", **fields}
    parts: dict[str, Any] = {}
    for part, names in REFERENCE_PARTS.items():
        given = {new: fields.pop(old) for old, new in names.items() if old in fields}
        if given:
            parts[part] = REFERENCE_PART_TYPES[part](**given)
    return ReferenceRecord(**parts, **fields)
