"""The records file's lines: one codec for every writer and reader, and the layouts of earlier versions."""
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from harness.core.records import RECORD_KINDS, SCHEMA_VERSION, CandidateRecord, Flag, ForwardOps, RunEnd, TimingStats, from_dict
from harness.core.schema import STEPS, LineError, decode_line, encode_line, migrate
from harness.core.store import read_records
from tests.test_units import sample_record

OLDER = Path(__file__).parent / "data" / "records"  # schema-N.jsonl: lines as version N wrote them (timings cut to 3 samples, their statistics taken over those)


def test_a_record_reads_back_from_its_line_with_its_kind_first():
    record = sample_record()
    line = encode_line(record)
    assert "\n" not in line and line.startswith('{"kind": "candidate", "identity": {"run_id": "r1"')
    assert decode_line(line) == record
    end = RunEnd(run_id="r1", finished_at="t", gpu_end={}, sm_clocks_mhz=(1980.0,))
    assert decode_line(encode_line(end)) == end


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"kind": "candidate", "run_id"', "is not JSON"),
        ('{"kind": "verdict", "schema_version": 4}', "unknown record kind 'verdict'"),
        ('{"kind": "candidate", "schema_version": 99}', "schema version 99; this harness reads up to"),
        ('{"schema_version": 99}', "schema version 99; this harness reads up to"),
        ('{"schema_version": 2}', "unknown record kind None"),
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


def _lines(version):
    return [json.loads(line) for line in (OLDER / f"schema-{version}.jsonl").read_text().splitlines()]


def _missing(data, cls, prefix=""):
    """Today's fields a line's data lacks, those of its parts and timings included."""
    hints = typing.get_type_hints(cls)
    missing = []
    for f in dataclasses.fields(cls):
        if f.name not in data:
            missing.append(prefix + f.name)
            continue
        kind = next((t for t in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(t)), None)
        if kind is not None and isinstance(data[f.name], dict):
            missing += _missing(data[f.name], kind, f"{prefix}{f.name}.")
    return missing


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_record_written_by_an_earlier_schema_reads_as_today(version):
    lines = _lines(version)
    assert {line["schema_version"] for line in lines} == {version}
    for line in lines:
        upgraded = migrate(json.loads(json.dumps(line)), version)
        assert upgraded["schema_version"] == SCHEMA_VERSION
        assert _missing(upgraded, RECORD_KINDS[line["kind"]]) == []  # every field today's layout has, not left to the defaults
        record = decode_line(json.dumps(line))
        assert record.schema_version == SCHEMA_VERSION and decode_line(encode_line(record)) == record
        if version >= 5:
            continue  # a version 5 line is in parts: test_a_version_5_reference_is_gathered_... reads it field by field
        if isinstance(record, CandidateRecord) and line["timing"]:  # the figures it stored are the figures it reads as
            stats = record.timing.stats
            assert (record.timing.speedup, stats.median_ms, stats.samples_ms) == (line["speedup"], line["timing"]["median_ms"], tuple(line["timing"]["samples_ms"]))
            assert stats.timing_mode == "eager"
        if isinstance(record, CandidateRecord):
            assert (record.identity.candidate, record.decision.status.value, record.decision.reason) == (line["candidate"], line["status"], line["reason"])
            assert record.checks.results[0].within_kernelbench is None
            assert record.integrity.flags == tuple(Flag(**f) for f in line.get("flags", []))


def test_an_earlier_schema_s_file_reads_through_the_store():
    for version in range(1, SCHEMA_VERSION):
        records = read_records(OLDER / f"schema-{version}.jsonl")
        assert [r.schema_version for r in records] == [SCHEMA_VERSION] * len(_lines(version))


def test_every_earlier_version_has_one_step_to_the_next():
    assert sorted(STEPS) == list(range(1, SCHEMA_VERSION))


def test_a_line_of_today_s_schema_is_left_as_it_is():
    data = json.loads(encode_line(sample_record()))
    assert migrate(json.loads(json.dumps(data)), SCHEMA_VERSION) == data


def test_a_version_newer_than_this_harness_is_refused_by_migrate():
    with pytest.raises(LineError, match=f"schema version {SCHEMA_VERSION + 1}; this harness reads up to {SCHEMA_VERSION}"):
        migrate(json.loads(encode_line(sample_record())), SCHEMA_VERSION + 1)


def test_a_timing_s_statistics_are_derived_from_its_samples_not_read_from_the_line():
    data = json.loads(encode_line(sample_record()))
    assert data["timing"]["stats"]["median_ms"] == 1.05
    data["timing"]["stats"]["median_ms"], data["timing"]["stats"]["rse"] = 99.0, 0.0
    timing = decode_line(json.dumps(data)).timing.stats
    assert (timing.median_ms, timing.min_ms, timing.q1_ms) == (1.05, 0.9, 0.975)
    assert timing.rse == TimingStats.from_samples([1.0, 1.2, 0.9, 1.1], timer="t", warmup_calls=0, stopped_by="budget").rse


def test_a_timing_s_line_still_carries_its_statistics_in_their_place():
    timing = TimingStats.from_samples([2.0, 1.0, 4.0], timer="cuda_events", warmup_calls=1, stopped_by="budget", overhead_ms=0.5, subtract=True)
    data = json.loads(encode_line(sample_record(timing=timing)))["timing"]["stats"]
    assert list(data)[:9] == ["samples_ms", "median_ms", "q1_ms", "q3_ms", "mean_ms", "std_ms", "min_ms", "rse", "timer"]
    assert (data["samples_ms"], data["median_ms"], data["min_ms"], data["mean_ms"]) == ([2.0, 1.0, 4.0], 1.5, 0.5, 5.5 / 3)  # over the samples less the overhead


def test_a_timing_s_statistics_cannot_be_given_apart_from_its_samples():
    with pytest.raises(TypeError):
        TimingStats(samples_ms=(1.0,), median_ms=5.0, timer="t", warmup_calls=0, stopped_by="budget")
    assert TimingStats(samples_ms=(1.0, 3.0), timer="t", warmup_calls=0, stopped_by="budget").median_ms == 2.0


def test_a_version_4_candidate_is_gathered_into_its_parts_field_by_field():
    (reference, honest, wrong) = _lines(4)
    record = decode_line(json.dumps(honest))
    assert record.identity.lane == "cuda:0" and record.checks.weights == "position" and record.checks.weight_mapping == (("lin.weight", "linear.weight"), ("lin.bias", "linear.bias"))
    assert record.integrity.sanitizer[0].outcome == "clean" and record.integrity.extension_calls == {"ext.forward": 9} and record.timing.sol_floor == "roofline"
    assert record.decision.notes == ("an output is rounding noise",) and record.decision.warnings == tuple(honest["warnings"])
    failed = decode_line(json.dumps(wrong))
    assert failed.decision.stricter.code == "tolerance" and failed.timing.stats is None and failed.timing.speedup is None
    assert decode_line(json.dumps(reference)).identity.run_id == "run4"  # its reference reads in parts too


def test_a_version_5_reference_is_gathered_into_its_parts_and_every_timing_names_its_mode():
    (reference, honest, needs_cuda) = _lines(5)
    record = decode_line(json.dumps(reference))
    assert (record.identity.problem, record.identity.device, record.identity.problem_path) == (reference["problem"], "cpu", reference["problem_path"])
    assert (record.outcome.ok, record.outcome.reason, record.outcome.other_size) == (True, reference["reason"], reference["other_size"])
    assert record.profile.forward_ops == from_dict(ForwardOps, reference["forward_ops"])
    assert record.provenance.wall_seconds == reference["wall_seconds"] and record.provenance.phase_seconds == reference["phase_seconds"]
    floor = record.timing.null_floor
    assert floor.paired.reference.samples_ms == tuple(reference["null_floor"]["paired"]["reference"]["samples_ms"])
    assert floor.paired.reference.timing_mode == reference["null_floor"]["paired"]["reference"]["mode"] == "eager"
    candidate = decode_line(json.dumps(honest))
    assert candidate.timing.stats.timing_mode == honest["timing"]["stats"]["mode"] and candidate.timing.paired.reference.timing_mode == "eager"
    assert decode_line(json.dumps(needs_cuda)).decision.status.value == "needs CUDA"


def test_a_record_in_parts_has_no_field_outside_them():
    data = json.loads(encode_line(sample_record()))
    assert list(data) == ["kind", "identity", "decision", "checks", "timing", "integrity", "provenance", "schema_version", "tool_version"]
