"""The environment block of a run, collected once in the parent (no CUDA context is created)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from harness import __version__
from harness.core.config import ROOT, Device


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _run(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return ""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


_GPU_FIELDS = {
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "max_sm_clock_mhz",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_w",
    "power.limit": "power_limit_w",
    "clocks_event_reasons.active": "clock_event_reasons",
}


def _visible_gpu() -> list[str]:
    """nvidia-smi's selector for the first GPU CUDA_VISIBLE_DEVICES leaves visible (none: its first)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return ["-i", visible] if visible else []


def query_gpu(fields: list[str], target: Optional[list[str]] = None) -> list[str]:
    """The values of nvidia-smi's --query-gpu `fields` for one GPU (`target` selector, else the
    first visible one), read without a CUDA context; [] when nothing is readable."""
    out = _run(
        [
            "nvidia-smi",
            *(_visible_gpu() if target is None else target),
            f"--query-gpu={','.join(fields)}",
            "--format=csv,noheader,nounits",
        ]
    )
    lines = [line for line in out.splitlines() if line.strip()]
    values = [v.strip() for v in lines[0].split(",")] if lines else []
    return values if len(values) == len(fields) else []


def gpu_state(device: Any = None) -> dict[str, Any]:
    """Clocks, temperature, power and active clock-event (throttle) reasons of one GPU, as the
    driver reports them now; {} when nothing is readable. `device` is a torch CUDA device in a
    process that already uses it (found by UUID); without one, the first visible GPU."""
    target = None
    if device is not None:
        try:
            import torch

            target = ["-i", f"GPU-{torch.cuda.get_device_properties(device).uuid}"]
        except Exception:
            target = None
    for fields in (list(_GPU_FIELDS), list(_GPU_FIELDS)[:-1]):  # older drivers lack the reasons field
        values = query_gpu(fields, target)
        if values:
            state: dict[str, Any] = {}
            for field, value in zip(fields, values):
                key = _GPU_FIELDS[field]
                if key == "clock_event_reasons":
                    state[key] = value
                    continue
                try:
                    state[key] = float(value)
                except ValueError:
                    pass  # "[N/A]" and the like
            return state
    return {}


def device_identity(device: str, cpu_threads: int = 0, gpu: str = "") -> str:
    """Which physical device a run's workers use, without creating a CUDA context: the GPU's name
    and UUID (`gpu`, an nvidia-smi index or UUID, else the first visible one), or the CPU model
    and thread count."""
    if device == Device.CUDA:
        return ", ".join(query_gpu(["name", "uuid"], ["-i", gpu] if gpu else None)) or "unknown GPU"
    return f"{cpu_name()} x{cpu_threads or os.cpu_count()}"


def cpu_name() -> str:
    """The CPU model, as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect_environment() -> dict[str, Any]:
    import torch

    gpus = [
        line.strip()
        for line in _run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"]
        ).splitlines()
        if line.strip()
    ]
    nvcc = _run(["nvcc", "--version"]).splitlines()
    sha = _run(["git", "rev-parse", "HEAD"])
    dirty = bool(_run(["git", "status", "--porcelain"])) if sha else None
    return {
        "harness": __version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _package_version("triton"),
        "gpu_start": gpu_state(),
        "cuda_available": torch.cuda.is_available(),
        "gpus": gpus,
        "nvcc": nvcc[-1] if nvcc else "",
        "git_sha": sha,
        "git_dirty": dirty,
    }
