"""One side of a paired timing (the worker's model, or the judge's reference): warmed up and
profiled once, then timed in the rounds the parent asks for."""

from __future__ import annotations

from typing import Any, Callable, Collection

import torch

from harness.core import protocol as P
from harness.core.config import Device, TimerSettings, TimingMode
from harness.core.errors import one_line
from harness.core.pairing import device_sync_reason
from harness.core.status import Status
from harness.device.failures import classify
from harness.device.graphs import missing_from_graph
from harness.device.inputs import as_outputs
from harness.device.profile import profile_call, profile_thunks
from harness.device.setup import synchronize
from harness.device.timing import Timer


def prepare_timer(
    runner: Any,
    sets: list[list[Any]],
    device: Any,
    settings: TimerSettings,
    *,
    profiled: bool,
    own: Collection[str] = (),
) -> tuple[Timer, P.Ready, Callable[[], Any]]:
    """One side of a paired timing, ready for its rounds: warmed up (CUDA graphs captured when
    `settings.mode` is graph, and kept only when they do the call's work: harness.device.graphs) and,
    on CUDA when `profiled`, one call profiled (with a replay of a kept graph, which must run
    every kernel of `own`, the model's own kernels, that the eager call ran). Returns the timer, the
    `Ready` message, and a function giving the output of the latest timed call on sets[0] (so the
    judge can check that the calls being timed still compute the answer the checked calls did)."""
    runner.eval()
    profile, profile_error = None, ""
    try:
        with torch.no_grad():
            timer = Timer(runner, sets, device, settings)
            graph_error = timer.prepare(graph=settings.mode == TimingMode.GRAPH)
            if device.type == Device.CUDA and profiled:
                try:
                    profile, graph_error = _profile(runner, sets[0], timer, graph_error, own)
                except Exception as exc:
                    torch.cuda.synchronize(device)  # a device fault is the model's; anything else is the profiler's
                    profile_error = one_line(exc)
            synchronize(device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    ready = P.Ready(
        graph_error=graph_error, needs_device=device_sync_reason(profile), profile=profile, profile_error=profile_error
    )
    return timer, ready, lambda: _outputs(timer.latest_output())


def _profile(runner: Any, first: list[Any], timer: Timer, graph_error: str, own: Collection[str]) -> tuple[Any, str]:
    """One eager call profiled, and, when graphs were kept, one replay of the first set's graph in
    the same session: a graph that leaves out a kernel of the eager call is dropped (the call is
    then timed eagerly). Returns the eager call's profile and why graphs are not used."""
    if timer.graphs is None or not own:
        return profile_call(runner, first, timer.device, timer.flush), graph_error
    replayed, profile = profile_thunks([timer.graphs[0], lambda: runner(*first)], timer.device, timer.flush)
    missing = missing_from_graph(profile, replayed, own)
    if missing:
        timer.drop_graphs()
    return profile, missing


def _outputs(out: Any) -> Any:
    return None if out is None else as_outputs(out)


def time_round(timer: Timer, ask: P.TimeRound) -> Any:
    """One round of a paired timing, as the parent asked (`TimeRound`): its TimingStats."""
    try:
        with torch.no_grad():
            stats = timer.round(
                ask.protocol.timing_mode,
                ask.protocol.sync,
                ask.rounds,
                last=ask.round == ask.rounds - 1,
                hold=ask.protocol.hold,
            )
            synchronize(timer.device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    return stats
