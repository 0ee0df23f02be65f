"""A record as one line of a records file, and back: the one codec the store and the Ray lanes use.

A line is the record's `to_dict` with its kind first: {"kind": "candidate", ...}.
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.records import RECORD_KINDS, SCHEMA_VERSION, from_dict, to_dict

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
    version = data.get("schema_version", 0)
    if version > SCHEMA_VERSION:
        raise LineError(f"has schema version {version}; this harness reads up to {SCHEMA_VERSION} (upgrade it)")
    kind = data.pop("kind", None)
    if kind not in RECORD_KINDS:
        raise LineError(f"has unknown record kind {kind!r}")
    return from_dict(RECORD_KINDS[kind], data)
