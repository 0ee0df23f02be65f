"""Checks that must fit what the reference computes (harness/judge/degenerate.py), honest and wrong cases
side by side: a buffer no output depends on is a note, not `incorrect`; an output that is rounding
noise for every input is the problem's defect, judged against the noise."""
import copy

import pytest
import torch
import torch.nn as nn

from harness.core.records import CheckResult
from harness.core.status import Status
from harness.judge.compare import output_rms, rounding_noise
from harness.judge.degenerate import InertBuffers, NoiseScan, judge_buffers
from harness.judge.reference import snapshot


def linear_batchnorm(momentum):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4, momentum=momentum))


def probe(model):
    sets = [[torch.randn(16, 8, generator=torch.Generator().manual_seed(seed))] for seed in (1, 2)]
    return InertBuffers(model, snapshot(model), lambda: sets, 5)


def test_batchnorms_counter_is_inert_when_momentum_is_set_and_its_running_statistics_are_not():
    inert = probe(linear_batchnorm(0.1))
    assert {name: inert(name) for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked")} == {
        "1.running_mean": False, "1.running_var": False, "1.num_batches_tracked": True,
    }


def test_with_momentum_none_the_counter_sets_the_running_averages_and_is_not_inert():
    """The cumulative average weighs each batch by 1/num_batches_tracked; its first train call
    replaces the running mean whole, so the probe also changes it after an update."""
    inert = probe(linear_batchnorm(None))
    assert not any(inert(name) for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked"))


def test_the_probe_leaves_the_reference_and_torchs_generator_as_they_were():
    model = linear_batchnorm(0.1)
    before = snapshot(model)
    state = torch.random.get_rng_state()
    assert probe(model)("1.num_batches_tracked")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(state, torch.random.get_rng_state())


def test_an_inert_buffer_that_is_missing_or_differs_is_a_note_and_a_live_one_still_fails():
    ok = CheckResult("buffers after the calls", True, "ok", 1e-7, 1e-6, 0.0)
    differs = CheckResult("buffers after the calls", False, "output differs in 100.00% of elements (exact match required)", 0.0, 0.0, 1.0)
    inert = {"bn.num_batches_tracked"}.__contains__
    missing = judge_buffers("buffers after the calls", {"bn.running_mean": ok, "bn.num_batches_tracked": None}, inert)
    assert missing.passed and missing.note.startswith("buffer bn.num_batches_tracked is missing: no output")
    counted = judge_buffers("buffers after the calls", {"bn.running_mean": ok, "bn.num_batches_tracked": differs}, inert)
    assert counted.passed and "bn.num_batches_tracked differs" in counted.note
    live = judge_buffers("buffers after the calls", {"bn.running_mean": None, "bn.num_batches_tracked": None}, inert)
    assert not live.passed and live.reason == "buffer bn.running_mean is missing"
    wrong = judge_buffers("buffers after the calls", {"bn.running_mean": differs, "bn.num_batches_tracked": ok}, inert)
    assert not wrong.passed and wrong.reason.startswith("buffer bn.running_mean differs from the reference's")


class GroupNormMean(nn.Module):
    """KernelBench level2/41's tail: the mean over the features of group-normalised values is zero
    in exact arithmetic; in float32 it is ~1e-9 of both signs, and the ReLU makes it one-signed."""

    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(32, 128)
        self.norm = nn.GroupNorm(8, 128, affine=False)

    def forward(self, x):
        return torch.relu(self.norm(self.gemm(x)).mean(dim=1, keepdim=True))


def scan(model, sets):
    found = NoiseScan()
    twin = copy.deepcopy(model).double()
    with torch.no_grad():
        for args in sets:
            found.observe([model(*args)], output_rms([twin(*[a.double() for a in args])]))
    return found


def test_an_output_that_is_rounding_noise_on_every_input_is_found_from_the_float64_twin():
    torch.manual_seed(0)
    model = GroupNormMean()
    found = scan(model, [[torch.randn(64, 32) * s + shift] for s, shift in ((1, 0), (4, 0), (1, 3))])
    assert list(found.levels) == [0] and 0 < found.levels[0] < 1e-7
    assert found.notes("3 calls")[0].startswith("output 0 is rounding noise around zero on 3 calls")


def test_small_but_real_outputs_and_exact_zeros_are_not_rounding_noise():
    torch.manual_seed(1)
    x = torch.rand(2, 400_000)
    softmax = torch.softmax(x, dim=-1)  # ~2.5e-6 per element: small, but its float64 value is its own size
    loss = torch.mean((x * 0.01) ** 2) * 1e-4  # a scalar loss below atol
    zeros = torch.zeros(8)
    exact = output_rms([torch.softmax(x.double(), dim=-1), torch.mean((x.double() * 0.01) ** 2) * 1e-4, zeros.double()])
    assert rounding_noise([softmax, loss, zeros], exact) == {}


def test_noise_on_some_inputs_only_is_not_the_problems_defect():
    found = NoiseScan()
    noise, real = torch.randn(64) * 1e-9, torch.randn(64)
    found.observe([noise], [1e-18])
    assert found.open and found.levels
    found.observe([real], output_rms([real.double()]))
    assert found.levels == {} and not found.open


# -- end to end: real judge and workers ---------------------------------------------------------------------

BATCHNORM_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, momentum={momentum})

    def forward(self, x):
        return self.bn(self.linear(x))


def get_inputs():
    return [torch.randn(48, 64)]


def get_init_inputs():
    return [64, 32]
'''

# A fused GEMM + BatchNorm as LLM kernels write it: renamed parameters, the running statistics, no
# step counter (KernelBench level1/33's kernels fail on "buffer bn.num_batches_tracked is missing").
NO_COUNTER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm_weight = nn.Parameter(torch.randn(out_features, in_features))
        self.gemm_bias = nn.Parameter(torch.zeros(out_features))
        self.gamma = nn.Parameter(torch.ones(out_features))
        self.beta = nn.Parameter(torch.zeros(out_features))
        self.register_buffer("running_mean", torch.zeros(out_features))
        self.register_buffer("running_var", torch.ones(out_features))
        self.steps = 0  # counted privately, for the cumulative average

    def forward(self, x):
        y = F.linear(x, self.gemm_weight, self.gemm_bias)
        if self.training:
            self.steps += 1
        factor = {factor}
        return F.batch_norm(y, self.running_mean, self.running_var, self.gamma, self.beta, self.training, factor, 1e-5)
'''

# The same, with right outputs but stale running statistics: it keeps its own copies and leaves the
# module's buffers as they were loaded. Only the buffers check can see it.
PRIVATE_STATISTICS = NO_COUNTER.format(factor="0.1").replace(
    "        return F.batch_norm(y, self.running_mean,",
    """        if self.training and not hasattr(self, "_mean"):
            self._mean, self._var = self.running_mean.clone(), self.running_var.clone()
        if hasattr(self, "_mean"):
            return F.batch_norm(y, self._mean, self._var, self.gamma, self.beta, self.training, factor, 1e-5)
        return F.batch_norm(y, self.running_mean,""",
)

GROUPNORM_MEAN_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Gemm, GroupNorm, mean over the features, ReLU (KernelBench level2/41's shape, without the
    affine step): the mean of a normalised group is zero, so the output is rounding noise."""
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features, affine=False)

    def forward(self, x):
        return torch.relu(self.group_norm(self.gemm(x)).mean(dim=1, keepdim=True))


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32, 128, 8]
'''

# Honest: the group statistics by hand, in another order than torch's kernel: another noise.
GROUPNORM_MEAN_HONEST = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.num_groups = num_groups

    def forward(self, x):
        h = self.gemm(x).view(x.shape[0], self.num_groups, -1)
        centred = h - h.mean(dim=-1, keepdim=True)
        normed = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
        return torch.relu(normed.reshape(x.shape[0], -1).mean(dim=1, keepdim=True))
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache, measurement_cache):
    from harness import api
    from harness.core.config import load_config
    from harness.core.store import read_records

    problems = tmp_path_factory.mktemp("problems")
    (problems / "33_BatchNorm_Momentum.py").write_text(BATCHNORM_PROBLEM.format(momentum=0.1))
    (problems / "34_BatchNorm_Cumulative.py").write_text(BATCHNORM_PROBLEM.format(momentum=None))
    (problems / "41_Gemm_GroupNorm_Mean_ReLU.py").write_text(GROUPNORM_MEAN_PROBLEM)
    cfg = load_config(overrides=[f"results_dir={tmp_path_factory.mktemp('results')}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
                                 f"problems_dir={problems}", "device=cpu", "timing.enabled=false", "check.trials=2", "flags.no_custom_kernel=flag"])
    sources = {
        "momentum_no_counter": ("33_BatchNorm_Momentum", NO_COUNTER.format(factor="0.1")),
        "momentum_wrong_statistics": ("33_BatchNorm_Momentum", NO_COUNTER.format(factor="0.2")),
        "momentum_private_statistics": ("33_BatchNorm_Momentum", PRIVATE_STATISTICS),
        "cumulative_no_counter": ("34_BatchNorm_Cumulative", NO_COUNTER.format(factor="1.0 / self.steps if self.training else 0.0")),
        "noise_honest": ("41_Gemm_GroupNorm_Mean_ReLU", GROUPNORM_MEAN_HONEST),
        "noise_zeros": ("41_Gemm_GroupNorm_Mean_ReLU", GROUPNORM_MEAN_HONEST.replace("return torch.relu(", "return 0 * torch.relu(")),
        "noise_wrong_value": ("41_Gemm_GroupNorm_Mean_ReLU", GROUPNORM_MEAN_HONEST.replace("return torch.relu(", "return 5e-5 + torch.relu(")),
    }
    with api.Session(cfg) as session:
        futures = {name: session.submit(problem, text, name=name) for name, (problem, text) in sources.items()}
        found = {name: f.result() for name, f in futures.items()}
        folder = session.store.dir
    found["references"] = {r.identity.problem: r for r in read_records(folder) if type(r).__name__ == "ReferenceRecord"}
    return found


@pytest.mark.slow
def test_a_batchnorm_kernel_without_the_step_counter_passes_with_a_note_when_momentum_is_set(records):
    record = records["momentum_no_counter"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert "and the buffers after them" in record.decision.reason
    assert any(n.startswith("buffer bn.num_batches_tracked is missing: no output (train or eval)") for n in record.decision.notes), record.decision.notes


@pytest.mark.slow
def test_with_momentum_none_the_same_omission_fails(records):
    record = records["cumulative_no_counter"]
    assert record.decision.status is Status.INCORRECT
    assert record.decision.reason == "buffers after the calls: buffer bn.num_batches_tracked is missing"


@pytest.mark.slow
def test_a_batchnorm_kernel_with_wrong_running_statistics_still_fails(records):
    wrong = records["momentum_wrong_statistics"]  # momentum 0.2: the eval call reads the statistics
    assert wrong.decision.status is Status.INCORRECT and "(eval)" in wrong.decision.reason, wrong.decision.reason
    private = records["momentum_private_statistics"]  # right outputs, the module's statistics never move
    assert private.decision.status is Status.INCORRECT
    assert private.decision.reason.startswith("buffers after the calls: buffer bn.running_mean differs from the reference's"), private.decision.reason


@pytest.mark.slow
@pytest.mark.parametrize("name", ["noise_honest", "noise_zeros"])
def test_an_honest_kernel_on_an_output_that_is_rounding_noise_passes_with_the_note(records, name):
    record = records[name]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert any(n.startswith("output is rounding noise around zero") and "a defect of the problem" in n for n in record.decision.notes), record.decision.notes
    assert not any(f.code == "less-precise" for f in record.integrity.flags)
    reference = records["references"]["41_Gemm_GroupNorm_Mean_ReLU"]
    assert any(n.startswith("output 0 is rounding noise around zero on every call of the plan") for n in reference.outcome.notes), reference.outcome.notes


@pytest.mark.slow
def test_a_wrong_value_above_the_noise_still_fails(records):
    """5e-5 is inside atol = 1e-4: only the rule for an output that is rounding noise catches it (the
    noise's rms reaches 1e-8 on some seeds, so 1000x of it is 1e-5)."""
    record = records["noise_wrong_value"]
    assert record.decision.status is Status.INCORRECT
    assert "the reference's output is rounding noise around zero" in record.decision.reason and "over 1000x that" in record.decision.reason, record.decision.reason
