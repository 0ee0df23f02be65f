"""The timer used by every worker, for the reference and the candidates alike.

CUDA: events around each call, the L2 cache flushed (a 2x-L2 buffer written) before every timed
call outside the events, warm-up by time, input sets rotated, adaptive repetition until the
relative standard error of the median is below the target or the budget is spent.
CPU: `time.perf_counter_ns` around each call, same stopping rule.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from harness.records import TimingStats, relative_standard_error_of_median


def _stop_reason(samples: list[float], started: float, cfg: Any) -> str | None:
    n = len(samples)
    if n >= cfg.max_reps:
        return "max_reps"
    if n >= cfg.min_reps and relative_standard_error_of_median(samples) <= cfg.target_rse:
        return "target_rse"
    if n >= 1 and time.perf_counter() - started >= cfg.budget_s:
        return "budget"
    return None


def time_forward(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], device: torch.device, cfg: Any) -> TimingStats:
    """Time `fn(*args)` over `arg_sets` (rotated) with the timing config `cfg`."""
    if device.type == "cuda":
        return _time_cuda(fn, arg_sets, device, cfg)
    return _time_cpu(fn, arg_sets, cfg)


def _warm_up(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], cfg: Any, sync: Callable[[], None]) -> int:
    calls = 0
    started = time.perf_counter()
    while calls == 0 or (time.perf_counter() - started) * 1e3 < cfg.warmup_ms:
        fn(*arg_sets[calls % len(arg_sets)])
        sync()
        calls += 1
    return calls


def _time_cuda(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], device: torch.device, cfg: Any) -> TimingStats:
    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    flush = None
    if cfg.flush_l2:
        l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        flush = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.int32, device=device)
    warmup_calls = _warm_up(fn, arg_sets, cfg, sync)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples: list[float] = []
    started = time.perf_counter()
    while (reason := _stop_reason(samples, started, cfg)) is None:
        args = arg_sets[len(samples) % len(arg_sets)]
        if flush is not None:
            flush.zero_()
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    sync()
    return TimingStats.from_samples(samples, timer="cuda_events", warmup_calls=warmup_calls, stopped_by=reason)


def _time_cpu(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], cfg: Any) -> TimingStats:
    warmup_calls = _warm_up(fn, arg_sets, cfg, lambda: None)
    samples: list[float] = []
    started = time.perf_counter()
    while (reason := _stop_reason(samples, started, cfg)) is None:
        args = arg_sets[len(samples) % len(arg_sets)]
        t0 = time.perf_counter_ns()
        fn(*args)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return TimingStats.from_samples(samples, timer="perf_counter", warmup_calls=warmup_calls, stopped_by=reason)
