"""The device a worker (or the judge) runs on: set up from the job, synchronised, and readied ahead
of the job by a prestarted worker.

What every job needs (torch, its extension builder, the build cache, records, timing) is imported
at the top of the worker's modules, so a prestarted worker waits with it loaded; nothing imported
touches the GPU (no CUDA context before the job names the device).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from harness.core.config import Device
from harness.core.status import Status
from harness.device.environment import cpu_name
from harness.device.failures import WorkerFailure
from harness.device.timing import remember_l2_default


def setup_device(job: Any) -> tuple[Any, str, str]:
    """TF32 policy, the device, the architecture builds target, and the device's name. `job`: a
    WorkerJob or JudgeJob (its `device` and `allow_tf32`)."""
    torch.backends.cuda.matmul.allow_tf32 = bool(job.allow_tf32)
    torch.backends.cudnn.allow_tf32 = bool(job.allow_tf32)
    if job.device == Device.CUDA:
        if not torch.cuda.is_available():
            raise WorkerFailure(Status.NEEDS_CUDA, "the run asked for CUDA and the process sees no CUDA device")
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        torch.empty(1, device=device)  # the context, before any model code runs
        remember_l2_default()
        major, minor = torch.cuda.get_device_capability(device)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # build for this GPU only: faster, and part of the key
        return device, f"{major}.{minor}", torch.cuda.get_device_name(device)
    return torch.device("cpu"), "cpu", cpu_name()


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == Device.CUDA:
        torch.cuda.synchronize(device)


def launch_check(device: Any) -> None:
    """On CUDA, one tiny kernel launch: a launch error that model code left pending (a kernel it
    launched with an invalid configuration and never checked) is raised here, right after its call,
    instead of in the next launch the harness makes. A synchronise does not raise such an error."""
    if device.type == Device.CUDA:
        torch.zeros(1, device=device)


PREWARM = "HARNESS_PREWARM"  # "cuda": a prestarted worker of a CUDA lane readies the device while it waits


def prewarm_cuda() -> None:
    """The CUDA context and the profiler's CUPTI start-up (seconds, once per process), done while a
    prestarted worker waits for its job, so they leave the job's critical path. Harness code only:
    no model code has run, and every job still gets a process of its own. A failure is ignored:
    the job then sets the device up itself and reports any fault."""
    try:
        # Imported here: only a prewarmed worker needs the profiler this early, and a failure to import it is ignored
        # with the rest.
        from torch.profiler import ProfilerActivity, profile

        if not torch.cuda.is_available():
            return
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        scratch = torch.zeros(1, device=device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            scratch.add_(1)
            torch.cuda.synchronize(device)
        del scratch
    except Exception:
        pass
