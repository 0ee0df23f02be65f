"""Float32 means float32, by one rule: on a float32 problem, a candidate whose error against float64 is over
check.precision_ratio times the reference's and TF32's size fails as `less precise`, whether the float32 tolerance
covers that error (and it is faster than float32 allows: tests/test_verdict.py) or not (here: the judge measures
the failed call against float64, and against the reference on inputs and weights cut to TF32). TF32 is emulated
on the CPU: each input cut (as tensor cores read float32) or rounded to nearest (as a conversion does) to TF32's
10-bit mantissa, then a float32 matmul. An honest float32 matmul in another order passes; a wrong one, an offset
over TF32's error and bf16 inputs stay `incorrect`; a problem that allows TF32, or the KernelBench profile, lifts
the rule."""

import pytest

from harness import api
from harness.core.status import Status

pytestmark = pytest.mark.slow

MATMUL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)

def get_inputs():
    return [torch.randn(256, 256), torch.randn(256, 256)]

def get_init_inputs():
    return []
'''

TF32 = '''
import torch
import torch.nn as nn

def tf32(x):
    # round to nearest on TF32's 10 mantissa bits (a cvt.rna conversion): the low 13 bits of a float32 go
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(tf32(a), tf32(b))
'''

# float32 in another order: two halves of the inner dimension, summed after
SPLIT_K = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        k = a.shape[1] // 2
        return torch.matmul(a[:, :k], b[:k]) + torch.matmul(a[:, k:], b[k:])
'''

# TF32 as tensor cores read float32 operands: the low 13 bits dropped (toward zero)
TF32_CUT = TF32.replace("((bits + 0x1000) & ~0x1FFF)", "(bits & ~0x1FFF)")

# a wrong value over TF32's own error (0.04 on outputs of rms 16: 3.2 times the relative error of TF32's cut, 8.5
# times rounding to nearest), and bf16 inputs (3 times the cut's, 8 times rounding to nearest): neither is TF32
# arithmetic, and both stay incorrect
OFFSET = SPLIT_K.replace("return torch.matmul(a[:, :k], b[:k]) + torch.matmul(a[:, k:], b[k:])", "return torch.matmul(a, b) + 0.04")
BF16 = SPLIT_K.replace("return torch.matmul(a[:, :k], b[:k]) + torch.matmul(a[:, k:], b[k:])", "return torch.matmul(a.bfloat16().float(), b.bfloat16().float())")
TRANSPOSED = SPLIT_K.replace("return torch.matmul(a[:, :k], b[:k]) + torch.matmul(a[:, k:], b[k:])", "return torch.matmul(a, b.t())")


def _judge(root, build_cache, measurement_cache, *settings, problem=MATMUL):
    from tests.evaluations import fast_config

    (root / "problems").mkdir()
    (root / "problems" / "matmul_256.py").write_text(problem)
    cfg = fast_config(root, build_cache, measurement_cache, f"problems_dir={root / 'problems'}", "timing.enabled=false", *settings)
    with api.Session(cfg) as session:
        kernels = (("tf32", TF32), ("tf32_cut", TF32_CUT), ("split_k", SPLIT_K), ("transposed", TRANSPOSED), ("offset", OFFSET), ("bf16", BF16))
        return {name: session.evaluate("matmul_256", source, name=name) for name, source in kernels}


@pytest.fixture(scope="module")
def default(tmp_path_factory, build_cache, measurement_cache):
    return _judge(tmp_path_factory.mktemp("float32-rule"), build_cache, measurement_cache)


@pytest.mark.parametrize("kernel", ["tf32", "tf32_cut"])
def test_tf32_arithmetic_that_fails_the_float32_tolerance_is_less_precise_with_both_errors(default, kernel):
    record = default[kernel]
    assert record.decision.status is Status.LESS_PRECISE, (record.decision.status, record.decision.reason)
    reason = record.decision.reason
    assert reason.startswith("below-float32: trial 1"), reason
    assert "of elements outside" in reason and "relative error against float64" in reason and "float32 reference's" in reason
    assert "below-float32" in [f.code for f in record.integrity.flags]


def test_float32_in_another_order_passes(default):
    assert default["split_k"].decision.status is Status.CORRECT, default["split_k"].decision.reason


def test_a_wrong_matmul_stays_incorrect_its_error_out_of_reduced_precisions_reach(default):
    record = default["transposed"]
    assert record.decision.status is Status.INCORRECT, (record.decision.status, record.decision.reason)
    assert "below-float32" not in [f.code for f in record.integrity.flags]


def test_a_wrong_value_or_bf16_inputs_over_tf32s_own_error_stay_incorrect(default):
    for name in ("offset", "bf16"):
        record = default[name]
        assert record.decision.status is Status.INCORRECT, (name, record.decision.status, record.decision.reason)


def test_a_problem_that_allows_tf32_lifts_the_rule_and_the_tolerance_decides(tmp_path, build_cache, measurement_cache):
    allowing = MATMUL.replace("def get_inputs():", "HARNESS_ALLOW_TF32 = True\n\ndef get_inputs():")
    records = _judge(tmp_path, build_cache, measurement_cache, problem=allowing)
    assert records["tf32"].decision.status is Status.INCORRECT, records["tf32"].decision.reason
    assert records["split_k"].decision.status is Status.CORRECT


# configs/kernelbench.yaml's float32 tolerance and its policy for the rule
KERNELBENCH = ("check.tolerances.float32.atol=1e-2", "check.tolerances.float32.rtol=1e-2", "check.tolerances.float32.norm=0", "flags.below_float32=ignore")


def test_the_kernelbench_profile_keeps_kernelbenchs_tolerance(tmp_path, build_cache, measurement_cache):
    # TF32 at this size misses even atol = rtol = 1e-2 near zero (0.03% of elements): that tolerance decides alone
    records = _judge(tmp_path, build_cache, measurement_cache, *KERNELBENCH)
    tf32 = records["tf32"].decision
    assert tf32.status is Status.INCORRECT and "atol=0.01, rtol=0.01" in tf32.reason, (tf32.status, tf32.reason)
    assert "below-float32" not in [f.code for f in records["tf32"].integrity.flags]
    assert records["split_k"].decision.status is Status.CORRECT


def test_tf32s_cut_keeps_ten_mantissa_bits_toward_zero_as_tensor_cores_read_float32():
    import torch

    from harness.judge.reference import tf32

    values = torch.tensor([1 + 2**-10, 1 + 2**-12, 1 + 2**-11 + 2**-13, -(1 + 2**-10 + 2**-11), -3.0])
    assert tf32(values).tolist() == [1 + 2**-10, 1.0, 1.0, -(1 + 2**-10), -3.0]
    assert tf32(torch.arange(3)).dtype == torch.int64


def test_the_rule_reads_a_failed_calls_figures_only_and_names_them():
    from harness.core.integrity import tolerance_below_float32
    from harness.core.records import CheckResult

    failed = CheckResult("trial 1 (train)", False, "output: 52% of elements outside", 0.02, 1e-3, 0.52)
    figures = {"candidate": 3e-4, "reference": 2e-7, "float32": 1.0, "tf32": 2.9e-4, "failed": 1.0}
    (code, why), = tolerance_below_float32(failed, figures, 10, False)
    assert code.value == "below-float32" and why.startswith("trial 1 (train): output: 52% of elements outside;")
    assert "1500 times the float32 reference's 2e-07" in why and "the 0.00029 that TF32's cut" in why
    assert "an error of TF32's size" in why  # the size is measured; the cause may be TF32 or an approximation as coarse
    assert tolerance_below_float32(failed, {**figures, "failed": 0.0}, 10, False) == []  # the precision call's
    assert tolerance_below_float32(failed, {k: v for k, v in figures.items() if k != "tf32"}, 10, False) == []  # no matmul
    assert tolerance_below_float32(failed, {**figures, "candidate": 4.5e-4}, 10, False) == []  # over 1.5 times TF32's
    assert tolerance_below_float32(failed, {**figures, "float32": 0.0}, 10, False) == []  # a float16 problem
    assert tolerance_below_float32(failed, figures, 10, True) == []  # TF32 allowed
    nan_output = CheckResult("trial 1 (train)", False, "output has NaN where the reference does not")
    assert tolerance_below_float32(nan_output, figures, 10, False) == []  # not a value mismatch
