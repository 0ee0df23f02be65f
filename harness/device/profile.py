"""One call under the PyTorch profiler (CUPTI): which GPU work it ran, on which streams, and when.

Every GPU activity (kernel, memcpy, memset) is tied to the host call that launched it through the
profiler's correlation id, and classified by when that launch happened: during the call (between
the start of forward and the device synchronise after it) or after forward had returned (launched
by a thread the model left running). A tiny marker kernel launched first names the calling stream.
The sum of the activities' durations is what the GPU itself says one call costs.

On the CPU, which has no kernels to name, one checked forward is observed for the ATen operators
it runs (`observe_ops`): those the model's Python calls and those its C++ extension functions call
through the dispatcher alike, each told apart by the Python call it ran under.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Optional, Sequence

import torch

from harness.core.config import ModuleMode
from harness.core.errors import one_line
from harness.core.records import CallProfile, ForwardOps, KernelTime, OpCount

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_RANGE = "harness::call"
RETURN_RANGE = "harness::returned"
AFTER_RANGE = "harness::after_return"


def profile_call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    device: torch.device,
    flush: Optional[torch.Tensor] = None,
    tail_s: float = 0.05,
) -> CallProfile:
    """Profile `fn(*args)` once on `device`, with L2 flushed first when `flush` is given, then watch
    the device for `tail_s` more seconds for work launched after the call returned."""
    return profile_calls(fn, [args], device, flush, calls=1, tail_s=tail_s)[0]


def profile_calls(
    fn: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    device: torch.device,
    flush: Optional[torch.Tensor] = None,
    calls: int = 1,
    tail_s: float = 0.05,
    isolated: bool = True,
) -> list[CallProfile]:
    """Profile `calls` calls (rotating over `arg_sets`), each after an L2 flush, in one profiler
    session. `isolated`: the device is synchronised before and after every call; otherwise calls
    (and flushes) are queued back to back, as the timer queues them, and told apart by when the
    host launched their work. After each call returns, a closing marker goes on the calling
    stream: work on other streams that ends after it started was left running by forward."""
    thunks = [_bound(fn, arg_sets[index % len(arg_sets)]) for index in range(calls)]
    return profile_thunks(thunks, device, flush, tail_s, isolated)


def _bound(fn: Callable[..., Any], args: Sequence[Any]) -> Callable[[], Any]:
    return lambda: fn(*args)


def profile_thunks(
    thunks: Sequence[Callable[[], Any]],
    device: torch.device,
    flush: Optional[torch.Tensor] = None,
    tail_s: float = 0.05,
    isolated: bool = True,
) -> list[CallProfile]:
    """One CallProfile per call of `thunks` (calls taking no arguments: a forward on its inputs,
    a graph's replay), in one profiler session, as `profile_calls` describes."""
    from torch.profiler import ProfilerActivity, profile, record_function

    marker = torch.zeros(1, device=device)
    closing = torch.zeros(1, device=device)
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for index, thunk in enumerate(thunks):
            if flush is not None:
                flush.zero_()
            if isolated:
                torch.cuda.synchronize(device)
            with record_function(CALL_RANGE):
                marker.zero_()
                thunk()
            with record_function(RETURN_RANGE):
                closing.zero_()
                if isolated or index == len(thunks) - 1:
                    torch.cuda.synchronize(device)
        with record_function(AFTER_RANGE):
            time.sleep(tail_s)
            torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory(prefix="harness-trace-") as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return summarize_trace(trace.get("traceEvents", []))


def summarize_trace(events: list[dict[str, Any]]) -> list[CallProfile]:
    """One CallProfile per CALL_RANGE annotation in Chrome-trace `events`, in order. GPU work is
    assigned by when the host launched it: inside a call range (the first launch is the start
    marker), inside the RETURN_RANGE after it (the first launch is the closing marker, any other
    was launched after forward returned), or after the last call."""

    def ranges_named(name: str) -> list[tuple[float, float]]:
        return sorted(
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
            for e in events
            if e.get("cat") == "user_annotation" and e.get("name") == name
        )

    calls, returns = ranges_named(CALL_RANGE), ranges_named(RETURN_RANGE)
    if not calls:
        raise ValueError("the profile holds no call range")
    launched_at: dict[Any, float] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launched_at[e["args"]["correlation"]] = float(e["ts"])
    during: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in calls]
    returned: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in calls]
    late = 0
    last_end = max(calls[-1][1], returns[-1][1] if returns else 0.0)
    for e in events:
        if e.get("cat") not in GPU_CATEGORIES:
            continue
        launch = launched_at.get(e.get("args", {}).get("correlation"), float(e["ts"]))
        if launch > last_end:
            late += 1
            continue
        for index, (start, end) in enumerate(calls):
            if start <= launch <= end:
                during[index].append((launch, e))
                break
        else:
            for index, (start, end) in enumerate(returns[: len(calls)]):
                if start <= launch <= end:
                    returned[index].append((launch, e))
                    break
    profiles = []
    for index, items in enumerate(during):
        after = sorted(returned[index], key=lambda item: item[0])
        closing = after[0][1] if after else None
        extra = len(after) - 1 if after else 0
        profiles.append(_summarize_call(items, extra + (late if index == len(calls) - 1 else 0), closing))
    return profiles


def _summarize_call(
    during: list[tuple[float, dict[str, Any]]], after: int, closing: Optional[dict[str, Any]] = None
) -> CallProfile:
    if not during:
        raise ValueError("the profile shows no GPU activity in a call (not even the marker)")
    during.sort(key=lambda item: (item[0], float(item[1]["ts"])))
    _, marker = during[0]
    work = [e for _, e in during[1:]]
    streams = {marker.get("args", {}).get("stream")} | {e.get("args", {}).get("stream") for e in work}
    by_name: dict[str, list[float]] = {}
    for e in work:
        by_name.setdefault(str(e.get("name", "?"))[:200], []).append(float(e.get("dur", 0)) / 1e3)
    kernels = sorted(
        (KernelTime(name, len(d), round(sum(d), 6)) for name, d in by_name.items()), key=lambda k: -k.total_ms
    )
    span = (
        (max(float(e["ts"]) + float(e.get("dur", 0)) for e in work) - min(float(e["ts"]) for e in work)) / 1e3
        if work
        else 0.0
    )
    busy = (
        sum(1 for e in work if float(e["ts"]) + float(e.get("dur", 0)) > float(closing["ts"]))
        if closing is not None
        else 0
    )
    return CallProfile(
        kernel_ms=round(sum(float(e.get("dur", 0)) for e in work) / 1e3, 6),
        span_ms=round(span, 6),
        launches=len(work),
        streams=len(streams),
        after_return=after,
        busy_after_return=busy,
        kernels=tuple(kernels[:20]),
    )


# -- the CPU: the ATen operators of one forward ------------------------------------------------------

# a traced call of a C++ extension's function
EXTENSION_CALL = re.compile(r"^<built-in (?:method|function) (\w+) of (?:pybind11|PyCapsule)")


def observed_call(calls: Sequence[Any]) -> int:
    """The planned call (harness.core.protocol.Call) whose ATen operators are observed on the CPU, the
    candidate's in its worker and the reference's in the judge: the first in eval mode at the
    problem's own size (a warm call: the same-seed call came first), else the first."""
    return next(
        (index for index, call in enumerate(calls) if call.module_mode == ModuleMode.EVAL and not call.other_size), 0
    )


def observe_ops(
    thunk: Callable[[], Any], compute: Callable[[str], bool], functions: Collection[str] = (), call: int = -1
) -> tuple[Any, ForwardOps]:
    """`thunk()` (one forward on the CPU) under torch's profiler: its result, and the ATen operators
    it ran (`summarize_ops`, with `compute` and the extension's `functions`). With `functions`, the
    profiler also traces Python calls, so that operators dispatched from inside them are told
    apart. The thunk's exceptions are its own; the profiler's are data (`ForwardOps.error`), and a
    profiler that will not start leaves the thunk to run unobserved."""
    from torch.autograd.profiler import profile

    try:
        observer = profile(use_kineto=False, with_stack=bool(functions))
        observer.__enter__()
    except Exception as exc:
        return thunk(), ForwardOps(call=call, error=f"the profiler did not start: {one_line(exc)}")
    try:
        result = thunk()
    finally:
        stopped = _stop(observer)
    if stopped:
        return result, ForwardOps(call=call, error=stopped)
    try:
        return result, summarize_ops(observer.function_events, compute, functions, call)
    except Exception as exc:
        return result, ForwardOps(call=call, error=f"the profile could not be read: {one_line(exc)}")


def _stop(observer: Any) -> str:
    """Stop the profiler: "" when it stopped, else why not."""
    try:
        observer.__exit__(None, None, None)
    except Exception as exc:
        return f"the profiler did not stop: {one_line(exc)}"
    return ""


def summarize_ops(
    events: Iterable[Any], compute: Callable[[str], bool], functions: Collection[str] = (), call: int = -1
) -> ForwardOps:
    """The ATen operators among profiler `events` (each with `name` and `cpu_parent`, the call it
    ran under). An operator counts as compute where `compute(name)` holds and no operator it called
    does (so `aten::linear` is counted as its `aten::addmm`, `aten::relu` as its
    `aten::clamp_min`), with how many of its runs were dispatched from inside a traced call of one
    of `functions` (a C++ extension's). Every other ATen operator is counted in `other`."""
    events = list(events)
    computing = [e for e in events if e.name.startswith("aten::") and compute(e.name)]
    above: set[int] = set()  # the events a compute operator ran under
    for event in computing:
        parent = event.cpu_parent
        while parent is not None and id(parent) not in above:
            above.add(id(parent))
            parent = parent.cpu_parent
    tally: dict[str, list[int]] = {}
    for event in computing:
        if id(event) not in above:
            counts = tally.setdefault(event.name, [0, 0])
            counts[0] += 1
            counts[1] += _inside(event, functions)
    ops = tuple(OpCount(name, count, inside) for name, (count, inside) in sorted(tally.items()))
    aten = sum(1 for e in events if e.name.startswith("aten::"))
    return ForwardOps(ops, aten - sum(op.count for op in ops), call)


def _inside(event: Any, functions: Collection[str]) -> bool:
    """Whether `event` ran inside a traced call of one of `functions`."""
    parent = event.cpu_parent
    while parent is not None:
        match = EXTENSION_CALL.match(parent.name)
        if match is not None and match.group(1) in functions:
            return True
        parent = parent.cpu_parent
    return False
