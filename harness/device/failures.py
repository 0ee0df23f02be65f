"""What model code raised, as a status, and loading a model's module. Shared with the judge
(harness.device.guard holds the tamper guard)."""

from __future__ import annotations

import sys
import traceback
import types
from pathlib import Path

import torch

from harness.core.errors import no_space, one_line
from harness.core.status import Status
from harness.device.buildcache import BuildFailedError, NeedsCudaError

__all__ = ["LEAK_SHARE", "WorkerFailure", "classify", "load_module"]


class WorkerFailure(Exception):
    """A failure of the model under a status of its own (not a bug of the harness)."""

    def __init__(self, status: Status, reason: str, what: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.what = what or status.value  # what failed, as reports name it: e.g. "get_inputs failed"

    def describe(self) -> str:
        """ "construct failed: ValueError: ...": what failed, then why."""
        return f"{self.what}: {self.reason}"


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
    if triton_compile_error(exc):  # Triton compiles at the first call: a build, whichever phase it falls in
        first = next((line.strip() for line in message.splitlines() if line.strip()), type(exc).__name__)
        return WorkerFailure(Status.BUILD_FAILED, f"Triton {type(exc).__name__}: {first}"[:300])
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


def triton_compile_error(exc: BaseException) -> bool:
    """Whether `exc` is Triton's failure to compile a kernel (triton.compiler.errors.CompilationError
    and its kinds), found by its class's module and name so that Triton need not be installed."""
    return any(
        cls.__module__.split(".")[0] == "triton" and cls.__name__ == "CompilationError" for cls in type(exc).__mro__
    )


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
    return (
        f" (the device had {free >> 20} MiB free of {total >> 20} MiB, and PyTorch's allocator held only "
        f"{held >> 20} MiB: memory taken outside it, and never given back?)"
    )


def load_module(path: Path, module_name: str, text: str = "", preamble: str = "") -> types.ModuleType:
    """Execute the source at `path` (or `text`, its pinned bytes, as `path`) as module
    `module_name`; its failures as WorkerFailure (a syntax error, an import or build failure).
    `preamble` (the problem's source, check.problem_globals) runs first in the same namespace."""
    source = text or path.read_text(encoding="utf-8", errors="replace")
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise WorkerFailure(Status.SYNTAX_ERROR, f"line {exc.lineno}: {exc.msg}") from None
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        if preamble:  # one namespace, as KernelBench's eval runs the two
            exec(compile(preamble, "<the problem file>", "exec"), module.__dict__)
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit at import is a failure of the module, not of the worker
        if isinstance(exc, KeyboardInterrupt):
            raise
        failure = classify(exc, Status.IMPORT_ERROR)
        if failure.status is Status.BUILD_FAILED:
            print(getattr(exc, "log", ""), file=sys.stderr, flush=True)  # the full compiler output, for the log
        raise failure from None
    return module
