"""Integrity flags: evidence to findings (harness/core/integrity.py), policies to verdicts (harness/core/flags.py),
and a problem's own policies. Each finding is shown with an honest case it must leave alone."""
from pathlib import Path

import pytest

from harness.core.config import load_config
from harness.core.errors import UserError
from harness.core.flags import column, decide
from harness.core.integrity import extension_use, own_kernels, persisting_l2, side_work
from harness.core.protocol import Threads
from harness.core.records import CallProfile, Flag, KernelTime, TimingStats
from harness.core.status import Code, Status
from harness.parent.verdict import VerdictRules
from harness.sources.problem import declared_settings

ROOT = Path(__file__).resolve().parent.parent

GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min_scalar_kernel_cuda>"
POLICIES = load_config().flags.policies("flag")


def profile(*kernels, streams=1, after_return=0, busy=0):
    times = tuple(KernelTime(name, count, ms) for name, count, ms in kernels)
    return CallProfile(kernel_ms=sum(k.total_ms for k in times), span_ms=1.0, launches=sum(k.count for k in times), streams=streams,
                       after_return=after_return, kernels=times, busy_after_return=busy)


REFERENCE = profile((GEMM, 1, 0.9), (RELU, 1, 0.05))


def codes(found):
    return [code.value for code, _ in found]


def test_a_fused_epilogue_that_replaces_the_references_elementwise_kernel_is_not_flagged():
    share, found = own_kernels(profile((GEMM, 1, 0.9), ("relu_inplace_kernel(float*, long)", 1, 0.04)), REFERENCE, {"relu_inplace_kernel"}, 0.002)
    assert share == pytest.approx(0.04 / 0.94) and found == []


def test_a_kernel_of_its_own_beside_every_reference_kernel_wraps_the_reference():
    share, found = own_kernels(profile((GEMM, 1, 0.9), (RELU, 1, 0.05), ("noop_kernel()", 1, 0.02)), REFERENCE, {"noop_kernel"}, 0.002)
    assert codes(found) == ["wraps-reference"] and share > 0.02
    # the reference's kernel ran fewer times than in the reference: something of it was replaced
    twice = profile((GEMM, 1, 0.9), (RELU, 2, 0.1))
    _, found = own_kernels(profile((GEMM, 1, 0.9), (RELU, 1, 0.05), ("noop_kernel()", 1, 0.02)), twice, {"noop_kernel"}, 0.002)
    assert found == []


def test_no_kernel_of_its_own_and_a_sliver_of_the_time_are_told_apart():
    _, found = own_kernels(profile((GEMM, 1, 0.9), (RELU, 1, 0.05)), REFERENCE, {"relu_inplace_kernel"}, 0.002)
    assert codes(found) == ["no-custom-kernel"] and "none of its own kernels (relu_inplace_kernel) ran" in found[0][1]
    _, found = own_kernels(profile((GEMM, 1, 0.9), ("tiny_kernel()", 1, 0.0009)), REFERENCE, {"tiny_kernel"}, 0.002)
    assert codes(found) == ["own-share-low"]
    assert own_kernels(None, REFERENCE, {"k"}, 0.002) == (None, [])


def test_a_call_that_runs_no_kernel_at_all_where_the_reference_computes_is_no_custom_kernel():
    # a model that returns an answer it keeps (CUDA-L1's kernel for KernelBench level 2 problem 66): nothing ran
    share, found = own_kernels(profile(), REFERENCE, set(), 0.002)
    assert share == 0.0 and codes(found) == ["no-custom-kernel"]
    assert "ran no kernel at all, where the reference's ran 2" in found[0][1]
    # a reference that runs nothing either (a view) leaves nothing to compare
    assert own_kernels(profile(), profile(), set(), 0.002) == (None, [])


def test_on_the_cpu_extension_calls_are_the_evidence():
    assert extension_use({"ext.f": 3}) == []
    assert codes(extension_use({"ext.f": 0})) == ["no-custom-kernel"]
    assert "builds no extension" in extension_use({})[0][1]
    assert extension_use(None) == []  # no report: no evidence either way


def test_work_outside_the_calling_stream_is_a_side_stream_flag():
    assert side_work(profile((GEMM, 1, 0.9)), None) == []
    (found,) = side_work(profile((GEMM, 1, 0.9), streams=2, busy=1), None)
    assert found[0] is Code.SIDE_STREAM and "2 streams" in found[1] and "still running" in found[1]
    (found,) = side_work(None, Threads("call_0", ("t",), 1))
    assert "thread(s) running" in found[1]


def test_a_persisting_l2_limit_found_while_timing_is_tamper_suspect():
    clean = TimingStats.from_samples([1.0, 1.0], timer="cuda_events", warmup_calls=1, stopped_by="budget", l2_reset=True)
    assert persisting_l2(clean) == []
    (found,) = persisting_l2(TimingStats.from_samples([1.0], timer="cuda_events", warmup_calls=1, stopped_by="budget", l2_reset=True, l2_persisting_found=32768000))
    assert found[0] is Code.TAMPER_SUSPECT and "31.2 MiB" in found[1]


def test_policies_fail_flag_or_ignore_and_a_failed_verdict_keeps_its_status():
    found = [(Code.SIDE_STREAM, "two streams"), (Code.NO_CUSTOM_KERNEL, "torch only"), (Code.OWN_SHARE_LOW, "0.1%")]
    status, reason, flags = decide(Status.CORRECT, "matched", found, {**POLICIES, "own_share_low": "ignore"})
    assert status is Status.NO_CUSTOM_KERNEL and reason == "no-custom-kernel: torch only"
    assert flags == (Flag("side-stream", "flag", "two streams"), Flag("no-custom-kernel", "fail", "torch only"))
    status, reason, _ = decide(Status.INCORRECT, "trial 1: differs", found, POLICIES)
    assert (status, reason) == (Status.INCORRECT, "trial 1: differs")
    status, _, _ = decide(Status.CORRECT, "matched", [(Code.FALLBACK, "try/except")], {**POLICIES, "fallback": "fail"})
    assert status is Status.FLAGGED  # a code without a status of its own


def test_the_column_names_each_code_once_and_marks_failing_ones():
    flags = [Flag("side-stream", "flag", "a"), Flag("side-stream", "flag", "b"), Flag("no-custom-kernel", "fail", "c")]
    assert column(flags) == "side-stream, no-custom-kernel!"
    assert column([]) == ""


def test_a_problem_declares_its_own_flag_policies(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text('HARNESS_FLAGS = {"own-share-low": "fail", "side-stream": "ignore"}\n')
    cfg = load_config().for_problem(declared_settings(problem))
    assert cfg.flags.own_share_low == "fail" and cfg.flags.side_stream == "ignore" and cfg.flags.no_custom_kernel == "fail"
    problem.write_text('HARNESS_FLAGS = {"no-such-flag": "fail"}\n')
    with pytest.raises(UserError, match="HARNESS_FLAGS must map flag codes"):
        declared_settings(problem)
    with pytest.raises(UserError, match="flags.side_stream must be fail, flag or ignore"):
        load_config(overrides=["flags.side_stream=maybe"])


def test_findings_of_one_code_are_one_flag_with_their_evidence_joined():
    from harness.core.flags import decide
    from harness.core.status import Code, Status

    found = [(Code.TAMPER_SUSPECT, "imports subprocess"), (Code.FALLBACK, "catches"), (Code.TAMPER_SUSPECT, "imports signal")]
    status, _, flags = decide(Status.CORRECT, "ok", found, {"tamper_suspect": "flag", "fallback": "flag"})
    assert status is Status.CORRECT
    assert [(f.code, f.reason) for f in flags] == [("tamper-suspect", "imports subprocess; imports signal"), ("fallback", "catches")]


def test_a_problem_that_declares_tf32_lifts_the_float32_rule_on_both_sides(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("HARNESS_ALLOW_TF32 = True\n")
    cfg = load_config().for_problem(declared_settings(problem))
    assert cfg.check.allow_tf32 is True  # the judge and the workers run TF32, and below-float32 is not raised
    assert VerdictRules.of(cfg).allow_tf32 is True
    assert load_config().for_problem({}).check.allow_tf32 is False and load_config().flags.below_float32 == "fail"
    assert load_config(ROOT / "configs" / "kernelbench.yaml").flags.below_float32 == "ignore"  # KernelBench's tolerance decides
    problem.write_text('HARNESS_ALLOW_TF32 = "yes"\n')
    with pytest.raises(UserError, match="HARNESS_ALLOW_TF32"):
        declared_settings(problem)
