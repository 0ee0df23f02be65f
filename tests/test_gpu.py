"""CUDA candidates on a real GPU (skipped without one): build, verdict, fault isolation."""
import pytest

from harness.candidate import Candidate
from harness.evaluate import ProblemEvaluation
from harness.problem import resolve_problem
from harness.status import Status
from harness.store import RunStore

pytestmark = pytest.mark.gpu

KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* x, const float* b, float* out, float s, long n, long cols) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i] * s + b[i % cols]; out[i OFFSET] = v > 0.f ? v : 0.f; }
}
torch::Tensor f(torch::Tensor x, torch::Tensor b, double s) {
    auto xc = x.contiguous(); auto out = torch::empty_like(xc);
    long n = xc.numel(); int threads = 256;
    k<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n, xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
ext = load_inline(name="NAME", cpp_sources="torch::Tensor f(torch::Tensor x, torch::Tensor b, double s);",
                  cuda_sources=cuda_source, functions=["f"])

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale
    def forward(self, x):
        return ext.f(x, self.bias, self.scale)
'''

SOURCES = {
    "cuda_correct": KERNEL.replace("NAME", "gpu_test_ok").replace(" OFFSET", ""),
    "cuda_out_of_bounds": KERNEL.replace("NAME", "gpu_test_oob").replace(" OFFSET", " + (1L << 40)"),
    "cuda_compile_error": KERNEL.replace("NAME", "gpu_test_bad").replace(" OFFSET", " + undefined_offset"),
    "cuda_out_of_memory": KERNEL.replace("NAME", "gpu_test_ok").replace(" OFFSET", "").replace(
        "return ext.f(x, self.bias, self.scale)", "hog = torch.empty(1 << 42, device=x.device); return ext.f(x, self.bias, self.scale)"
    ),
}
EXPECTED = {
    "cuda_correct": Status.CORRECT,
    "cuda_out_of_bounds": Status.CUDA_FAULT,
    "cuda_compile_error": Status.BUILD_FAILED,
    "cuda_out_of_memory": Status.OUT_OF_MEMORY,
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, build_cache):
    from harness.config import load_config

    root = tmp_path_factory.mktemp("gpu")
    candidates = []
    for name, source in SOURCES.items():
        (root / f"{name}.py").write_text(source)
        candidates.append(Candidate(name, root / f"{name}.py"))
    cfg = load_config(overrides=[f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", "timing.budget_s=1"])
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "gpu")
    return {r.candidate: r for r in ProblemEvaluation(problem, candidates, cfg, "cuda", store).run()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cuda_candidate_verdicts(verdicts, name):
    record = verdicts[name]
    assert record.status is EXPECTED[name], f"{name}: {record.status.value}: {record.reason}"


def test_cuda_timing_uses_events_and_gives_speedup(verdicts):
    record = verdicts["cuda_correct"]
    assert record.timing.timer == "cuda_events" and record.speedup > 0
    assert record.builds and record.builds[0].name == "gpu_test_ok"


def test_identical_kernels_in_another_file_reuse_the_build(verdicts):
    assert verdicts["cuda_out_of_memory"].builds[0].cache_key == verdicts["cuda_correct"].builds[0].cache_key
    assert verdicts["cuda_out_of_memory"].builds[0].cached
