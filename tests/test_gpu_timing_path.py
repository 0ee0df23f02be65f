"""The timing path never makes an honest kernel wrong: a Frobenius-norm kernel written the way LLM kernels
for KernelBench's level 1 problem 37 are (a `torch::zeros` accumulator, `<<<>>>` launches on the legacy
default stream, the norm read back with `.item()` between them, so no CUDA graph can capture it) is
`correct` in every timing mode, at the problem's v0 sizes; its twin whose timed calls skip the division
fails at the last timed call. A model that returns an answer it keeps gets the same verdict in graph and eager
mode: the graph check's poison does not stay in it (skipped without a GPU)."""

import pytest

from harness.core.status import Status
from tests.evaluations import evaluate_in_mode

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# KernelBench level 1, problem 37 (FrobeniusNorm_), at its v0 sizes: a 256 MB input
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        norm = torch.norm(x, p="fro")
        return x / norm


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return []
'''

CANDIDATE = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cmath>

__global__ void sum_of_squares(const float* x, double* total, long n) {
    __shared__ double part[256];
    double s = 0.0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        double v = x[i];
        s += v * v;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(total, part[0]);
}

__global__ void divide(const float* x, float* out, float norm, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] / norm;
}

torch::Tensor frobenius(torch::Tensor x, bool lazy) {
    auto xc = x.contiguous();
    long n = xc.numel();
    auto total = torch::zeros({1}, xc.options().dtype(torch::kFloat64));
    sum_of_squares<<<1024, 256>>>(xc.data_ptr<float>(), total.data_ptr<double>(), n);
    double norm = std::sqrt(total.item<double>());
    static long calls = 0;
    if (lazy && ++calls > 30) return xc.clone();  // the wrong twin: right while checked, undivided once timed
    auto out = torch::empty_like(xc);
    divide<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(), (float)norm, n);
    return out;
}
"""
ext = load_inline(name="frobenius_timing_path_test", cpp_sources="torch::Tensor frobenius(torch::Tensor x, bool lazy);",
                  cuda_sources=cuda_source, functions=["frobenius"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.frobenius(x, LAZY)
'''


def _evaluate(root, build_cache, mode):
    problems = root / "problems"
    problems.mkdir()
    (problems / "37_FrobeniusNorm_v0.py").write_text(PROBLEM)
    candidates = [("zeros_launch_item", CANDIDATE.replace("LAZY", "False")), ("undivided_when_timed", CANDIDATE.replace("LAZY", "True"))]
    return evaluate_in_mode(root, build_cache, "37_FrobeniusNorm_v0", problems, candidates, mode)


@pytest.fixture(scope="module", params=["auto", "graph", "eager"])
def by_mode(request, tmp_path_factory, build_cache):
    return request.param, _evaluate(tmp_path_factory.mktemp(f"frobenius-{request.param}"), build_cache, request.param)


def test_a_zeros_launch_item_kernel_is_correct_and_timed_in_every_mode(by_mode):
    mode, records = by_mode
    record = records["zeros_launch_item"]
    assert record.decision.status is Status.CORRECT, (mode, record.decision.reason, record.timing.stats)
    assert record.timing.stats is not None and record.timing.paired is not None, mode
    if mode != "eager":  # .item() inside the call: no graph can hold it, so both sides are timed eagerly and the row says so
        assert record.timing.stats.timing_mode == "eager", (mode, record.timing.stats.timing_mode)


def test_its_twin_whose_timed_calls_skip_the_division_fails_at_the_last_timed_call_in_every_mode(by_mode):
    mode, records = by_mode
    record = records["undivided_when_timed"]
    assert record.decision.status is Status.INCORRECT, (mode, record.decision.status, record.decision.reason)
    assert record.decision.reason.startswith("last timed call on trial 1 (eval)"), (mode, record.decision.reason)


# A problem whose answer is constant (softmax over a dimension of one), and a model that keeps the answer
# it returns: CUDA-L1's kernel for KernelBench level 2 problem 66 does this. The graph check poisons the
# static output to see whether a replay writes it; that output is the model's own tensor.
CONSTANT_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.softmax(self.linear(x).mean(dim=1, keepdim=True), dim=1)


def get_inputs():
    return [torch.randn(128, 100)]


def get_init_inputs():
    return [100]
'''

KEPT_ANSWER = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.answer = None

    def forward(self, x):
        if self.answer is None or self.answer.shape[0] != x.shape[0]:
            self.answer = torch.ones(x.shape[0], 1, device=x.device, dtype=x.dtype)
        return self.answer
'''


@pytest.fixture(scope="module", params=["graph", "eager"])
def kept_answer(request, tmp_path_factory, build_cache):
    root = tmp_path_factory.mktemp(f"kept-{request.param}")
    problems = root / "problems"
    problems.mkdir()
    (problems / "softmax_of_one.py").write_text(CONSTANT_PROBLEM)
    # it launches nothing once it has its answer: its time is 0 ms, below the bytes floor wherever the card's peaks are
    # cached (implausible-time, flagged here), and what is asserted is the same verdict in both modes
    records = evaluate_in_mode(
        root, build_cache, "softmax_of_one", problems, [("kept_answer", KEPT_ANSWER)], request.param,
        "flags.no_custom_kernel=flag", "flags.implausible_time=flag",
    )
    return request.param, records["kept_answer"]


def test_a_model_that_keeps_its_answer_gets_the_same_verdict_in_graph_and_eager_mode(kept_answer):
    mode, record = kept_answer
    assert record.decision.status is Status.CORRECT, (mode, record.decision.status, record.decision.reason)
    assert record.timing.stats is not None and record.timing.stats.timing_mode == "eager", mode
    assert "no-custom-kernel" in [f.code for f in record.integrity.flags], (mode, record.integrity.flags)
