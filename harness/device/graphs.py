"""CUDA graphs for timing, and the proof that a graph does the call's work before it is timed.

A graph captured on a PyTorch stream records only the work launched on that stream. A kernel
launched with `kernel<<<grid, block>>>(...)`, with no stream, goes to the legacy default stream: it
runs once, at capture time, and is not in the graph. Replaying such a graph replays the output's
allocation (a memset) or nothing, so its outputs are zeros or stale and its time is an empty
replay's. A graph is therefore used only after two checks:
- each input set's graph, replayed with its outputs poisoned first, gives that set's eager outputs
  (`replay_mismatch`);
- every kernel the eager call launched, as its profile lists them, is among the graph's replayed
  work (`missing_from_graph`).
Where either fails, both sides are timed eagerly, and the record says why. Eager calls run on
PyTorch's default stream, which is the legacy default stream, so the events around a call include
its `<<<>>>` launches (work on other streams still gets a device-wide synchronise, from the profile).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from typing import Any, Callable, Collection, Iterator, Optional, Sequence

import torch

from harness.core.config import Device
from harness.core.errors import one_line
from harness.core.records import (
    OUTSIDE_CAPTURE,
    CallProfile,  # noqa: I001
)

# a replay's output may differ from the eager one's by this share of its norm (atomics, split-K)
REPLAY_TOLERANCE = 1e-3
LEGACY_HINT = (
    "a kernel launched with <<<grid, block>>> and no stream goes to the legacy default stream, which a capture does "
    "not record"
)


class GraphCaptureError(RuntimeError):
    """The call could not be captured in a CUDA graph (it synchronises, allocates on the host, ...)."""


Captured = tuple[Callable[[], Any], Any]  # a graph's replay, and the outputs its capture returned (its static outputs)


def capture_graphs(fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], device: torch.device) -> list[Captured]:
    """One CUDA graph per input set (a capture fixes its addresses), sharing one memory pool. The caller's
    stream is current again afterwards, whatever the capture did: when a capture fails, `torch.cuda.graph`'s
    exit raises from `capture_end` before it restores the stream, which would leave its (non-blocking) capture
    stream current for every later call of the process, unordered with the `<<<>>>` launches of the legacy
    default stream (an honest kernel read back before it ran: NaN in the last timed call)."""
    caller = torch.cuda.current_stream(device)
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for args in arg_sets:
                fn(*args)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        pool = torch.cuda.graph_pool_handle()
        captured: list[Captured] = []
        for args in arg_sets:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = fn(*args)
            captured.append((graph.replay, out))
        torch.cuda.synchronize(device)
    except Exception as exc:
        torch.cuda.set_stream(caller)
        try:
            torch.cuda.synchronize(device)
        except Exception:
            raise exc from None  # the device itself failed: not a capture problem
        raise GraphCaptureError(one_line(exc)) from None
    return captured


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a forward's result (a tensor, or a tuple, list or dict of them), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors(item)]
    return []


def poison(outputs: Sequence[torch.Tensor]) -> None:
    """Fill outputs with values no computation gives (NaN; the largest integer), so a replay
    that does not write them cannot pass for one that does."""
    for t in outputs:
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).max)


def disagreement(got: torch.Tensor, want: torch.Tensor) -> str:
    """Why a replay's output is not the eager call's ("" when it is, within REPLAY_TOLERANCE)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"its replay returns {tuple(got.shape)} {got.dtype}, the eager call {tuple(want.shape)} {want.dtype}"
    if not (want.is_floating_point() or want.is_complex()):
        return "" if torch.equal(got, want) else "its replay's output differs from the eager call's"
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        unwritten = int((finite & ~torch.isfinite(got)).sum())
        return f"its replay leaves {unwritten} of {want.numel()} output elements unwritten (the poison stayed)"
    error = float((got[finite].double() - want[finite].double()).norm())
    scale = float(want[finite].double().norm())
    if error > REPLAY_TOLERANCE * scale:
        zeros = " (all zeros: only the output's allocation was replayed)" if not bool(got.any()) else ""
        return (
            f"its replay's output is {error / scale if scale else float('inf'):.3g} of the norm away from the eager "
            f"call's{zeros}"
        )
    return ""


def replay_mismatch(
    fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], captured: Sequence[Captured], device: torch.device
) -> str:
    """Why the graphs do not do the calls' work ("" when every input set's replay, with its
    outputs poisoned first, gives that set's eager output). The eager call runs first; the
    device is synchronised whole before each comparison, so work on any stream has finished.
    The static outputs get back what they held before the poison, whatever the replay did: a
    model may keep the tensor it returns (a cached output, a buffer it reuses), and the poison
    left in it would be its next eager call's output (NaN in a check the model passes)."""
    for index, (args, (replay, static)) in enumerate(zip(arg_sets, captured)):
        want = [t.detach().clone() for t in tensors(fn(*args))]
        got = tensors(static)
        with poisoned(got):
            replay()
            _synchronize(device)
            why = _replay_disagrees(index, got, want)
        del want
        if why:
            return why
    return ""


@contextlib.contextmanager
def poisoned(outputs: Sequence[torch.Tensor]) -> Iterator[None]:
    """`outputs` poisoned for the block, and their values before it put back after it."""
    kept = [t.detach().clone() for t in outputs]
    poison(outputs)
    try:
        yield
    finally:
        with torch.no_grad():
            for t, k in zip(outputs, kept):
                t.copy_(k)
        del kept


def _replay_disagrees(index: int, got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> str:
    """Why one input set's replayed outputs are not its eager ones ("" when they agree)."""
    if len(got) != len(want):
        counts = f"its replay returns {len(got)} tensors, the eager call {len(want)}"
        return f"{OUTSIDE_CAPTURE} (input set {index}: {counts})"
    for number, (g, w) in enumerate(zip(got, want)):
        why = disagreement(g, w)
        if why:
            return f"{OUTSIDE_CAPTURE} (input set {index}, output {number}: {why}; {LEGACY_HINT})"
    return ""


def _synchronize(device: torch.device) -> None:
    if device.type == Device.CUDA:
        torch.cuda.synchronize(device)


def missing_from_graph(eager: Optional[CallProfile], replayed: Optional[CallProfile], own: Collection[str]) -> str:
    """Why a graph's replay leaves out one of the model's own kernels (`own`: the names its source
    declares) that its eager call ran ("" when each of them is in the replay as often). Library
    kernels are not compared: cuBLAS may pick another algorithm under capture, and they are
    launched on the calling stream anyway."""
    if eager is None or replayed is None or not own:
        return ""
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(own)) + r")\b")
    counts = Counter({k.name: k.count for k in replayed.kernels})
    missing = [k for k in eager.kernels if pattern.search(k.name) and counts[k.name] < k.count]
    if not missing:
        return ""
    named = ", ".join(f"{k.name.split('(')[0][:60]} x{k.count}" for k in missing[:3])
    return (
        f"{OUTSIDE_CAPTURE} (its eager call ran {named}; its graph's replay ran "
        f"{sum(counts[k.name] for k in missing)} of them; {LEGACY_HINT})"
    )
