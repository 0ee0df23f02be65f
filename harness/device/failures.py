"""What model code raised, as a status; loading a model's module; the guard against a model that
replaces the functions the worker's measurements and reports rely on. Shared with the judge."""

from __future__ import annotations

import sys
import time as time_module
import traceback
import types
from pathlib import Path
from typing import Any

import torch

from harness.core import channel, protocol
from harness.core.errors import no_space, one_line
from harness.core.status import Status
from harness.device import timing
from harness.device.buildcache import BuildFailedError, NeedsCudaError

__all__ = ["LEAK_SHARE", "Guard", "WorkerFailure", "classify", "load_module", "one_line"]


class WorkerFailure(Exception):
    """A failure of the model under a status of its own (not a bug of the harness)."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_NEEDS_CUDA_MARKERS = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "no CUDA device",
)
_CUDA_FAULT_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "CUBLAS_STATUS",
    "CUDNN_STATUS_EXECUTION_FAILED",
)


def classify(exc: BaseException, default: Status) -> WorkerFailure:
    """Map an exception raised by model code to a status; `default` names the phase's failure."""
    if isinstance(exc, WorkerFailure):
        return exc
    if not isinstance(exc, BuildFailedError):
        traceback.print_exception(exc, file=sys.stderr)  # where it was raised, for the candidate's log
        sys.stderr.flush()
    full = no_space(exc)
    if full:
        return WorkerFailure(Status.HARNESS_ERROR, f"harness error: {full}")
    message = str(exc)
    if isinstance(exc, BuildFailedError):
        return WorkerFailure(Status.BUILD_FAILED, exc.first_error)
    if isinstance(exc, NeedsCudaError) or any(m in message for m in _NEEDS_CUDA_MARKERS):
        return WorkerFailure(Status.NEEDS_CUDA, one_line(exc))
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in message.lower():
        return WorkerFailure(Status.OUT_OF_MEMORY, one_line(exc))
    accelerator_error = getattr(torch, "AcceleratorError", ())
    if (accelerator_error and isinstance(exc, accelerator_error)) or any(m in message for m in _CUDA_FAULT_MARKERS):
        return WorkerFailure(Status.CUDA_FAULT, one_line(exc))
    if isinstance(exc, ImportError) and default is Status.IMPORT_ERROR:
        return WorkerFailure(Status.IMPORT_ERROR, one_line(exc))
    return WorkerFailure(default, one_line(exc) + _memory_held_outside())


LEAK_SHARE = 0.9  # device memory in use beyond this share, mostly outside PyTorch's allocator, is named


def _memory_held_outside() -> str:
    """A note when the device is nearly full while PyTorch's allocator holds little of it: memory
    taken outside the allocator (a handle, stream or cudaMalloc per call never freed) explains
    errors that do not name it ("Invalid argument")."""
    try:
        if not torch.cuda.is_initialized():
            return ""
        free, total = torch.cuda.mem_get_info()
        held = torch.cuda.memory_reserved()
    except Exception:
        return ""
    used = total - free
    if used < LEAK_SHARE * total or held > used / 2:
        return ""
    return f" (the device had {free >> 20} MiB free of {total >> 20} MiB, and PyTorch's allocator held only {held >> 20} MiB: memory taken outside it, and never given back?)"


def load_module(path: Path, module_name: str) -> types.ModuleType:
    """Execute the source at `path` as module `module_name`; its failures as WorkerFailure (a syntax error, an import or build failure)."""
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise WorkerFailure(Status.SYNTAX_ERROR, f"line {exc.lineno}: {exc.msg}") from None
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit at import is a failure of the module, not of the worker
        if isinstance(exc, KeyboardInterrupt):
            raise
        failure = classify(exc, Status.IMPORT_ERROR)
        if failure.status is Status.BUILD_FAILED:
            print(getattr(exc, "log", ""), file=sys.stderr, flush=True)  # the full compiler output, for the log
        raise failure from None
    return module


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
        changed = [f"{label}.{name}" for (label, owner, name), before in zip(self.targets, self.original) if getattr(owner, name) is not before]
        if changed:
            for (_, owner, name), before in zip(self.targets, self.original):
                setattr(owner, name, before)  # restore, so the report itself goes out unaltered
            raise WorkerFailure(Status.TAMPERED, f"the model replaced {', '.join(changed[:4])} (seen after {when})")
