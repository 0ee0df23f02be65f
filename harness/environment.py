"""The environment block of a run, collected once in the parent (no CUDA context is created)."""
from __future__ import annotations

import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from harness import __version__
from harness.config import ROOT


def _run(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return ""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def collect_environment() -> dict[str, Any]:
    import torch

    gpus = [line.strip() for line in _run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"]).splitlines() if line.strip()]
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
        "cuda_available": torch.cuda.is_available(),
        "gpus": gpus,
        "nvcc": nvcc[-1] if nvcc else "",
        "git_sha": sha,
        "git_dirty": dirty,
    }
