"""The tamper guard: the identities of the functions a worker's measurements and reports rely on,
taken before the model's module is imported, and checked after each step the model ran in."""

from __future__ import annotations

import time as time_module
from typing import Any

import torch

from harness.core import channel, protocol
from harness.core.status import Status
from harness.device import timing
from harness.device.failures import WorkerFailure


class Guard:
    """Identities of the functions the worker's measurements and reports rely on, taken before the
    model's module is imported; a model that replaces any of them is reported as tampering.
    `worker`: the compared worker, whose class's `send` (every report) and `_call` (the checked
    forward) are guarded too."""

    def __init__(self, worker: Any) -> None:
        self.targets: list[tuple[str, Any, str]] = [
            ("time", time_module, "perf_counter"),
            ("time", time_module, "perf_counter_ns"),
            ("time", time_module, "time"),
            ("torch", torch, "save"),
            ("torch", torch, "load"),
            ("torch", torch, "equal"),
            ("torch", torch, "allclose"),
            ("torch.cuda", torch.cuda, "synchronize"),
            ("torch.cuda", torch.cuda, "Event"),
            ("torch.cuda", torch.cuda, "current_stream"),
            ("torch.cuda.Event", torch.cuda.Event, "record"),
            ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"),
            ("torch.cuda.Event", torch.cuda.Event, "synchronize"),
            ("torch.Tensor", torch.Tensor, "clone"),
            ("torch.Tensor", torch.Tensor, "cpu"),
            ("torch.Tensor", torch.Tensor, "to"),
            ("harness.device.timing", timing, "time_forward"),
            ("harness.device.timing.Timer", timing.Timer, "round"),
            ("harness.device.timing.Timer", timing.Timer, "sample"),
            ("harness.core.channel.ChannelWriter", channel.ChannelWriter, "send"),
            ("harness.core.protocol", protocol, "encode"),  # every message the worker sends goes through these two
            ("Worker", type(worker), "send"),
            ("Worker", type(worker), "_call"),
        ]
        self.original = [getattr(owner, name) for _, owner, name in self.targets]

    def check(self, when: str) -> None:
        """Raise TAMPERED when any target was replaced since the guard was made (restoring them first)."""
        changed = [
            f"{label}.{name}"
            for (label, owner, name), before in zip(self.targets, self.original)
            if getattr(owner, name) is not before
        ]
        if changed:
            for (_, owner, name), before in zip(self.targets, self.original):
                setattr(owner, name, before)  # restore, so the report itself goes out unaltered
            raise WorkerFailure(Status.TAMPERED, f"the model replaced {', '.join(changed[:4])} (seen after {when})")
