"""Measurement: the timer's protocol, the profile parser, speed-of-light, baselines and their reuse."""
import time
import types

import pytest
import torch

from tests.records import reference_record
from harness.core.config import TimerSettings
from harness.core.pairing import paired_speedup
from harness.core.protocol import TimingProtocol
from harness.core.records import Baseline, CallProfile, ReferenceRecord, SpeedOfLight, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.device.profile import AFTER_RANGE, CALL_RANGE, RETURN_RANGE, summarize_trace
from harness.device.timing import BATCH, HOLD_CYCLES, HOLD_MAX_CYCLES, Hold, _sample_cuda, batch_size, time_forward
from harness.judge.roofline import Peaks, Work, count_work, device_peaks, floor
from harness.parent.verdict import VerdictRules, compare_times, timing_warnings
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem, fast_config

CPU = torch.device("cpu")


def timing_cfg(**changes):
    base = dict(warmup_ms=0, min_reps=3, max_reps=12, budget_s=5.0, target_rse=1e-9, flush_l2=True,
                mode="eager", subtract_overhead=True)
    base.update(changes)
    return TimerSettings(**base)


def stats(samples, **fields):
    return TimingStats.from_samples(samples, timer="cuda_events", warmup_calls=1, stopped_by="target_rse", **fields)


EAGER = TimingProtocol("eager", "stream")


def paired(reference_ms, candidate_ms, protocol=EAGER, rounds=4, clock=None):
    """A paired timing of `rounds` rounds whose sides read these medians in every round."""
    return paired_speedup([stats([reference_ms] * 5, sm_clock_mhz=clock)] * rounds, [stats([candidate_ms] * 5)] * rounds, protocol)


# -- timer ---------------------------------------------------------------------------------------


def test_calls_rotate_over_every_input_set_in_order():
    seen = []
    sets = [[torch.full((1,), float(i))] for i in range(3)]
    result = time_forward(lambda x: seen.append(int(x.item())), sets, CPU, timing_cfg(max_reps=7))
    timed = seen[-7:]
    assert timed == [0, 1, 2, 0, 1, 2, 0]
    assert result.input_sets == 3 and result.n == 7 and result.stopped_by == "max_reps"


def test_sampling_stops_at_max_reps_or_budget_with_the_reason_recorded():
    assert time_forward(lambda: None, [[]], CPU, timing_cfg(max_reps=5)).stopped_by == "max_reps"
    slow = time_forward(lambda: __import__("time").sleep(0.02), [[]], CPU, timing_cfg(max_reps=10_000, budget_s=0.1))
    assert slow.stopped_by == "budget" and 1 <= slow.n < 10_000


def test_a_batch_of_a_slow_call_holds_only_what_fits_in_the_budget_left():
    assert batch_size(727.0, 0.5, 2000) == 1  # a 727 ms call in a 0.5 s round: one region, not 7.3 s of them
    assert batch_size(727.0, 1.5, 2000) == 2
    assert batch_size(727.0, -0.2, 2000) == 1  # past the budget with nothing sampled yet: still one
    assert batch_size(0.01, 0.5, 2000) == BATCH  # a fast call keeps the whole batch
    assert batch_size(0.0, 0.5, 2000) == BATCH  # time per call not known yet
    assert batch_size(5.0, 10.0, 3) == 3  # never past max_reps


@pytest.mark.gpu
def test_a_slow_cuda_call_is_sampled_in_batches_that_fit_its_budget():
    """A call of about 100 ms under a 0.3 s budget: three regions or so, where a batch of BATCH
    would take 1 s and ten samples."""
    device = torch.device("cuda")
    slow = time_forward(lambda: torch.cuda._sleep(200_000_000), [[]], device, timing_cfg(max_reps=2000, budget_s=0.3))
    assert slow.stopped_by == "budget" and 1 <= slow.n < BATCH


class FakeEvent:
    """A CUDA event's host side: `fired` is what a query finds."""

    def __init__(self, enable_timing=False, fired=False):
        self.fired = fired

    def record(self):
        pass

    def query(self):
        return self.fired

    def elapsed_time(self, other):
        return 0.5


def test_a_held_region_the_gpu_reached_before_its_call_was_queued_is_dropped_and_the_next_hold_is_longer():
    spun = []
    hold = Hold(event=FakeEvent, spin=spun.append)
    hold.begin()
    hold.start()
    late = [hold.late(FakeEvent()), hold.late(FakeEvent(fired=True))]  # queued in time; the GPU got there first
    hold.done()
    assert late == [False, True] and hold.keep([0.01, 0.31], late) == [0.01] and hold.waits == 1
    assert hold.cycles == 2 * HOLD_CYCLES and hold.longest_ms == 0.5 and not hold.ended  # longer, not ended
    hold.start()
    on_time = [hold.late(FakeEvent())]
    hold.done()
    assert hold.keep([0.01], on_time) == [0.01] and hold.cycles == 2 * HOLD_CYCLES  # none late: the hold stays
    assert spun == [HOLD_CYCLES, 2 * HOLD_CYCLES]
    hold.begin()
    assert hold.waits == 0 and hold.cycles == 2 * HOLD_CYCLES  # a new round counts afresh from the hold it reached


def test_a_batch_late_behind_the_longest_hold_is_kept_and_ends_the_holding():
    """A call that waits for the GPU inside (`.item()`) is late behind any hold: after the longest, its batches are
    kept and no longer queued behind a spin that only costs GPU time."""
    spun = []
    hold = Hold(event=FakeEvent, spin=spun.append)
    hold.cycles = HOLD_MAX_CYCLES
    hold.start()
    late = [hold.late(FakeEvent(fired=True))]
    hold.done()
    assert hold.keep([0.31], late) == [0.31] and hold.waits == 0 and hold.cycles == 0 and hold.ended
    hold.start()
    late = [hold.late(FakeEvent(fired=True))]
    hold.done()
    assert hold.keep([0.32], late) == [0.32] and hold.waits == 0 and spun == [HOLD_MAX_CYCLES]  # unheld from now on


@pytest.mark.gpu
def test_a_held_timing_leaves_out_the_host_being_late_and_an_unheld_one_does_not():
    """Each call makes the host 300 us late, then launches a microsecond of GPU work: unheld, every
    region times the host's 300 us; held, the regions the host was late for are dropped, the hold
    grows until the batch is queued behind it, and the regions time the GPU's work."""
    device = torch.device("cuda")
    x = torch.zeros(1024, device=device)

    def late_call():
        time.sleep(0.0003)
        x.add_(1.0)

    cfg = timing_cfg(max_reps=300, budget_s=1.0, target_rse=1e-9)
    unheld = _sample_cuda([late_call], device, cfg, "stream", None, clocks=False)
    held = _sample_cuda([late_call], device, cfg, "stream", None, clocks=False, hold=Hold())
    assert unheld.median_ms > 0.25 and unheld.host_waits == 0 and unheld.held_ms == 0.0
    assert held.median_ms < 0.05 and held.host_waits > 0 and held.held_ms > 3.0


def test_overhead_is_measured_and_subtracted_from_statistics_not_from_raw_samples():
    result = stats([1.0, 1.2, 1.1], overhead_ms=0.1, subtract=True)
    assert result.samples_ms == (1.0, 1.2, 1.1)
    assert result.median_ms == pytest.approx(1.0) and result.min_ms == pytest.approx(0.9)
    assert stats([0.05, 0.06], overhead_ms=0.1, subtract=True).median_ms == 0.0  # never negative
    timed = time_forward(lambda: None, [[]], CPU, timing_cfg())
    assert timed.overhead_ms > 0 and timed.overhead_subtracted


def test_graph_mode_on_cpu_falls_back_to_eager_and_says_so():
    result = time_forward(lambda: None, [[]], CPU, timing_cfg(mode="graph"))
    assert result.timing_mode == "eager" and "CUDA graphs need a CUDA device" in result.fallback


def test_unstable_or_unsettled_timing_warns_with_what_to_do():
    cfg = types.SimpleNamespace(target_rse=0.005, unstable_iqr=0.10)  # the two rules a timing's warnings read
    warnings = timing_warnings(stats([1.0, 1.0, 2.0, 2.0, 1.5]), cfg)
    assert any("unstable timing" in w and "interquartile" in w for w in warnings)
    assert any("did not settle" in w and "budget_s" in w for w in warnings)
    assert timing_warnings(stats([1.0] * 20), cfg) == []


def test_power_or_thermal_capping_after_timing_is_reported():
    cfg = types.SimpleNamespace(target_rse=1.0, unstable_iqr=1.0)
    capped = timing_warnings(stats([1.0] * 5, clock_event_reasons="0x0000000000000004"), cfg)
    assert any("software power cap" in w for w in capped)
    assert timing_warnings(stats([1.0] * 5, clock_event_reasons="0x0000000000000001"), cfg) == []  # idle is not a slowdown


def test_time_below_the_calls_own_profiled_gpu_time_is_suspect_time():
    from harness.core.integrity import implausible_time

    profile = CallProfile(kernel_ms=2.0, span_ms=2.1, launches=3, streams=1, after_return=0)
    (found,) = implausible_time(stats([1.0] * 5), 2.0, 2.0, profile, None, 50, 0.95)
    assert found[0].value == "suspect-time" and "below the GPU time of its own profiled call" in found[1]
    assert implausible_time(stats([2.05] * 5), 1.0, 2.0, profile, None, 50, 0.95) == []


def test_a_hold_that_ended_warns_and_one_that_held_throughout_does_not(make_config):
    from harness.core.pairing import pooled

    cfg = types.SimpleNamespace(target_rse=1.0, unstable_iqr=1.0)
    held = stats([1.0] * 5, held_ms=32.1, host_waits=3)
    ended = stats([1.0] * 5, held_ms=32.1, host_waits=3, hold_ended=True)
    assert timing_warnings(held, cfg) == []
    (warning,) = timing_warnings(ended, cfg)
    assert "the hold ended" in warning and "32.1 ms" in warning and "unheld" in warning
    after = stats([1.0] * 5, hold_ended=True)  # a later round: unheld from its start
    protocol = TimingProtocol("eager", "stream", hold=True)
    assert pooled([held, after], protocol).hold_ended and not pooled([held, held], protocol).hold_ended
    ratio = paired_speedup([ended] * 3, [held] * 3, protocol)  # the reference's hold ended, the candidate's did not
    _, _, notes, _ = compare_times(held, ratio, None, _reference(), VerdictRules.of(make_config()))
    assert [w for w in notes if "hold ended" in w][0].startswith("the reference's hold ended")
    _, _, notes, _ = compare_times(held, paired_speedup([held] * 3, [held] * 3, protocol), None, _reference(), VerdictRules.of(make_config()))
    assert not [w for w in notes if "hold ended" in w]


def test_launch_bound_call_suggests_graph_mode():
    cfg = types.SimpleNamespace(target_rse=1.0, unstable_iqr=1.0)
    profile = CallProfile(kernel_ms=0.01, span_ms=0.04, launches=6, streams=1, after_return=0)
    assert any("launch-bound" in w and "timing.mode=graph" in w for w in timing_warnings(stats([0.05] * 5), cfg, profile))


# -- profile parsing -------------------------------------------------------------------------------


def _trace():
    """Two profiled calls. Each has a start marker, a kernel on the calling stream (7) and, after
    forward returns, a closing marker on stream 7. The second call also has side-stream work
    (stream 13) that outlives the closing marker, and a thread's launch after forward returned.
    One more kernel is launched after the last call."""
    events = [
        {"cat": "user_annotation", "name": CALL_RANGE, "ts": 100, "dur": 50},
        {"cat": "user_annotation", "name": RETURN_RANGE, "ts": 150, "dur": 50},
        {"cat": "user_annotation", "name": CALL_RANGE, "ts": 300, "dur": 40},
        {"cat": "user_annotation", "name": RETURN_RANGE, "ts": 340, "dur": 60},
        {"cat": "user_annotation", "name": AFTER_RANGE, "ts": 400, "dur": 100},
    ]
    launches = [  # correlation, host launch, GPU start, stream, name, duration (all µs)
        (1, 101, 105, 7, "marker", 1), (2, 110, 115, 7, "gemm", 40), (3, 151, 156, 7, "closing", 1),
        (4, 301, 305, 7, "marker", 1), (5, 310, 315, 7, "gemm", 42), (6, 320, 325, 13, "side_work", 60),
        (7, 341, 358, 7, "closing", 1), (8, 345, 390, 13, "thread_work", 5), (9, 450, 455, 13, "late_work", 5),
    ]
    for corr, launch, start, stream, name, dur in launches:
        events.append({"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch, "dur": 2, "args": {"correlation": corr}})
        events.append({"cat": "kernel", "name": name, "ts": start, "dur": dur, "args": {"correlation": corr, "stream": stream}})
    events.append({"cat": "gpu_user_annotation", "name": CALL_RANGE, "ts": 105, "dur": 50})
    return events


def test_profile_sums_kernels_per_call_without_the_markers_and_counts_streams():
    first, second = summarize_trace(_trace())
    assert first.kernel_ms == pytest.approx(0.040) and first.launches == 1 and first.streams == 1
    assert second.kernel_ms == pytest.approx(0.102) and second.launches == 2 and second.streams == 2
    assert {k.name for k in second.kernels} == {"gemm", "side_work"}


def test_profile_counts_work_launched_after_the_call_returned():
    first, second = summarize_trace(_trace())
    assert first.after_return == 0 and second.after_return == 2  # the thread's launch, and the late one


def test_profile_counts_work_still_running_when_the_calling_stream_drained():
    first, second = summarize_trace(_trace())
    assert first.busy_after_return == 0 and second.busy_after_return == 1  # side_work ends at 385, closing starts at 358


# -- speed of light -----------------------------------------------------------------------------------


def test_work_counts_matmul_flops_and_each_tensor_once():
    model = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    work = count_work(model, [x])
    assert work.flops == 2 * 8 * 64 * 32
    assert work.min_bytes == 4 * (8 * 64 + 64 * 32 + 32 + 8 * 32)
    assert work.dtype == "float32"


def test_floor_is_the_larger_of_compute_and_memory_time():
    compute = floor(Work(flops=2_000_000_000, min_bytes=1_000, dtype="float32"), Peaks(tflops=1.0, gbps=100.0, source="t"))
    assert compute.bound == "compute" and compute.floor_ms == pytest.approx(2.0)
    memory = floor(Work(flops=10, min_bytes=1_000_000_000, dtype="float32"), Peaks(tflops=1.0, gbps=100.0, source="t"))
    assert memory.bound == "memory" and memory.floor_ms == pytest.approx(10.0)


def test_device_peaks_are_measured_once_then_read_from_the_cache(tmp_path):
    first = device_peaks(CPU, "float32", tmp_path)
    second = device_peaks(CPU, "float32", tmp_path)
    assert first.source == "measured" and first.tflops > 0 and first.gbps > 0
    assert second.source.endswith(".json") and (second.tflops, second.gbps) == (first.tflops, first.gbps)


def _reference(floor_ms=1.0, clock=None, baselines=()):
    sol = SpeedOfLight(flops=10**9, min_bytes=10**6, dtype="float32", peak_tflops=1.0, peak_gbps=1000.0, floor_ms=floor_ms, bound="compute")
    return reference_record(run_id="r", problem="p", problem_hash="h", problem_path="p.py", device="cuda", device_name="gpu", ok=True, reason="ok",
                           timing=stats([4.0] * 5, sm_clock_mhz=clock), speed_of_light=sol, baselines=baselines)


def test_time_below_the_bytes_floor_is_flagged_impossible_with_evidence(make_config):
    """The hard floor is the fewest bytes at peak bandwidth: 10**6 B at 1000 GB/s = 0.001 ms."""
    cfg = make_config()
    measures, notes, _, found = compare_times(stats([0.0005] * 5), paired(4.0, 0.0005), None, _reference(floor_ms=1.0), VerdictRules.of(cfg))
    assert measures.sol_floor == "bytes" and measures.sol_fraction == pytest.approx(2.0)
    assert any(code.value == "implausible-time" and "below the speed-of-light floor" in why and "fewest bytes" in why for code, why in found)
    measures, notes, _, found = compare_times(stats([2.0] * 5), paired(4.0, 2.0), None, _reference(floor_ms=1.0), VerdictRules.of(cfg))
    assert measures.sol_floor == "roofline" and measures.sol_fraction == pytest.approx(0.5) and found == []


def test_a_faster_algorithm_than_the_references_is_a_note_not_a_flag(make_config):
    """diag(A) @ B as a row scaling: below the reference's FLOP floor (1 ms here), above the bytes floor."""
    measures, notes, warnings, found = compare_times(stats([0.5] * 5), paired(4.0, 0.5), None, _reference(floor_ms=1.0), VerdictRules.of(make_config()))
    assert found == [] and not any("algorithm" in w for w in warnings)
    assert measures.sol_floor == "bytes" and measures.sol_ms == pytest.approx(0.001) and measures.sol_fraction == pytest.approx(0.002)
    (note,) = notes
    assert note.startswith("faster than the reference's algorithm: 0.5 ms is below its roofline 1 ms")


def test_speedups_over_every_baseline_and_clock_moves_are_reported(make_config):
    compiled = Baseline("torch.compile(default)", True, "ok", timing=stats([3.0] * 5), paired=paired(4.0, 3.0))
    failed = Baseline("torch.compile(max-autotune)", False, "build failed: x")
    measures, _, warnings, _ = compare_times(stats([2.0] * 5, sm_clock_mhz=1500.0), paired(4.0, 2.0, clock=1980.0), None, _reference(baselines=(compiled, failed)), VerdictRules.of(make_config()))
    assert measures.speedup == pytest.approx(2.0) and measures.reference_ms == pytest.approx(4.0)
    assert measures.speedups == {"torch.compile(default)": pytest.approx(1.5)}
    assert any("SM clock 1500 MHz" in w for w in warnings)


# -- baselines and reuse (real workers on the CPU) -----------------------------------------------------------


def _evaluate(cfg, run_id):
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    candidate = Candidate("cpp_fused", cfg.path(cfg.solutions_dir) / problem.name / "cpp_fused.py")
    store = RunStore(cfg.path(cfg.results_dir), run_id)
    (record,) = evaluate_problem(problem, [candidate], cfg, "cpu", store)
    (reference,) = [r for r in read_records(store.records_path) if isinstance(r, ReferenceRecord)]
    return record, reference


COMPILED = ("baselines.compile_modes=[default]", "timeouts.check=600")


@pytest.fixture(scope="module")
def compiled_first(tmp_path_factory, build_cache, measurement_cache):
    """The reference and cpp_fused with a torch.compile baseline, its timings kept for reuse: the run "first" of
    the reuse test below, and the evaluation the baseline's own test checks (a torch.compile on the CPU, 10-25 s:
    once for both). Its measurement cache is the session's, as make_config's is."""
    cfg = fast_config(tmp_path_factory.mktemp("compiled"), build_cache, measurement_cache, "timing.reuse_reference=true", *COMPILED)
    return _evaluate(cfg, "first")


@pytest.mark.slow
def test_torch_compile_baseline_is_checked_timed_and_compared(compiled_first):
    record, reference = compiled_first
    (baseline,) = reference.timing.baselines
    assert baseline.name == "torch.compile(default)" and baseline.ok, baseline.reason
    assert baseline.compile_seconds > 0 and baseline.max_abs_error is not None and baseline.timing.n >= 3
    assert record.decision.status is Status.CORRECT and set(record.timing.speedups) == {"torch.compile(default)"}
    assert reference.profile.speed_of_light is not None and record.timing.sol_fraction is not None


def test_a_baseline_timed_under_another_protocol_gives_no_speedup_over_it(make_config):
    compiled = Baseline("torch.compile(default)", True, "ok", timing=stats([3.0] * 5), paired=paired(4.0, 3.0))
    strict = TimingProtocol("eager", "device", "device sync for both sides because the candidate: its profiled call ran GPU work on 3 streams")
    measures, _, warnings, _ = compare_times(stats([2.0] * 5), paired(4.0, 2.0, protocol=strict), None, _reference(baselines=(compiled,)), VerdictRules.of(make_config()))
    assert measures.speedups == {} and measures.baseline_ms == {"torch.compile(default)": 3.0}
    assert any("no speedup over torch.compile(default)" in w and "eager, device sync" in w for w in warnings)


@pytest.mark.slow
def test_baselines_are_reused_only_when_asked_and_say_from_which_run(make_config, compiled_first):
    first_record, first = compiled_first
    second_record, second = _evaluate(make_config("timing.reuse_reference=true", *COMPILED), "second")
    assert first.timing.timing_reused_from == "" and second.timing.timing_reused_from == "first"
    assert second.timing.baselines == first.timing.baselines and second.profile.speed_of_light == first.profile.speed_of_light
    # the eager reference is timed with each candidate, never reused
    assert second_record.timing.paired is not None and second_record.timing.paired.reference != first_record.timing.paired.reference
    _, fresh = _evaluate(make_config(*COMPILED), "fresh")
    assert fresh.timing.timing_reused_from == "" and fresh.timing.baselines != first.timing.baselines


def test_paired_graph_mode_on_cpu_times_both_sides_eagerly_and_says_why():
    from harness.core import protocol as P
    from harness.core.pairing import choose_protocol
    from harness.device.timing import NO_GRAPHS_ON_CPU, Timer

    timer = Timer(lambda: None, [[]], CPU, timing_cfg(mode="graph"))
    why = timer.prepare(graph=True)
    assert why == NO_GRAPHS_ON_CPU and timer.graphs is None
    chosen = choose_protocol("graph", "auto", P.Ready(graph_error=why), P.Ready(graph_error=why))
    assert chosen.timing_mode == "eager" and "CUDA graphs need a CUDA device" in chosen.timing_mode_reason
    assert timer.round(chosen.timing_mode, chosen.sync, 4).timing_mode == "eager"


def test_on_the_cpu_a_working_set_that_fits_the_measured_buffer_has_no_hard_floor():
    """The CPU's copy bandwidth is measured over 64 MiB and its caches are not flushed between timed
    calls: a smaller working set can beat that bandwidth from cache, honestly. On the GPU (L2 flushed)
    and for a larger working set, the floor holds."""
    from harness.core.integrity import CPU_COPY_BYTES, hard_floor_ms, implausible_time
    from harness.core.records import SpeedOfLight

    def sol(min_bytes: int) -> SpeedOfLight:
        return SpeedOfLight(flops=0, min_bytes=min_bytes, dtype="float32", peak_tflops=1.0, peak_gbps=10.0,
                            floor_ms=min_bytes / 1e7, bound="memory")

    small, large = sol(132_000), sol(2 * CPU_COPY_BYTES)
    assert hard_floor_ms(small, "cpu") == 0.0 and hard_floor_ms(small, "cuda") == small.bytes_ms > 0
    assert hard_floor_ms(large, "cpu") == large.bytes_ms
    fast = stats([small.bytes_ms / 2] * 5)  # twice the DRAM bandwidth: from cache
    assert implausible_time(fast, 2.0, 1.0, None, small, 50, 0.95, "cpu") == []
    (found,) = implausible_time(fast, 2.0, 1.0, None, small, 50, 0.95, "cuda")
    assert found[0] == "implausible-time"
