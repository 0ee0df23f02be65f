"""One side of a paired timing (the worker's model, or the judge's reference): warmed up and
profiled once, then timed in the rounds the parent asks for."""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness import protocol as P
from harness.errors import one_line
from harness.pairing import device_sync_reason
from harness.profile import profile_call
from harness.status import Status
from harness.timing import Timer
from harness.worker.device import synchronize
from harness.worker.failures import classify
from harness.worker.inputs import as_outputs


def prepare_timer(runner: Any, sets: list[list[Any]], device: Any, settings: P.TimerSettings, *, profiled: bool) -> tuple[Timer, P.Ready, Callable[[], Any]]:
    """One side of a paired timing, ready for its rounds: warmed up (CUDA graphs captured when
    `settings.mode` is graph) and, on CUDA when `profiled`, one call profiled. Returns the timer, the
    `Ready` message, and a function giving the output of the latest timed call on sets[0]."""
    runner.eval()
    first = sets[0]
    last_output: list[Any] = []

    def timed(*args: Any) -> Any:
        # Keeps the output of the latest timed call on the first input set, so the judge can
        # check that the calls being timed still compute the answer the checked calls did.
        out = runner(*args)
        if len(args) == len(first) and all(a is b for a, b in zip(args, first)):
            last_output[:] = [out]
        return out

    profile, profile_error = None, ""
    try:
        with torch.no_grad():
            timer = Timer(timed, sets, device, settings)
            graph_error = timer.prepare(graph=settings.mode == "graph")
            if device.type == "cuda" and profiled:
                try:
                    profile = profile_call(runner, first, device, timer.flush)
                except Exception as exc:
                    torch.cuda.synchronize(device)  # a device fault is the model's; anything else is the profiler's
                    profile_error = one_line(exc)
            synchronize(device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    ready = P.Ready(graph_error=graph_error, needs_device=device_sync_reason(profile), profile=profile, profile_error=profile_error)
    return timer, ready, lambda: as_outputs(last_output[0]) if last_output else None


def time_round(timer: Timer, ask: P.TimeRound) -> Any:
    """One round of a paired timing, as the parent asked (`TimeRound`): its TimingStats."""
    try:
        with torch.no_grad():
            stats = timer.round(ask.protocol.mode, ask.protocol.sync, ask.rounds, last=ask.round == ask.rounds - 1)
            synchronize(timer.device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    return stats
