"""CUDA candidates on a real GPU (skipped without one): build, verdict, fault isolation."""
import pytest

from harness.core.status import Status
from harness.core.store import RunStore
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.sources import scale_bias_relu, scale_bias_relu_with_side_work
from tests.evaluations import evaluate_problem

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # CUDA builds and whole evaluations on the GPU

EXTENSION = r'''from torch.utils.cpp_extension import load_inline

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
'''
KERNEL = scale_bias_relu("return ext.f(x, self.bias, self.scale)", before=EXTENSION)  # NAME: the extension's; OFFSET: where it writes

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


RUN_ROOTS = {}  # run id -> run folder, to read the reference records back


def _records_path(record):
    return RUN_ROOTS[record.identity.run_id] / "records.jsonl"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, build_cache):
    from harness.core.config import load_config

    root = tmp_path_factory.mktemp("gpu")
    candidates = []
    for name, source in SOURCES.items():
        (root / f"{name}.py").write_text(source)
        candidates.append(Candidate(name, root / f"{name}.py"))
    cfg = load_config(overrides=[f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", "timing.budget_s=1"])
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "gpu")
    RUN_ROOTS[store.run_id] = store.dir
    return {r.identity.candidate: r for r in evaluate_problem(problem, candidates, cfg, "cuda", store)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cuda_candidate_verdicts(verdicts, name):
    record = verdicts[name]
    assert record.decision.status is EXPECTED[name], f"{name}: {record.decision.status.value}: {record.decision.reason}"


def test_cuda_timing_uses_events_and_gives_speedup(verdicts):
    record = verdicts["cuda_correct"]
    assert record.timing.stats.timer == "cuda_events" and record.timing.speedup > 0
    assert record.provenance.builds and record.provenance.builds[0].name == "gpu_test_ok"


def test_identical_kernels_in_another_file_reuse_the_build(verdicts):
    assert verdicts["cuda_out_of_memory"].provenance.builds[0].cache_key == verdicts["cuda_correct"].provenance.builds[0].cache_key
    assert verdicts["cuda_out_of_memory"].provenance.builds[0].cached


def test_reference_has_compile_baseline_speed_of_light_and_profile(verdicts):
    from harness.core.records import ReferenceRecord
    from harness.core.store import read_records

    record = verdicts["cuda_correct"]
    store_records = read_records(_records_path(record))
    (reference,) = [r for r in store_records if isinstance(r, ReferenceRecord)]
    assert reference.timing.baselines and reference.timing.baselines[0].ok, reference.timing.baselines
    assert reference.profile.speed_of_light.floor_ms > 0 and reference.profile.profile.launches >= 1
    assert record.integrity.profile is not None and record.integrity.profile.streams == 1 and record.timing.stats.sync == "stream"
    assert record.timing.stats.flush_bytes > 0 and record.timing.stats.overhead_ms > 0 and record.timing.sol_fraction > 0

EXTRA_WORK = {
    "plain": "pass",
    "extra_on_main_stream": "for _ in range(20): torch.mm(self.extra, self.extra)",
    "extra_on_side_stream": (
        "self.side.wait_stream(torch.cuda.current_stream())\n"
        "        with torch.cuda.stream(self.side):\n"
        "            for _ in range(20): torch.mm(self.extra, self.extra)"
    ),
    "extra_after_return": (
        "threading.Thread(target=lambda: (time.sleep(0.002), torch.mm(self.extra, self.extra))).start()"
    ),
    "synchronises_in_forward": "torch.cuda.synchronize()",
}


def _evaluate(root, build_cache, names, *overrides):
    from harness.core.config import load_config

    candidates = []
    for name in names:
        (root / f"{name}.py").write_text(scale_bias_relu_with_side_work(EXTRA_WORK[name]))
        candidates.append(Candidate(name, root / f"{name}.py"))
    # torch-only candidates that exercise the timer: flagged, not failed, so they are timed
    cfg = load_config(overrides=[f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", "timing.budget_s=1", "baselines.compile_modes=[]", "flags.no_custom_kernel=flag", *overrides])
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), root.name)
    RUN_ROOTS[store.run_id] = store.dir
    return {r.identity.candidate: r for r in evaluate_problem(problem, candidates, cfg, "cuda", store)}


@pytest.fixture(scope="module")
def streams(tmp_path_factory, build_cache):
    return _evaluate(tmp_path_factory.mktemp("streams"), build_cache, ["plain", "extra_on_main_stream", "extra_on_side_stream", "extra_after_return"])


def test_side_stream_work_is_inside_the_measurement(streams):
    main, side = streams["extra_on_main_stream"], streams["extra_on_side_stream"]
    assert main.decision.status is side.decision.status is Status.CORRECT
    assert main.timing.stats.sync == "stream" and side.timing.stats.sync == "device"
    assert "2 streams" in side.timing.stats.sync_reason and side.integrity.profile.streams == 2
    # one protocol for both sides of the ratio: the reference was timed with the device sync too
    # (timing.mode auto may time the main-stream one in graphs: the problem is launch-bound)
    assert side.timing.paired.protocol == "eager, device sync" and main.timing.paired.protocol in ("eager, stream sync", "graph, stream sync")
    assert side.timing.paired.reference.sync == "device" and main.timing.paired.reference.sync == "stream"
    assert side.integrity.profile.busy_after_return >= 1 and main.integrity.profile.busy_after_return == 0
    # Twenty 2048^2 matmuls dominate both; timed on the calling stream only, the side-stream
    # candidate would read as the tiny elementwise op (hundreds of times less).
    assert side.timing.stats.median_ms > 0.7 * main.timing.stats.median_ms, (side.timing.stats.median_ms, main.timing.stats.median_ms)
    assert any("device-wide synchronise" in w for w in side.decision.warnings)
    assert any(f.code == "side-stream" and "2 streams" in f.reason for f in side.integrity.flags)
    assert not any(f.code == "side-stream" and not f.reason.startswith("source:") for f in main.integrity.flags)  # (both make a Stream)


def test_work_launched_after_forward_returns_is_reported(streams):
    late = streams["extra_after_return"]
    assert late.integrity.profile.after_return >= 1 and late.timing.stats.sync == "device"
    assert any(f.code == "side-stream" and "after forward returned" in f.reason for f in late.integrity.flags)


def test_plain_candidate_keeps_stream_timing_without_warnings_about_streams(streams):
    plain = streams["plain"]
    assert plain.timing.stats.sync == "stream" and plain.integrity.profile.streams == 1 and plain.integrity.profile.after_return == 0


def test_candidate_without_kernels_of_its_own_is_flagged(streams):
    plain = streams["plain"]
    assert plain.integrity.custom_kernel_share == 0.0
    assert any(f.code == "no-custom-kernel" and f.reason.startswith("it brings no kernel of its own") for f in plain.integrity.flags)


def test_share_of_time_in_the_candidates_own_kernel_is_reported(verdicts):
    record = verdicts["cuda_correct"]
    assert record.integrity.custom_kernel_share is not None and record.integrity.custom_kernel_share > 0.5
    assert record.decision.status is Status.CORRECT and not any(f.code == "no-custom-kernel" for f in record.integrity.flags), record.integrity.flags


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, build_cache):
    return _evaluate(tmp_path_factory.mktemp("graphs"), build_cache, ["plain", "synchronises_in_forward"], "timing.mode=graph")


def test_graph_mode_times_replays_and_is_recorded(graphs):
    assert graphs["plain"].timing.stats.timing_mode == "graph" and graphs["plain"].timing.stats.fallback == ""


def test_graph_capture_failure_falls_back_to_eager_with_the_reason(graphs):
    record = graphs["synchronises_in_forward"]
    assert record.decision.status is Status.CORRECT and record.timing.stats.timing_mode == "eager"
    assert "graph capture failed" in record.timing.stats.fallback
    assert any("graph capture failed" in w for w in record.decision.warnings)


# CUDA cheats (the CPU-expressible ones are in test_exploits.py).
CHEATS = {
    # honest on the first call, then torch.empty: the caching allocator hands back the freed
    # buffer of its own previous output, which holds the previous call's (now stale) answer
    "returns_torch_empty": KERNEL.replace("NAME", "gpu_test_ok").replace(" OFFSET", "").replace(
        "return ext.f(x, self.bias, self.scale)",
        "self.n = getattr(self, 'n', 0) + 1\n        return ext.f(x, self.bias, self.scale) if self.n == 1 else torch.empty_like(x)",
    ),
    # compiles a kernel but computes with PyTorch
    "kernel_never_called": KERNEL.replace("NAME", "gpu_test_ok").replace(" OFFSET", "").replace(
        "return ext.f(x, self.bias, self.scale)", "return torch.relu(x * self.scale + self.bias)"
    ),
}


@pytest.fixture(scope="module")
def cheats(tmp_path_factory, build_cache):
    from harness.core.config import load_config

    root = tmp_path_factory.mktemp("cheats")
    candidates = []
    for name, source in CHEATS.items():
        (root / f"{name}.py").write_text(source)
        candidates.append(Candidate(name, root / f"{name}.py"))
    cfg = load_config(overrides=[f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", "timing.budget_s=1", "baselines.compile_modes=[]"])
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "cheats")
    RUN_ROOTS[store.run_id] = store.dir
    return {r.identity.candidate: r for r in evaluate_problem(problem, candidates, cfg, "cuda", store)}


def test_stale_memory_from_torch_empty_is_incorrect(cheats):
    record = cheats["returns_torch_empty"]
    assert record.decision.status is Status.INCORRECT and record.decision.reason.startswith("trial"), record.decision.reason


def test_kernel_compiled_but_never_called_is_no_custom_kernel(cheats):
    record = cheats["kernel_never_called"]
    assert record.decision.status is Status.NO_CUSTOM_KERNEL and record.integrity.custom_kernel_share == 0.0
    assert record.decision.reason.startswith("no-custom-kernel: none of its own kernels (k) ran"), record.decision.reason
    assert record.timing.speedup is None


def test_every_visible_gpu_is_a_lane_with_its_own_reference(make_config, tmp_path):
    """Several GPUs: candidates spread over them, each compared to the reference timed on its GPU."""
    import torch

    from harness.core.records import ReferenceRecord
    from harness.core.store import read_records
    from harness.parent.local import LocalExecutor
    from harness.parent.resources import RunResources
    from harness.parent.scratch import RunScratch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    cfg = make_config()
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    candidates = []
    for index in range(6):
        path = tmp_path / f"plain_{index}.py"
        path.write_text(scale_bias_relu())
        candidates.append(Candidate(path.stem, path))
    store = RunStore(cfg.path(cfg.results_dir), "lanes")
    resources = RunResources(cfg, "cuda", store, RunScratch.create())
    executor = LocalExecutor(resources)
    try:
        assert len(executor.lanes) == torch.cuda.device_count()
        records = executor.run_problem(problem, candidates)
    finally:
        executor.close()
        resources.close()
    references = {r.identity.lane: r for r in read_records(store.records_path) if isinstance(r, ReferenceRecord)}
    assert len(references) >= 2 and all(r.ok for r in references.values())
    assert all(r.decision.status is Status.CORRECT for r in records), [r.decision.reason for r in records]
    assert len({r.identity.lane for r in records}) >= 2
    for record in records:
        assert record.timing.paired is not None and record.timing.reference_ms == record.timing.paired.reference.median_ms


def test_a_second_pass_reuses_the_reference_profile_and_gives_the_same_verdicts(tmp_path_factory, build_cache):
    from harness.core.records import ReferenceRecord
    from harness.core.store import read_records

    measurements = tmp_path_factory.mktemp("reference-cache")
    cache = (f"measurement_cache_dir={measurements}", "timing.reuse_profile=true")
    first = _evaluate(tmp_path_factory.mktemp("cache-cold"), build_cache, ["plain", "extra_on_side_stream"], *cache)
    second = _evaluate(tmp_path_factory.mktemp("cache-warm"), build_cache, ["plain", "extra_on_side_stream"], *cache)
    (cold,) = [r for r in read_records(_records_path(first["plain"])) if isinstance(r, ReferenceRecord)]
    (warm,) = [r for r in read_records(_records_path(second["plain"])) if isinstance(r, ReferenceRecord)]
    assert cold.profile.profile_reused_from == "" and warm.profile.profile_reused_from == cold.identity.run_id
    assert (warm.profile.profile, warm.profile.speed_of_light) == (cold.profile.profile, cold.profile.speed_of_light)
    assert warm.timing.timing_mode == cold.timing.timing_mode
    for name in first:  # the cache never changes a verdict
        a, b = first[name], second[name]
        assert (a.decision.status, [f.code for f in a.integrity.flags], a.decision.reason.split(";")[0]) == (b.decision.status, [f.code for f in b.integrity.flags], b.decision.reason.split(";")[0])
