"""Pure unit tests: records, config layering, the result channel, problem lookup."""
import json
import math

import pytest

from harness.core import config
from harness.core.channel import ChannelReader, ChannelWriter, ForgedMessage, new_key
from harness.core.config import load_config
from harness.core.errors import UserError, flat, one_line
from harness.core.records import CandidateRecord, CheckResult, ExtensionBuild, TimingStats, from_dict, to_dict
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.sources.problem import resolve_problem
from tests.records import candidate_record


def sample_record(**changes):
    fields = dict(
        run_id="r1", problem="p", problem_hash="h", candidate="c", candidate_path="c.py", candidate_hash="ch",
        device="cpu", status=Status.CORRECT, reason="ok",
        checks=(CheckResult("trial 1 (train)", True, "ok", 1e-6, 1e-5, 0.0),),
        same_seed=CheckResult("same-seed construction (eval)", False, "differs", 0.5, math.inf, 1.0),
        timing=TimingStats.from_samples([1.0, 1.2, 0.9, 1.1], timer="perf_counter", warmup_calls=3, stopped_by="budget"),
        reference_ms=2.0, speedup=2.0 / 1.05,
        builds=(ExtensionBuild("ext", "abc", True, 0.5),), phase_seconds={"load": 1.5},
    )
    fields.update(changes)
    return candidate_record(**fields)


def test_record_round_trips_through_json_including_infinity():
    record = sample_record()
    assert from_dict(CandidateRecord, json.loads(json.dumps(to_dict(record)))) == record


def test_record_refuses_multiline_reason_and_speedup_on_failure():
    with pytest.raises(ValueError):
        sample_record(reason="two\nlines")
    with pytest.raises(ValueError):
        sample_record(status=Status.INCORRECT)


def test_a_multiline_exception_is_one_line_with_its_line_breaks_escaped_not_cut():
    reason = one_line(RuntimeError("shape mismatch:\n  expected (2, 3)\r\n  got (3, 2)\u2028end\n"))
    assert reason == "RuntimeError: shape mismatch:\\n  expected (2, 3)\\r\\n  got (3, 2)\\u2028end"
    assert sample_record(status=Status.RUNTIME_ERROR, speedup=None, reason=flat(reason)).decision.reason == flat(reason)
    assert one_line(ValueError("\n \n")) == "ValueError" and len(one_line(ValueError("x\n" * 500), 100)) == 100


def test_timing_stats_summarise_samples():
    stats = TimingStats.from_samples([1.0, 2.0, 3.0, 4.0, 5.0], timer="cuda_events", warmup_calls=1, stopped_by="target_rse")
    assert stats.median_ms == 3.0 and stats.min_ms == 1.0 and stats.iqr_ms == 2.0 and stats.n == 5
    with pytest.raises(ValueError):
        TimingStats.from_samples([], timer="x", warmup_calls=0, stopped_by="budget")


def test_store_writes_each_record_and_refuses_newer_schema(tmp_path):
    store = RunStore(tmp_path, "run")
    store.append(sample_record())
    store.append(sample_record(candidate="d"))
    assert [r.identity.candidate for r in read_records(store.dir)] == ["c", "d"]
    line = json.loads(store.records_path.read_text().splitlines()[0])
    line["schema_version"] = 99
    store.records_path.write_text(json.dumps(line) + "\n")
    with pytest.raises(UserError, match="schema version 99"):
        read_records(store.dir)


def test_config_layers_file_then_overrides(tmp_path):
    extra = tmp_path / "c.yaml"
    extra.write_text("check:\n  trials: 7\ntimeouts:\n  load: 5\n")
    cfg = load_config(extra, ["timeouts.load=9", "check.tolerances.float32.atol=1e-3"])
    assert cfg.check.trials == 7 and cfg.timeouts.load == 9
    assert cfg.check.tolerances["float32"].atol == 1e-3 and cfg.check.tolerances["float32"].rtol == 1e-4
    assert cfg.check.tolerances["float16"].atol == 1e-2


@pytest.mark.parametrize(
    "override, message",
    [
        ("check.trails=3", "unknown config key 'check.trails' (valid keys here: allow_tf32, gradient_tolerance_factor, gradients, guard_bands, input_distributions"),
        ("check.trials=three", "must be an integer"),
        ("check.trials=0", "at least 1"),
        ("device=tpu", "device must be auto, cuda or cpu"),
        ("no_equals_sign", "--set expects key=value"),
        ("executor=slurm", "executor must be local or ray, got 'slurm'"),
        ("check.input_distributions=[uniform]", "check.input_distributions must be a non-empty list of ['given', 'normal', 'signed', 'shifted'], got ['uniform']"),
        ("check.modes=[test]", "check.modes must be a non-empty list of ['train', 'eval'], got ['test']"),
        ("check.gradients=warn", "check.gradients must be flag, fail or off, got 'warn'"),
        ("check.weights=mine", "check.weights must be transplant or seed, got 'mine'"),
        ("flags.fallback=warn", "flags.fallback must be fail, flag or ignore, got 'warn'"),
        ("timing.mode=fast", "timing.mode must be one of ['eager', 'graph', 'auto'], got 'fast'"),
        ("timing.sync=host", "timing.sync must be one of ['auto', 'stream', 'device'], got 'host'"),
        ("timing.quiet=loud", "timing.quiet must be one of ['pause', 'pin', 'both', 'off'], got 'loud'"),
        ("timing.null_candidate=maybe", "timing.null_candidate must be auto, on or off, got 'maybe'"),
        ("baselines.compile_modes=[fast]", "baselines.compile_modes: unknown mode 'fast' (valid: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)"),
        ("sanitizer.enabled=maybe", "sanitizer.enabled must be auto, on or off, got 'maybe'"),
        ("sanitizer.tools=[leakcheck]", "sanitizer.tools: unknown tool 'leakcheck' (valid: memcheck, racecheck, initcheck, synccheck)"),
        ("builds.ahead=maybe", "builds.ahead must be auto, always or never, got 'maybe'"),
        ("workers.prestart=maybe", "workers.prestart must be auto, always or never, got 'maybe'"),
        ("workers.lanes_per_gpu=0", "workers.lanes_per_gpu must be 1 or more, got 0"),
    ],
)
def test_bad_config_is_a_clear_user_error(override, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        load_config(overrides=[override])


@pytest.mark.parametrize(
    "key, vocabulary",
    [
        ("executor", config.ExecutorKind), ("device", config.Device), ("check.gradients", config.GradientPolicy), ("check.weights", config.WeightSource),
        ("flags.fallback", config.Policy), ("timing.mode", config.TimingMode), ("timing.sync", config.SyncMode), ("timing.quiet", config.QuietMode),
        ("timing.null_candidate", config.Switch), ("sanitizer.enabled", config.Switch), ("builds.ahead", config.Ahead), ("workers.prestart", config.Ahead),
    ],
)
def test_every_word_of_a_config_choices_vocabulary_is_accepted_as_itself(key, vocabulary):
    for word in vocabulary.words():
        section, _, name = key.rpartition(".")
        cfg = load_config(overrides=[f"{key}={word}"])
        value = getattr(getattr(cfg, section) if section else cfg, name)
        assert value == word and value == vocabulary(word) and f"{vocabulary(word)}" == word and hash(vocabulary(word)) == hash(word)


@pytest.mark.parametrize("key, vocabulary", [("check.input_distributions", config.Distribution), ("check.modes", config.ModuleMode), ("baselines.compile_modes", config.CompileMode), ("sanitizer.tools", config.SanitizerTool)])
def test_every_word_of_a_config_lists_vocabulary_is_accepted(key, vocabulary):
    section, _, name = key.rpartition(".")
    assert getattr(getattr(load_config(overrides=[f"{key}=[{', '.join(vocabulary.words())}]"]), section), name) == vocabulary.words()


def test_config_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("check: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(UserError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def channel_pair():
    import os

    key = new_key()
    read_fd, write_fd = os.pipe()
    return ChannelWriter(write_fd, key), ChannelReader(key), read_fd


def test_channel_delivers_authenticated_messages_in_order():
    import os

    writer, reader, read_fd = channel_pair()
    writer.send({"type": "phase", "phase": "load"})
    writer.send({"type": "done"})
    assert reader.feed(os.read(read_fd, 65536)) == [{"type": "phase", "phase": "load"}, {"type": "done"}]
    reader.finish()


@pytest.mark.parametrize(
    "forged",
    [
        b'{"seq": 0, "body": "{\\"type\\": \\"done\\"}", "mac": "00"}\n',
        b"CORRECT speedup=1000x\n",
    ],
)
def test_channel_rejects_lines_it_did_not_write(forged):
    _, reader, _ = channel_pair()
    with pytest.raises(ForgedMessage):
        reader.feed(forged)


def test_channel_rejects_replayed_message():
    import os

    writer, reader, read_fd = channel_pair()
    writer.send({"type": "done"})
    line = os.read(read_fd, 65536)
    reader.feed(line)
    with pytest.raises(ForgedMessage, match="replayed"):
        reader.feed(line)


def test_channel_rejects_trailing_partial_line():
    _, reader, _ = channel_pair()
    reader.feed(b'{"seq": 0')
    with pytest.raises(ForgedMessage):
        reader.finish()


def test_problem_found_by_name_prefix_suffix_and_path():
    cfg = load_config()
    problems = cfg.path(cfg.problems_dir)
    assert resolve_problem("37_Matmul_Swish_Sum_GroupNorm", problems).name == "37_Matmul_Swish_Sum_GroupNorm"
    assert resolve_problem("37_", problems).level == "level2"
    assert resolve_problem("Gemm_Scale", problems).name == "39_Gemm_Scale_BatchNorm"
    path = problems / "level0" / "1_Scale_Bias_ReLU.py"
    assert resolve_problem(str(path), problems).path == path.resolve()


def test_unknown_or_ambiguous_problem_lists_matches():
    cfg = load_config()
    problems = cfg.path(cfg.problems_dir)
    with pytest.raises(UserError, match="ambiguous: it matches .*37_Matmul.*39_Gemm"):
        resolve_problem("3", problems)
    with pytest.raises(UserError, match="close matches: 37_Matmul_Swish_Sum_GroupNorm"):
        resolve_problem("37_Matmul_Swish_Sum_GroupNrom", problems)


def test_status_taxonomy_is_documented_and_skips_do_not_fail():
    assert all(s.description for s in Status)
    assert not Status.NEEDS_CUDA.is_failure and not Status.CORRECT.is_failure
    assert Status.INCORRECT.is_failure and Status.TIMEOUT.is_failure


def test_progress_line_tells_the_whole_run_failures_builds_and_time_left(capsys):
    from harness.views.progress import Progress

    def record(name, status):
        return candidate_record(run_id="r", problem="p", problem_hash="h", candidate=name, candidate_path=f"{name}.py",
                               candidate_hash="x", device="cpu", status=status, reason="why")

    with Progress(total=4, builds=lambda: (3, 4)) as progress:
        progress.problem("p", 4)
        progress.finished(record("a", Status.CORRECT))
        progress.finished(record("b", Status.INCORRECT))
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("  [2/4] b: incorrect - why (run 2/4, 2 queued, 1 failed, builds 3/4, ETA ")


def test_closed_vocabularies_are_stored_and_shown_as_their_words():
    from harness.core.records import SanitizerOutcome, SanitizerResult
    from harness.judge.lint import LintCheck
    from harness.views.gate import GateOutcome, Regression

    record = sample_record(sanitizer=(SanitizerResult("memcheck", SanitizerOutcome.CLEAN, "0 errors", 1.5), SanitizerResult("racecheck", "errors", "a race")))
    data = to_dict(record)
    assert [run["outcome"] for run in data["integrity"]["sanitizer"]] == ["clean", "errors"] and json.loads(json.dumps(data)) == data
    back = from_dict(CandidateRecord, json.loads(json.dumps(data)))
    assert back == record and [run.outcome for run in back.integrity.sanitizer] == [SanitizerOutcome.CLEAN, SanitizerOutcome.ERRORS]
    assert f"{GateOutcome.NOT_COMPARABLE}|{Regression.TIME}" == "not comparable|time" and " | ".join(GateOutcome).startswith("regressed | improved")
    check = LintCheck(**json.loads(json.dumps({"name": "runs", "verdict": "fail", "detail": "x"})))
    assert check.verdict == "fail" and json.dumps(check.__dict__) == '{"name": "runs", "verdict": "fail", "detail": "x"}'
    with pytest.raises(ValueError):
        SanitizerResult("memcheck", "dirty", "")


def test_overhead_is_taken_off_the_samples_only_when_subtracted():
    kept = TimingStats.from_samples([1.0, 2.0, 3.0], timer="perf_counter", warmup_calls=0, stopped_by="budget", overhead_ms=1.5)
    taken = TimingStats.from_samples([1.0, 2.0, 3.0], timer="perf_counter", warmup_calls=0, stopped_by="budget", overhead_ms=1.5, subtract=True)
    assert kept.corrected_samples() == [1.0, 2.0, 3.0] and taken.corrected_samples() == [0.0, 0.5, 1.5]
    assert taken.corrected_samples(0.5) == [0.5, 1.5, 2.5] and taken.median_ms == 0.5


def test_the_gates_protocol_keys_are_config_fields():
    import dataclasses

    from harness.core.config import TIMING_PROTOCOL_FIELDS, CheckConfig, TimingConfig
    from harness.views.gate import PROTOCOL_KEYS

    assert set(TIMING_PROTOCOL_FIELDS) <= {f.name for f in dataclasses.fields(TimingConfig)} and "allow_tf32" in {f.name for f in dataclasses.fields(CheckConfig)}
    assert PROTOCOL_KEYS == ("timing.mode", "timing.sync", "timing.flush_l2", "timing.subtract_overhead", "timing.hold", "timing.cpu_threads", "check.allow_tf32")


def test_the_latest_record_per_candidate_wins_in_the_place_first_seen():
    from harness.core.records import latest_per_candidate

    first, other, again = sample_record(reason="first"), sample_record(candidate="d", reason="other"), sample_record(reason="again")
    latest = latest_per_candidate([first, other, again])
    assert list(latest) == [("p", "c"), ("p", "d")] and [r.decision.reason for r in latest.values()] == ["again", "other"]


def test_a_triton_compilation_error_is_a_build_failure_with_its_first_line_whatever_the_phase():
    from harness.device.failures import classify

    CompilationError = type("CompilationError", (Exception,), {"__module__": "triton.compiler.errors"})
    UnsupportedLanguageConstruct = type("UnsupportedLanguageConstruct", (CompilationError,), {"__module__": "triton.compiler.errors"})
    for error in (CompilationError("at 12:8:\n    acc += tl.dot(a, b)\n    ^\nIncompatible shapes"), UnsupportedLanguageConstruct("at 3:4: unsupported")):
        failure = classify(error, Status.RUNTIME_ERROR)
        assert failure.status is Status.BUILD_FAILED and failure.reason.startswith(f"Triton {type(error).__name__}: at ")
    impostor = type("CompilationError", (Exception,), {"__module__": "mylib"})("at 1:1")  # not Triton's: a runtime error
    assert classify(impostor, Status.RUNTIME_ERROR).status is Status.RUNTIME_ERROR
