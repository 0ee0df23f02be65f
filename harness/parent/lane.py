"""A lane: where one evaluation runs at a time, one GPU (its workers see only that GPU, through
CUDA_VISIBLE_DEVICES) or the CPU. Two timings never share a lane.

Its own module so that an evaluation (harness.parent.evaluate) and the executors that make lanes
(harness.parent.local, harness.parent.ray_executor) all import it at the top, without importing each other.
"""

from __future__ import annotations

import dataclasses
import os

from harness.core.config import Config
from harness.parent.supervise import Launcher

__all__ = ["Lane", "wants_prestart"]


@dataclasses.dataclass
class Lane:
    label: str  # "cuda:1" (the GPU's CUDA_VISIBLE_DEVICES value), "" on a CPU run
    gpu: str  # the CUDA_VISIBLE_DEVICES value its workers get ("" = inherit the parent's)
    launcher: Launcher

    @classmethod
    def single(cls, cfg: Config, device: str, gpu: str = "", label: str = "", index: int = 0) -> "Lane":
        """`index`: the lane's place among the run's lanes, which picks its CPUs (harness.parent.quiet)."""
        # nvidia-smi (clocks, identity) numbers GPUs in PCI order; CUDA must number them the same way
        env = {"CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")} if gpu else {}
        launcher = Launcher(prestart=wants_prestart(cfg, device), env=env, lane_index=index, prewarm="cuda" if device == "cuda" else "", spares=cfg.workers.spares, judges=cfg.workers.prestart_judge)
        return cls(label, gpu, launcher)

    @property
    def index(self) -> int:
        return self.launcher.lane_index


def wants_prestart(cfg: Config, device: str) -> bool:
    """Prestarted workers import torch while another worker runs: on by default for CUDA runs only,
    where the GPU is timed; on a CPU run that import would share the CPU with a timing."""
    return cfg.workers.prestart == "always" or (cfg.workers.prestart == "auto" and device == "cuda")
