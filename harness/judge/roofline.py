"""Speed-of-light: the roofline floor of a problem on a device.

Per problem (counted in the judge on one forward of the reference): the floating-point operations
(`torch.utils.flop_counter`, which counts matrix products and convolutions) and the fewest bytes
any implementation must move (each input read once, each output written once, each parameter and
buffer read once). Per device: the peak device-to-device copy bandwidth (bytes read plus bytes
written) and the matrix-multiply rate for the problem's dtype, measured once and cached in a file
per (device, torch, dtype, TF32). The floor is the larger of operations / rate and bytes /
bandwidth; a time under it means the measurement or the computation is not what it claims.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from harness.core.config import Device
from harness.core.integrity import CPU_COPY_BYTES
from harness.core.records import SpeedOfLight
from harness.device.environment import cpu_name


@dataclasses.dataclass(frozen=True)
class Work:
    flops: int  # matmul/conv floating-point operations of one forward
    min_bytes: int  # inputs + outputs + parameters and buffers, each counted once
    dtype: str  # the floating dtype holding the most bytes among inputs and parameters


@dataclasses.dataclass(frozen=True)
class Peaks:
    tflops: float  # measured matrix-multiply rate, TFLOP/s
    gbps: float  # measured copy bandwidth, GB/s (bytes read + written)
    source: str  # "measured" or the cache file it was read from


def count_work(model: torch.nn.Module, args: Sequence[Any]) -> Work:
    """FLOPs and minimum bytes of `model(*args)` (run once, under no_grad)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(*args)
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    seen: set[tuple[Any, int]] = set()
    total = 0
    by_dtype: dict[torch.dtype, int] = {}

    def add(t: Any, reads_dtype: bool) -> None:
        nonlocal total
        if not isinstance(t, torch.Tensor):
            return
        key = (t.untyped_storage().data_ptr(), t.data_ptr())
        if key in seen:
            return
        seen.add(key)
        nbytes = t.numel() * t.element_size()
        total += nbytes
        if reads_dtype and t.is_floating_point():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + nbytes

    for a in args:
        add(a, True)
    for p in list(model.parameters()) + list(model.buffers()):
        add(p, True)
    for o in outputs:
        add(o, False)
    dtype = max(by_dtype, key=by_dtype.__getitem__) if by_dtype else torch.float32
    return Work(flops=int(counter.get_total_flops()), min_bytes=total, dtype=str(dtype).removeprefix("torch."))


def floor(work: Work, peaks: Peaks) -> SpeedOfLight:
    compute_ms = work.flops / (peaks.tflops * 1e12) * 1e3 if peaks.tflops > 0 else 0.0
    memory_ms = work.min_bytes / (peaks.gbps * 1e9) * 1e3 if peaks.gbps > 0 else 0.0
    return SpeedOfLight(
        flops=work.flops,
        min_bytes=work.min_bytes,
        dtype=work.dtype,
        peak_tflops=peaks.tflops,
        peak_gbps=peaks.gbps,
        floor_ms=max(compute_ms, memory_ms),
        bound="compute" if compute_ms > memory_ms else "memory",
        peaks_source=peaks.source,
    )


def device_peaks(device: torch.device, dtype: str, cache_dir: Path) -> Peaks:
    """Peaks for `dtype` on `device`: from the cache file when there, else measured and cached.
    A lock on the file keeps two workers from measuring (and disturbing each other) at once."""
    tf32 = device.type == Device.CUDA and dtype == "float32" and torch.backends.cuda.matmul.allow_tf32
    name = torch.cuda.get_device_name(device) if device.type == Device.CUDA else cpu_name()
    label = (
        f"{name}|torch "
        f"{torch.__version__}|{dtype}|tf32={tf32}|threads={torch.get_num_threads() if device.type == Device.CPU else 0}"
    )
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40]
    path = cache_dir / f"{slug}-{hashlib.sha256(label.encode()).hexdigest()[:16]}.json"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                return Peaks(tflops=float(data["tflops"]), gbps=float(data["gbps"]), source=str(path))
            except (ValueError, KeyError, OSError):
                pass  # a damaged cache file is measured again
        tflops = _matmul_tflops(
            device, getattr(torch, dtype) if dtype in ("float16", "bfloat16", "float64") else torch.float32
        )
        gbps = _copy_gbps(device)
        path.write_text(
            json.dumps(
                {
                    "label": label,
                    "tflops": tflops,
                    "gbps": gbps,
                    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=1,
            )
        )
        return Peaks(tflops=tflops, gbps=gbps, source="measured")


def _best_ms(fn: Any, device: torch.device, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        if device.type == Device.CUDA:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def _matmul_tflops(device: torch.device, dtype: torch.dtype) -> float:
    n = 8192 if device.type == Device.CUDA else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)  # random data: zeros run faster than real data
    b = torch.randn(n, n, device=device, dtype=dtype)
    ms = _best_ms(lambda: torch.mm(a, b), device, reps=10 if device.type == Device.CUDA else 3)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def _copy_gbps(device: torch.device) -> float:
    if device.type == Device.CUDA:
        free, _ = torch.cuda.mem_get_info(device)
        nbytes = min(1 << 30, free // 8)
    else:
        nbytes = CPU_COPY_BYTES
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = _best_ms(lambda: dst.copy_(src), device, reps=20 if device.type == Device.CUDA else 5)
    return 2 * nbytes / (ms * 1e-3) / 1e9
