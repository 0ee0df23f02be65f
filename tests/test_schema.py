"""The records file's lines: one codec for every writer and reader, and the layouts of earlier versions."""
import json

import pytest

from harness.core.records import RunEnd
from harness.core.schema import LineError, decode_line, encode_line
from tests.test_units import sample_record


def test_a_record_reads_back_from_its_line_with_its_kind_first():
    record = sample_record()
    line = encode_line(record)
    assert "\n" not in line and line.startswith('{"kind": "candidate", "run_id": "r1"')
    assert decode_line(line) == record
    end = RunEnd(run_id="r1", finished_at="t", gpu_end={}, sm_clocks_mhz=(1980.0,))
    assert decode_line(encode_line(end)) == end


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"kind": "candidate", "run_id"', "is not JSON"),
        ('{"kind": "verdict", "schema_version": 4}', "unknown record kind 'verdict'"),
        ('{"kind": "candidate", "schema_version": 99}', "schema version 99; this harness reads up to"),
    ],
)
def test_a_line_that_holds_no_readable_record_is_refused_in_one_line(line, message):
    with pytest.raises(LineError, match=message) as caught:
        decode_line(line)
    assert "\n" not in str(caught.value)


def test_a_line_with_a_field_no_version_had_is_refused():
    data = json.loads(encode_line(sample_record()))
    data["verdict"] = "correct"
    with pytest.raises(ValueError, match="unknown fields"):
        decode_line(json.dumps(data))
