"""Timing never changes a verdict: kernels launched `<<<grid, block>>>` with no stream (the legacy
default stream, as nearly every LLM-written kernel does), on a launch-bound problem, in every timing
mode (skipped without a GPU)."""

import pytest

from harness.core.records import OUTSIDE_CAPTURE
from harness.core.status import Status
from tests.evaluations import evaluate_in_mode
from tests.sources import scale_bias_relu

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

EXTENSION = r'''from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__device__ unsigned long long now_ns() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void k(const float* x, const float* b, float* out, float s, long n, long cols, long spin_ns) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (spin_ns > 0) { unsigned long long t0 = now_ns(); while (now_ns() - t0 < (unsigned long long)spin_ns) { __nanosleep(1000); } }
    if (i < n) { float v = x[i] * s + b[i % cols]; out[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor f(torch::Tensor x, torch::Tensor b, double s, int64_t spin_ns) {
    auto xc = x.contiguous();
    auto out = torch::zeros_like(xc);
    long n = xc.numel(); int threads = 256;
    k<<<(n + threads - 1) / threads, threads>>>(xc.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n, xc.size(1), spin_ns);
    return out;
}
"""
ext = load_inline(name="NAME", cpp_sources="torch::Tensor f(torch::Tensor x, torch::Tensor b, double s, int64_t spin_ns);",
                  cuda_sources=cuda_source, functions=["f"])
'''

SPIN_NS = 200_000  # the spinning kernel waits 200 us before it writes

CANDIDATES = {
    # torch::zeros then a <<<>>> launch: a capture records only the zeros' memset
    "legacy_zeros": "return ext.f(x, self.bias, self.scale, 0)",
    # the same, spinning for 200 us first: every mode must time at least that
    "legacy_spin": f"return ext.f(x, self.bias, self.scale, {SPIN_NS})",
    # its timed calls really compute something else: right while checked, zeros once timed
    "zeros_when_timed": """self._calls = getattr(self, "_calls", 0) + 1
        return ext.f(x, self.bias, self.scale, 0) if self._calls <= 30 else torch.zeros_like(x)""",
}


def _evaluate(root, build_cache, mode):
    before = EXTENSION.replace("NAME", "legacy_stream_test")
    candidates = [(name, scale_bias_relu(body, before=before)) for name, body in CANDIDATES.items()]
    return evaluate_in_mode(root, build_cache, "1_Scale_Bias_ReLU", None, candidates, mode)


@pytest.fixture(scope="module", params=["auto", "graph", "eager"])
def by_mode(request, tmp_path_factory, build_cache):
    return request.param, _evaluate(tmp_path_factory.mktemp(f"legacy-{request.param}"), build_cache, request.param)


def test_a_legacy_stream_kernel_is_correct_and_timed_whole_in_every_mode(by_mode):
    mode, records = by_mode
    for name in ("legacy_zeros", "legacy_spin"):
        record = records[name]
        assert record.decision.status is Status.CORRECT, (mode, name, record.decision.reason)
        assert record.timing.stats is not None and record.timing.paired is not None
    spin = records["legacy_spin"]
    assert spin.timing.stats.median_ms >= SPIN_NS / 1e6, (mode, spin.timing.stats.median_ms, spin.timing.paired.protocol)


def test_a_graph_that_left_out_a_legacy_stream_launch_is_not_timed_and_the_record_says_why(by_mode):
    mode, records = by_mode
    record = records["legacy_zeros"]
    if record.timing.stats.timing_mode == "eager" and mode != "eager":  # graphs were asked for (graph, or auto on this launch-bound problem)
        assert record.timing.paired.protocol == "eager, stream sync", record.timing.paired.protocol  # the calling stream is the legacy default stream
        assert record.timing.stats.fallback.startswith(OUTSIDE_CAPTURE), record.timing.stats.fallback
        assert any(OUTSIDE_CAPTURE in w for w in record.decision.warnings)
    if mode == "graph":
        assert record.timing.stats.timing_mode == "eager" and OUTSIDE_CAPTURE in record.timing.stats.fallback


def test_a_kernel_whose_timed_calls_compute_something_else_still_fails_at_the_last_timed_call(by_mode):
    mode, records = by_mode
    record = records["zeros_when_timed"]
    assert record.decision.status is Status.INCORRECT and record.decision.reason.startswith("last timed call on trial 1 (eval)"), (mode, record.decision.reason)
