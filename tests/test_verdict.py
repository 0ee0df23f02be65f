"""A candidate's verdict as a pure function of its run's evidence (harness/parent/verdict.py): the checks,
the integrity findings under their policies, the sanitizer's and the timing's findings, the
warnings and the KernelBench comparison. Table-driven, no workers."""
import dataclasses
from unittest import mock

import pytest

from tests.records import reference_record
from harness.core import protocol as P
from harness.core.config import load_config
from harness.core.protocol import Call, WorkerOutcome
from harness.core import integrity
from harness.core.records import CheckResult, ReferenceRecord, SpeedOfLight, Timing, TimingStats
from harness.core.status import Code, Status
from harness.parent import verdict as verdict_module
from harness.parent.verdict import Case, Compared, Reported, VerdictRules, decide, settle

CALLS = (Call(0, "train"), Call(0, "eval"), Call(1, "train", "normal"), Call(1, "eval", "normal"), Call(0, "eval", repeat=1))
OK = CheckResult("ok", True, "ok", 3e-5, 1e-4, 0.0)
SAME_SEED_DIFFERS = CheckResult("same-seed construction (eval)", False, "output: 40% of elements outside", 0.5, 2.0, 0.4)
DEFAULTS = load_config().flags.policies("flag")
RULES = VerdictRules(require_same_seed=False, modes=("train", "eval"), repeats=1, precision_ratio=10.0, own_share_floor=0.002, weights="transplant", policies=DEFAULTS, log_kib=256,
                     target_rse=0.01, unstable_iqr=0.1, max_plausible_speedup=100.0, impossible_below=1.0)
REFERENCE_FIELDS = dict(run_id="r", problem="p", problem_hash="h", problem_path="p.py", device="cuda", device_name="gpu", ok=True, reason="ok")
REFERENCE = reference_record(**REFERENCE_FIELDS)
TIMING = TimingStats.from_samples([1.0] * 5, timer="cuda_events", warmup_calls=1, stopped_by="target_rse")
PAIRED = object()  # compare is stubbed: the paired speedup is only handed through


def outcome(failure=None, log_bytes=100):
    return WorkerOutcome(failure, None if failure else P.Done({}), (), "done", 0 if failure is None else 1, 1.0, log_bytes)


def case(*, failure=None, log_bytes=100, rules=(), reported=(), reference=(), **compared):
    """A correct, untimed candidate on CUDA, changed where asked: `compared` sets Compared's fields,
    `rules`, `reported` and `reference` are pairs of field changes, the rest Case's own."""
    own = {k: compared.pop(k) for k in ("device", "restart_note", "randomize_weights") if k in compared}
    fields = {"checks": [OK] * len(CALLS), "same_seed": OK, "precision": {}, "gradients": None, **compared}
    return Case(
        Compared(outcome(failure, log_bytes), **fields), CALLS, own.pop("randomize_weights", True),
        reference_record(**{**REFERENCE_FIELDS, **dict(reference)}), dataclasses.replace(RULES, **dict(rules)), own.pop("device", "cuda"),
        Reported(**dict(reported)), **own,
    )


def policies(**changes):
    return ("policies", {**DEFAULTS, **changes})


def never(timing, paired, *context):
    raise AssertionError("the timing comparison ran for a candidate that is not correct and timed")


def verdict(c, unsafe=(), compare=never):
    """The settled verdict on `c`, with `compare` standing in for the timing comparison."""
    with mock.patch.object(verdict_module, "compare_times", compare):
        return settle(c, decide(c), list(unsafe))


@pytest.mark.parametrize("given, status, reason", [
    (case(failure=P.Failure(Status.CRASHED, "killed by signal 11")), Status.CRASHED, "killed by signal 11"),
    (case(failure=P.Failure(Status.INCORRECT, "trial 1 (train): output differs"), checks=[OK]), Status.INCORRECT, "trial 1 (train): output differs"),
    (case(same_seed=SAME_SEED_DIFFERS, rules=[("require_same_seed", True)]), Status.INCORRECT, "same-seed construction (eval): output: 40% of elements outside"),
    (case(same_seed=SAME_SEED_DIFFERS), Status.CORRECT, "matched 5 calls (train, eval, repeats); max abs error 3e-05"),
    (case(checks=[OK] * 6), Status.CORRECT, "matched 5 calls (train, eval, repeats) and the buffers after them; max abs error 3e-05"),
    (case(rules=[("repeats", 0)]), Status.CORRECT, "matched 5 calls (train, eval); max abs error 3e-05"),
    (case(rules=[("modes", ("eval",)), ("repeats", 0)], checks=[OK, dataclasses.replace(OK, max_abs_error=None), OK, OK, OK]), Status.CORRECT, "matched 5 calls (eval); max abs error 3e-05"),
], ids=["worker-failure", "failure-keeps-its-reason", "same-seed-required", "same-seed-tolerated", "buffers-clause", "no-repeats", "eval-only"])
def test_the_checks_give_the_first_verdict(given, status, reason):
    decided = verdict(given)
    assert (decided.status, decided.reason) == (status, reason)
    tolerated = [w for w in decided.warnings if w.startswith("same-seed construction differs")]
    assert bool(tolerated) == (given.compared.same_seed is SAME_SEED_DIFFERS and not given.rules.require_same_seed)


@pytest.mark.parametrize("policy, status, flagged", [
    ("fail", Status.FLAGGED, [("fallback", "fail")]),
    ("flag", Status.CORRECT, [("fallback", "flag")]),
    ("ignore", Status.CORRECT, []),
], ids=["fail", "flag", "ignore"])
def test_a_finding_under_each_policy(policy, status, flagged):
    decided = verdict(case(reported=[("scanned", ((Code.FALLBACK, "forward catches   exceptions"),))], rules=[policies(fallback=policy)]))
    assert decided.status is status
    assert [(f.code, f.policy) for f in decided.flags] == flagged
    if policy == "fail":
        assert decided.reason == "fallback: forward catches   exceptions"
        assert decided.stricter is not None and decided.stricter.code == "flag:fallback"
    if flagged:
        assert decided.flags[0].reason == "forward catches exceptions"  # one line, spaces squeezed


@pytest.mark.parametrize("gradients, policy, status, code", [
    (("mismatch", "grad of bias differs"), "flag", Status.CORRECT, "wrong-gradients"),
    (("mismatch", "grad of bias differs"), "fail", Status.WRONG_GRADIENTS, "wrong-gradients"),
    (("forward only", "no gradient reached the inputs"), "flag", Status.CORRECT, "forward-only"),
    (("forward only", "no gradient reached the inputs"), "fail", Status.FORWARD_ONLY, "forward-only"),
    (("match", ""), "fail", Status.CORRECT, None),
], ids=["wrong-flagged", "wrong-failed", "forward-only-flagged", "forward-only-failed", "match"])
def test_wrong_gradients_and_forward_only(gradients, policy, status, code):
    rules = [("policies", load_config().flags.policies(policy))]
    decided = verdict(case(gradients=gradients, rules=rules))
    assert decided.status is status
    assert [f.code for f in decided.flags] == ([code] if code else [])
    if status is not Status.CORRECT:
        assert decided.reason == f"{code}: {gradients[1]}"


@pytest.mark.parametrize("candidate, reference, flagged", [
    (5e-5, 1e-6, True),  # 50x the reference's error, over the 10x ratio
    (5e-6, 1e-6, False),  # 5x: under the ratio
    (9e-7, 1e-9, False),  # far over the ratio, but under the floor of 1e-6
    (2e-6, 1e-9, True),  # over the floor
], ids=["over-ratio", "under-ratio", "under-floor", "over-floor"])
def test_less_precise_needs_both_the_ratio_and_the_floor(candidate, reference, flagged):
    decided = verdict(case(precision={"candidate": candidate, "reference": reference}))
    assert decided.status is Status.CORRECT
    assert [f.code for f in decided.flags] == (["less-precise"] if flagged else [])
    if flagged:
        assert "over check.precision_ratio=10x" in decided.flags[0].reason


@pytest.mark.parametrize("own_weights, weights, why, flagged", [
    (True, "transplant", "shapes differ", "(shapes differ)"),
    (True, "transplant", "", "(the worker kept its own)"),
    (True, "seed", "", None),
    (False, "transplant", "", None),
], ids=["transplant-with-reason", "transplant-without-reason", "seed", "transplanted"])
def test_weights_by_seed_only_under_transplant(own_weights, weights, why, flagged):
    decided = verdict(case(own_weights=own_weights, rules=[("weights", weights)], reported=[("weights_why", why)]))
    assert [f.code for f in decided.flags] == (["weights-by-seed"] if flagged else [])
    if flagged:
        assert flagged in decided.flags[0].reason


LAZY = "same_seed: output is a torch.Tensor subclass (m.Deferred), not a plain tensor"


LAZY_CALL = P.Failure(Status.INCORRECT, "trial 1 (train): output is a torch.Tensor subclass ...")


@pytest.mark.parametrize("given, policy, status", [
    # only its same-seed output was lazy, its calls matched: still incorrect
    (case(lazy=LAZY, timing=TIMING, paired=PAIRED), "fail", Status.INCORRECT),
    (case(lazy=LAZY, timing=TIMING, paired=PAIRED, failure=LAZY_CALL), "fail", Status.INCORRECT),
    (case(lazy=LAZY, timing=TIMING, paired=PAIRED, failure=LAZY_CALL), "ignore", Status.INCORRECT),
], ids=["correct-calls", "failed-call", "failed-call-ignored"])
def test_a_lazy_output_is_incorrect_and_never_timed(given, policy, status):
    rules = dataclasses.replace(given.rules, policies=policies(lazy_output=policy)[1])
    decided = verdict(dataclasses.replace(given, rules=rules))
    assert decided.status is status
    assert decided.timing.speedup is None and decided.timing.stats is None  # compare_times (never) was not reached
    assert [f.code for f in decided.flags] == (["lazy-output"] if policy != "ignore" else [])
    if policy == "fail":
        assert decided.stricter is not None and decided.stricter.code == "flag:lazy-output"
    if given.compared.outcome.failure is None:
        assert decided.reason == f"lazy-output: {LAZY}"


@pytest.mark.parametrize("policy, status, measured", [
    ("flag", Status.CORRECT, True),
    ("fail", Status.FLAGGED, False),
], ids=["flagged-keeps-measures", "failed-drops-measures"])
def test_timing_findings_and_measures(policy, status, measured):
    seen = []

    def compare(timing, paired, *context):
        seen.append((timing, paired))
        return Timing(speedup=120.0), ("below the reference's roofline",), ["timing did not settle"], [(Code.IMPLAUSIBLE_TIME, "120x over eager")]

    given = case(timing=TIMING, paired=PAIRED, rules=[policies(implausible_time=policy)], log_bytes=1 << 20)
    decided = verdict(given, compare=compare)
    assert seen == [(TIMING, PAIRED)]
    assert decided.status is status and [f.code for f in decided.flags] == ["implausible-time"]
    assert decided.timing == (Timing(stats=TIMING, speedup=120.0) if measured else Timing())  # a failed candidate keeps no timing
    assert ("below the reference's roofline" in decided.notes) is measured
    assert decided.warnings[-2:] == ("timing did not settle", "printed 1048576 bytes; the log keeps the first and last 128 KiB")


@pytest.mark.parametrize("given, unsafe", [
    (case(timing=TIMING, paired=None), ()),  # no paired rounds: nothing to compare
    (case(timing=None, paired=PAIRED), ()),
    (case(timing=TIMING, paired=PAIRED, failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs")), ()),
    (case(timing=TIMING, paired=PAIRED), [(Code.UNSAFE_MEMORY, "compute-sanitizer memcheck: invalid write")]),  # the sanitizer failed it first
], ids=["no-paired", "no-timing", "incorrect", "sanitizer-failed"])
def test_no_timing_comparison_unless_correct_and_timed(given, unsafe):
    decided = verdict(given, unsafe)
    assert dataclasses.replace(decided.timing, stats=None) == Timing()  # nothing compared
    assert decided.timing.stats is (given.compared.timing if decided.status is Status.CORRECT else None)  # a correct candidate keeps its own timing
    if unsafe:
        assert decided.status is Status.UNSAFE_MEMORY and decided.reason.startswith("unsafe-memory: compute-sanitizer")
        assert decided.stricter is not None and decided.stricter.code == "flag:unsafe-memory"


LOOSE = CheckResult("trial 1 (train)", False, "output: 1% of elements outside", 4.7e-4, 3e-3, 0.01, within_kernelbench=True)


@pytest.mark.parametrize("given, expected", [
    (case(), ()),
    (case(restart_note="the lane's judge was restarted before this candidate (the one before: ended)"), ("the lane's judge was restarted before this candidate (the one before: ended)",)),
    (case(reference=[("other_size_note", "no batch_size")]), ("the other-size trial ran at the problem's own size: no batch_size",)),
    (case(reported=[("mapping", tuple((f"w{i}", f"weight{i}") for i in range(8)))]),
     ("weights mapped by position (ModelNew renames them): w0 <- weight0, w1 <- weight1, w2 <- weight2, w3 <- weight3, w4 <- weight4, w5 <- weight5, and 2 more",)),
    (case(profile_error="RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"), ("profiling the candidate failed: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED",)),
    (case(log_bytes=256 << 10), ()),  # at the limit: kept whole
    (case(log_bytes=(256 << 10) + 1), ("printed 262145 bytes; the log keeps the first and last 128 KiB",)),
    (case(same_seed=SAME_SEED_DIFFERS, restart_note="restarted", reference=[("other_size_note", "fixed shapes")], log_bytes=1 << 20),
     ("same-seed construction differs from the reference (output: 40% of elements outside); its calls on the reference's weights match, "
      "so it builds other weights or buffers under the same seed", "restarted",
      "the other-size trial ran at the problem's own size: fixed shapes", "printed 1048576 bytes; the log keeps the first and last 128 KiB")),
    # a wrong kernel's same-seed output differs for the kernel's reason: no claim about its weights
    (case(same_seed=SAME_SEED_DIFFERS, failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[LOOSE]),
     ("same-seed construction differs from the reference (output: 40% of elements outside)",)),
    (case(same_seed=SAME_SEED_DIFFERS, own_weights=True, rules=[("weights", "seed")]), ("same-seed construction differs from the reference (output: 40% of elements outside)",)),
    # draws fixed by check.seed are known beforehand: every record says so, a correct one as a failed one
    (case(rules=[("fixed_seed", 7)]), ("the checks' draws were fixed by check.seed=7, not secret: a candidate fitted to them would pass",)),
    (case(rules=[("fixed_seed", 7)], failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[LOOSE]),
     ("the checks' draws were fixed by check.seed=7, not secret: a candidate fitted to them would pass",)),
], ids=["none", "restart-note", "other-size-note", "mapping", "profile-error", "log-at-limit", "log-over-limit", "in-order", "wrong-kernel", "own-weights",
        "fixed-seed", "fixed-seed-failed"])
def test_warnings(given, expected):
    assert verdict(given).warnings == expected


@pytest.mark.parametrize("given, code", [
    (case(), None),
    (case(failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[LOOSE]), "tolerance"),
    (case(failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[dataclasses.replace(LOOSE, within_kernelbench=False)]), "redrawn-weights"),
    (case(failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[dataclasses.replace(LOOSE, within_kernelbench=False)], own_weights=True, rules=[("weights", "seed")]), None),
    (case(failure=P.Failure(Status.INCORRECT, "trial 1 (train): differs"), checks=[dataclasses.replace(LOOSE, within_kernelbench=False)], randomize_weights=False), None),
    (case(failure=P.Failure(Status.CRASHED, "killed")), None),
    (case(unsafe="wrote 4 bytes past input 0"), "flag:unsafe-memory"),
], ids=["correct", "tolerance", "redrawn-weights", "own-weights", "weights-not-redrawn", "crashed", "failing-flag"])
def test_stricter_only_where_ours_failed_it_and_kernelbench_would_not(given, code):
    stricter = verdict(given).stricter
    assert (stricter.code if stricter is not None else None) == code


@pytest.mark.parametrize("counted, status, share_codes", [
    (None, Status.CORRECT, []),  # no report: no evidence either way
    (P.ExtensionCalls({"ext.f": 3}, {"ext.f": 40}), Status.CORRECT, []),
    (P.ExtensionCalls({"ext.f": 0}, {}), Status.NO_CUSTOM_KERNEL, ["no-custom-kernel"]),
], ids=["no-report", "called", "never-called"])
def test_on_the_cpu_counted_extension_calls_are_the_evidence(counted, status, share_codes):
    decided = verdict(case(device="cpu", reported=[("counted", counted)]))
    assert decided.status is status and [f.code for f in decided.flags] == share_codes
    assert decided.evidence.extension_calls == (counted.checked if counted else {})
    assert decided.evidence.timed_extension_calls == (counted.timed if counted else {})
    assert decided.evidence.custom_kernel_share is None  # no profile


def test_the_rules_of_a_config():
    cfg = load_config(overrides=["check.repeats=0", "check.gradients=fail", "check.require_same_seed=true"])
    rules = VerdictRules.of(cfg)
    assert (rules.repeats, rules.require_same_seed, rules.modes, rules.log_kib) == (0, True, tuple(cfg.check.modes), cfg.limits.log_kib)
    assert rules.policies["wrong_gradients"] == rules.policies["forward_only"] == "fail"


@pytest.mark.parametrize("threads, codes", [
    (None, []),
    (P.Threads("call_0", ("spinner",), 1), ["side-stream"]),
], ids=["none-left", "one-left"])
def test_threads_left_running_are_side_work(threads, codes):
    decided = verdict(case(reported=[("threads", threads)]))
    assert [f.code for f in decided.flags] == codes
    assert all("forward left 1 thread(s) running after it returned (spinner; first seen after call_0)" in f.reason for f in decided.flags)


@pytest.mark.parametrize("timer, advice", [
    ("cuda_events", "stop other work on this GPU, check the clocks, or use timing.mode=graph"),
    ("perf_counter", "stop other work on this machine (its CPU is the device)"),
])
def test_an_unstable_timing_is_told_what_to_do_on_its_own_device(timer, advice):
    rules = verdict_module.VerdictRules.of(load_config())
    spread = TimingStats.from_samples([1.0, 1.0, 2.0, 3.0, 3.0], timer=timer, warmup_calls=1, stopped_by="budget")
    (unstable,) = [w for w in verdict_module.timing_warnings(spread, rules) if w.startswith("unstable timing")]
    assert advice in unstable and (timer == "cuda_events" or "GPU" not in unstable)


# -- float32 means float32: faster than its compute floor and less precise is `less precise` ----------------------

# KernelBench's square float32 matmul (level 1, problem 1, N=4096) on an H100: 137 GFLOP at the measured float32
# rate, a compute floor of about 2.66 ms; a TF32 tl.dot ran it in 0.49 ms with 2.4e-5 error against float64 where
# the float32 reference has 8.4e-7
SQUARE_MATMUL = SpeedOfLight(flops=137_438_953_472, min_bytes=201_326_592, dtype="float32", peak_tflops=51.6,
                             peak_gbps=3000.0, floor_ms=2.66, bound="compute")
TF32_ERRORS = {"candidate": 2.4e-5, "reference": 8.4e-7}


def timed_at(ms):
    stats = TimingStats.from_samples([ms] * 5, timer="cuda_events", warmup_calls=1, stopped_by="target_rse")

    def compare(timing, paired, *context):
        return Timing(speedup=2.66 / ms), (), [], []

    return stats, compare


@pytest.mark.parametrize("ms, precision, rules, status, codes", [
    (0.49, TF32_ERRORS, (), Status.LESS_PRECISE, ["less-precise", "below-float32"]),
    (0.49, {"candidate": 1.1e-6, "reference": 8.4e-7}, (), Status.CORRECT, []),  # fast, with float32's own error
    (8.2, TF32_ERRORS, (), Status.CORRECT, ["less-precise"]),  # less precise, but slower than float32 allows
    (0.49, TF32_ERRORS, (("allow_tf32", True),), Status.CORRECT, ["less-precise"]),  # the problem allows TF32
    (0.49, TF32_ERRORS, (policies(below_float32="ignore"),), Status.CORRECT, ["less-precise"]),  # configs/kernelbench.yaml
], ids=["tf32-fails", "fast-and-precise", "slow-and-imprecise", "tf32-allowed", "kernelbench-profile"])
def test_a_float32_problem_fails_a_candidate_faster_than_float32_with_more_error_than_float32(ms, precision, rules, status, codes):
    stats, compare = timed_at(ms)
    given = case(timing=stats, paired=PAIRED, precision=precision, rules=rules, reference=[("speed_of_light", SQUARE_MATMUL)])
    decided = verdict(given, compare=compare)
    assert decided.status is status, decided.reason
    assert [f.code for f in decided.flags] == codes
    if status is Status.LESS_PRECISE:
        assert "below-float32" in decided.reason and "floor 2.664 ms" in decided.reason and "median 0.49 ms" in decided.reason
        assert "2.4e-05" in decided.reason and "8.4e-07" in decided.reason  # both errors, in the reason
        assert decided.timing.speedup is None  # a failing verdict is never ranked


def test_the_float32_rule_reads_only_float32_problems_with_a_known_floor():
    half = dataclasses.replace(SQUARE_MATMUL, dtype="float16")
    assert integrity.below_float32(0.49, half, TF32_ERRORS, 10.0, False) == []
    assert integrity.below_float32(0.49, None, TF32_ERRORS, 10.0, False) == []
    assert integrity.below_float32(0.49, dataclasses.replace(SQUARE_MATMUL, flops=0), TF32_ERRORS, 10.0, False) == []
    assert integrity.below_float32(0.49, SQUARE_MATMUL, {}, 10.0, False) == []  # no float64 twin: no error to read
    assert [code for code, _ in integrity.below_float32(0.49, SQUARE_MATMUL, TF32_ERRORS, 10.0, False)] == [Code.BELOW_FLOAT32]
