"""The weight transplant survives renaming: ModelNew gets the reference's (redrawn) weights by name,
or by registration order and shape when it renamed them; one that ignores what it was given fails."""
import pytest

from harness import api
from harness.core.status import Status

pytestmark = pytest.mark.slow  # real worker subprocesses for every candidate

PROBLEM = "3_Linear_BatchNorm"  # Linear(64, 32) then BatchNorm1d(32): parameters, running stats, a counter

FLAT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    """gemm_weight for linear.weight, gamma and beta for bn.weight and bn.bias: as LLM kernels name them."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm_weight = nn.Parameter(torch.empty(out_features, in_features))
        self.gemm_bias = nn.Parameter(torch.empty(out_features))
        self.gamma = nn.Parameter(torch.ones(out_features))
        self.beta = nn.Parameter(torch.zeros(out_features))
        self.register_buffer("running_mean", torch.zeros(out_features))
        self.register_buffer("running_var", torch.ones(out_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        nn.init.kaiming_uniform_(self.gemm_weight)
        nn.init.zeros_(self.gemm_bias)

    def forward(self, x):
        y = F.linear(x, {weight}, self.gemm_bias)
        if self.training:
            self.num_batches_tracked += 1
        return F.batch_norm(y, self.running_mean, self.running_var, self.gamma, self.beta, self.training, 0.1, 1e-5)
'''

SEQUENTIAL = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    """The same layers in a Sequential (body.0, body.1) where the reference names them linear and bn."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_features, out_features), nn.BatchNorm1d(out_features))

    def forward(self, x):
        return self.body(x)
'''

# nn.Linear's own initialisation, drawn in its order: under the shared seed, the reference's initial weights
LINEAR_INIT = """nn.init.kaiming_uniform_(self.gemm_weight, a=math.sqrt(5))
        nn.init.uniform_(self.gemm_bias, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))"""

# One parameter more than the reference has: no pairing by name or by position. Built under the
# shared seed, its Linear draws what the reference's drew, so its own weights are the reference's.
EXTRA = SEQUENTIAL.replace("self.body = nn.Sequential(", "self.scale = nn.Parameter(torch.ones(1))\n        self.body = nn.Sequential(").replace("return self.body(x)", "return self.body(x) * self.scale")


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    from harness.core.config import load_config

    cfg = load_config(overrides=[f"results_dir={tmp_path_factory.mktemp('results')}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                                 "device=cpu", "timing.enabled=false", "check.trials=2", "flags.no_custom_kernel=flag"])
    sources = {
        "flat": FLAT.format(weight="self.gemm_weight"),
        "flat_frozen": FLAT.format(weight="self.frozen").replace("nn.init.zeros_(self.gemm_bias)", "nn.init.zeros_(self.gemm_bias)\n        self.frozen = self.gemm_weight.detach().clone()  # its own weights, kept; the given ones ignored"),
        "sequential": SEQUENTIAL,
        "extra_parameter": EXTRA,
        "extra_parameter_wrong": EXTRA.replace("torch.ones(1)", "torch.full((1,), 1.5)"),
    }
    with api.Session(cfg) as session:
        futures = {name: session.submit(PROBLEM, text, name=name) for name, text in sources.items()}
        return {name: f.result() for name, f in futures.items()}


def test_renamed_parameters_are_paired_by_position_and_recorded(records):
    record = records["flat"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert dict(record.checks.weight_mapping) == {
        "gemm_weight": "linear.weight", "gemm_bias": "linear.bias", "gamma": "bn.weight", "beta": "bn.bias",
        "running_mean": "bn.running_mean", "running_var": "bn.running_var", "num_batches_tracked": "bn.num_batches_tracked",
    }
    assert any(w.startswith("weights mapped by position") for w in record.decision.warnings)
    assert record.checks.gradients == "match"  # gradients are compared under the reference's names


def test_a_sequential_that_shifts_names_is_paired_and_its_buffers_compared(records):
    record = records["sequential"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert ("body.1.running_mean", "bn.running_mean") in record.checks.weight_mapping
    assert any(c.name == "buffers after the calls" and c.passed for c in record.checks.results)


def test_renamed_weights_that_are_then_ignored_still_fail(records):
    record = records["flat_frozen"]
    assert record.decision.status is Status.INCORRECT, record.decision.reason


def test_weights_that_cannot_pair_fall_back_to_its_own_same_seed_weights_with_a_flag(records):
    record = records["extra_parameter"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert record.checks.weights == "seed"
    flag = next(f for f in record.integrity.flags if f.code == "weights-by-seed")
    assert flag.policy == "flag" and "scale" in flag.reason and "checked less" in flag.reason
    assert record.checks.gradients == "match"  # its inputs' gradients; its parameters have no names to pair by


def test_a_wrong_kernel_on_its_own_same_seed_weights_still_fails(records):
    record = records["extra_parameter_wrong"]
    assert record.decision.status is Status.INCORRECT, record.decision.reason
    assert any(f.code == "weights-by-seed" for f in record.integrity.flags)


def test_with_the_flag_set_to_fail_unpairable_weights_are_a_weights_mismatch_naming_them(tmp_path, build_cache, measurement_cache):
    overrides = [f"results_dir={tmp_path}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                 "device=cpu", "timing.enabled=false", "check.trials=1", "flags.no_custom_kernel=flag", "flags.weights_by_seed=fail"]
    record = api.evaluate(PROBLEM, EXTRA, overrides=overrides)
    assert record.decision.status is Status.WEIGHTS_MISMATCH
    assert "scale" in record.decision.reason and "neither by name nor by position" in record.decision.reason


def test_the_kernelbench_profile_checks_each_model_with_its_own_weights_as_kernelbench_does(tmp_path, build_cache, measurement_cache):
    """Renamed weights it then ignores: the default fails it (it ignores the weights it is given);
    KernelBench builds both models under one seed and never gives weights, so it passes there."""
    overrides = [f"results_dir={tmp_path}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                 "device=cpu", "timing.enabled=false", "flags.no_custom_kernel=flag"]
    frozen = FLAT.format(weight="self.frozen").replace("nn.init.zeros_(self.gemm_bias)", "nn.init.zeros_(self.gemm_bias)\n        self.frozen = self.gemm_weight.detach().clone()")
    record = api.evaluate(PROBLEM, "import math\n" + frozen.replace("nn.init.kaiming_uniform_(self.gemm_weight)\n        nn.init.zeros_(self.gemm_bias)", LINEAR_INIT),
                          config="configs/kernelbench.yaml", overrides=overrides)
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert record.checks.weights == "seed" and not any(f.code == "weights-by-seed" for f in record.integrity.flags)


# The reference registers its own `bias` before its layer's (named_parameters lists self.bias, then
# linear.weight, linear.bias); ModelNew registers weight, lin_bias, bias: no pairing by position,
# but every shape is unique on both sides.
OWN_BIAS_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features, 1))

    def forward(self, x):
        return torch.relu(self.linear(x)).unsqueeze(-1) + self.bias


def get_inputs():
    return [torch.randn(16, 8)]


def get_init_inputs():
    return [8, 4]
'''

OWN_BIAS_NEW = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.lin_bias = nn.Parameter(torch.randn(out_features))
        self.bias = nn.Parameter(torch.randn(out_features, 1))

    def forward(self, x):
        return torch.relu(F.linear(x, self.weight, {lin_bias})).unsqueeze(-1) + self.bias
'''


def test_weights_pair_by_name_then_position_then_unique_shape():
    import torch

    from harness.device.checks import pairing, weight_pairs

    reference = {"bias": torch.zeros(4, 1), "linear.weight": torch.zeros(4, 8), "linear.bias": torch.zeros(4)}
    own = {"weight": torch.zeros(4, 8), "lin_bias": torch.zeros(4), "bias": torch.zeros(4, 1)}
    assert sorted(weight_pairs(own, reference)) == [("bias", "bias"), ("lin_bias", "linear.bias"), ("weight", "linear.weight")]
    assert pairing(own, reference) == "shape"
    assert pairing(reference, reference) == "name"
    renamed = {"w": torch.zeros(4, 1), "x": torch.zeros(4, 8), "y": torch.zeros(4)}
    assert pairing(renamed, reference) == "position"
    twins = {"a": torch.zeros(4), "b": torch.zeros(4, 8), "c": torch.zeros(4)}  # two of one shape: which is which?
    assert weight_pairs(twins, {"p": torch.zeros(4, 8), "q": torch.zeros(4), "r": torch.zeros(4), "s": torch.zeros(1)}) is None
    assert weight_pairs({"a": torch.zeros(4), "b": torch.zeros(4, 8)}, {"p": torch.zeros(4, 8), "q": torch.zeros(4)}) == [("a", "q"), ("b", "p")]
    assert weight_pairs({"a": torch.zeros(4)}, {"p": torch.zeros(4, 8), "q": torch.zeros(4)}) is None  # one left alone


def test_weights_registered_in_another_order_pair_by_unique_shape_and_a_wrong_twin_still_fails(tmp_path, build_cache, measurement_cache):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "9_Own_Bias.py").write_text(OWN_BIAS_PROBLEM)
    overrides = [f"results_dir={tmp_path / 'results'}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}", f"problems_dir={problems}",
                 "device=cpu", "timing.enabled=false", "check.trials=2", "flags.no_custom_kernel=flag"]
    with api.Session(overrides=overrides) as session:
        honest = session.evaluate("9_Own_Bias", OWN_BIAS_NEW.format(lin_bias="self.lin_bias"), name="honest")
        wrong = session.evaluate("9_Own_Bias", OWN_BIAS_NEW.format(lin_bias="None"), name="no_linear_bias")
    assert honest.decision.status is Status.CORRECT, honest.decision.reason
    assert honest.checks.weights == "shape" and dict(honest.checks.weight_mapping) == {"weight": "linear.weight", "lin_bias": "linear.bias"}
    assert any(w.startswith("weights mapped by shape") for w in honest.decision.warnings)
    assert not any(f.code == "weights-by-seed" for f in honest.integrity.flags)
    assert wrong.decision.status is Status.INCORRECT, wrong.decision.reason
    assert wrong.checks.weights == "shape"
