"""The timer used by every worker, for the reference, the baselines and the candidates alike.

CUDA, per timed call: the L2 cache is flushed (a buffer of twice the device's L2 size is written)
outside the timed region, after the persisting-L2 limit is checked (a limit a call set is reset
to 0, its persisting lines made normal, so the flush evicts them too), then a start event, the
call (or a CUDA-graph replay of it), an optional device-wide synchronise (so work on other streams
is inside), and an end event. Regions are queued in batches of BATCH with no host wait between
them, so the GPU stays busy (an idle GPU between samples lowers its clocks and puts the host's
launch latency inside the next region); the events are read and the stopping rule checked after
each batch. A batch holds fewer regions when BATCH calls would run past the sampling's budget (a
slow call: `batch_size`, sized by the latest warm-up's or the latest batch's time per call). The calls
rotate over distinct input sets. Warm-up is by time; sampling stops when the relative standard
error of the median reaches the target, the budget is spent or max_reps is reached. Each batch
ends with one empty region timed the same way; their median (the fixed cost of a timed region)
is, by default, subtracted from every sample (the raw samples stay in the record).

A held sampling (`hold`, the protocol's: graph replays, and eager calls where the reference and the
compared model were both measured not launch-bound; stream sync only) queues each batch while the
GPU runs a spin kernel, so no region can start before the host has queued its call. Without it, a
call of a few microseconds of work times the host's launch latency too: the start event fires
when the flush ends, and the kernels follow only when the host's launch arrives (on a host busy
with builds, tens of microseconds, whole rounds 3x apart). A region whose start event had already
fired when its call was queued is dropped and counted (`host_waits`), and the next hold is twice
as long. A launch-bound eager call is not held: its host launch cost is part of what it costs.

CPU: `time.perf_counter_ns` around each call, same rotation and stopping rule; the overhead is
the median of OVERHEAD_REPS empty regions.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable, Optional, Sequence

import torch

from harness.core.config import Device, SyncMode, TimingMode
from harness.core.records import OUTSIDE_CAPTURE, TimingStats, minus_overhead, relative_standard_error_of_median
from harness.device.cuda_driver import persisting_l2, reset_persisting_l2
from harness.device.graphs import GraphCaptureError, capture_graphs, replay_mismatch

OVERHEAD_REPS = 100  # CPU: empty regions timed to estimate the fixed cost of one timed region
BATCH = 10  # CUDA regions queued back to back between two reads of the events (the GPU never idles
# between them; the stopping rule is checked once per batch); fewer for a slow call (`batch_size`)


NO_GRAPHS_ON_CPU = "CUDA graphs need a CUDA device; timed eagerly"

HOLD_CYCLES = 1_000_000  # the first hold's spin (GPU clock cycles: about 0.5 ms at 2 GHz), doubled after a host wait
HOLD_MAX_CYCLES = 64_000_000  # the longest hold (about 32 ms); a batch late behind it ends the holding (a call that
# waits for the GPU inside, e.g. `.item()`, is late behind any hold): its regions, and all after it, are kept unheld


def _nothing() -> None:
    return None


def _stop_reason(samples: list[float], started: float, cfg: Any, overhead: float, min_s: float = 0.0) -> Optional[str]:
    n = len(samples)
    if n >= cfg.max_reps:
        return "max_reps"
    offset = overhead if cfg.subtract_overhead else 0.0
    elapsed = time.perf_counter() - started
    if (
        n >= cfg.min_reps
        and elapsed >= min_s
        and relative_standard_error_of_median(minus_overhead(samples, offset)) <= cfg.target_rse
    ):
        return "target_rse"
    if n >= 1 and elapsed >= cfg.budget_s:
        return "budget"
    return None


def time_forward(
    fn: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    device: torch.device,
    cfg: Any,
    *,
    sync: str = SyncMode.STREAM,
) -> TimingStats:
    """Time `fn(*args)` over `arg_sets` (rotated) with the timing config `cfg`, in one go.

    `sync` is "stream" (end event on the calling stream) or "device" (device-wide synchronise
    before the end event). `cfg.mode` "graph" times CUDA-graph replays; when capture fails the
    calls are timed eagerly and the record says why. (Compared models are timed in rounds, in
    turns with the reference: `Timer`.)
    """
    if not arg_sets:
        raise ValueError("time_forward needs at least one input set")
    timer = Timer(fn, arg_sets, device, cfg)
    error = timer.prepare(graph=cfg.mode == TimingMode.GRAPH)
    mode = TimingMode.GRAPH if timer.graphs is not None else TimingMode.EAGER
    fallback = (
        (
            error
            if error.startswith((OUTSIDE_CAPTURE, NO_GRAPHS_ON_CPU))
            else f"graph capture failed, timed eagerly: {error}"
        )
        if error
        else ""
    )
    stats = timer.sample(mode, sync, cfg)
    return dataclasses.replace(stats, warmup_calls=timer.warmup_calls + stats.warmup_calls, fallback=fallback)


class Timer:
    """One side of a timing, prepared once (warm-up, and CUDA graphs when asked) and then sampled
    as often as asked: in one go (`time_forward`) or in rounds, in turns with the other side."""

    def __init__(
        self, fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], device: torch.device, cfg: Any
    ) -> None:
        if not arg_sets:
            raise ValueError("a timer needs at least one input set")
        self.device, self.cfg = device, cfg
        self.input_sets = len(arg_sets)
        self.fn, self.arg_sets = fn, arg_sets
        self._latest: list[Any] = []  # the output of the latest eager timed call on the first set
        self.eager: list[Callable[[], Any]] = [self._keeping(fn, arg_sets[0])] + [
            _bound(fn, args) for args in arg_sets[1:]
        ]
        self.graphs: Optional[list[Callable[[], Any]]] = None
        self._graph_first: Any = None  # the first set's graph's static outputs (each replay rewrites them)
        self.warmup_calls = 0
        self.call_ms: dict[str, float] = {}  # each mode's wall ms per call in its latest warm-up (sizes a batch)
        self.last_mode: str = TimingMode.EAGER  # the mode of the latest sampling: whose output is the latest timed one
        self.flush = flush_buffer(device) if device.type == Device.CUDA and cfg.flush_l2 else None
        self._hold = Hold() if device.type == Device.CUDA else None  # what a held sampling is queued behind

    def _keeping(self, fn: Callable[..., Any], args: Sequence[Any]) -> Callable[[], Any]:
        def call() -> Any:
            out = fn(*args)
            self._latest[:] = [out]
            return out

        return call

    def latest_output(self) -> Any:
        """The output of the latest timed call on the first input set: the first graph's static
        outputs when graphs are timed, else the latest eager call's (None before any call)."""
        if self.graphs is not None and self.last_mode == TimingMode.GRAPH:
            return self._graph_first
        return self._latest[0] if self._latest else None

    def _sync(self) -> None:
        if self.device.type == Device.CUDA:
            torch.cuda.synchronize(self.device)

    def prepare(self, graph: bool) -> str:
        """Warm up for `cfg.warmup_ms`; with `graph` on CUDA, capture one graph per input set and
        keep them only if each replay gives its set's eager output (harness.device.graphs). Returns why
        graphs are not used ("" when they are, or were not asked for)."""
        self.warmup_calls, self.call_ms[TimingMode.EAGER] = _warm_up(self.eager, self.cfg.warmup_ms, self._sync)
        if not graph:
            return ""
        if self.device.type != Device.CUDA:
            return NO_GRAPHS_ON_CPU
        try:
            captured = capture_graphs(self.fn, self.arg_sets, self.device)
            why = replay_mismatch(self.fn, self.arg_sets, captured, self.device)
        except GraphCaptureError as exc:
            return str(exc)
        if why:
            return why
        self.graphs, self._graph_first = [replay for replay, _ in captured], captured[0][1]
        _, self.call_ms[TimingMode.GRAPH] = _warm_up(self.graphs, self.cfg.warmup_ms, self._sync)
        return ""

    def drop_graphs(self) -> None:
        """Time eagerly from now on (the graphs were shown to leave out work)."""
        self.graphs, self._graph_first = None, None

    def round(self, timing_mode: str, sync: str, rounds: int, last: bool = False, hold: bool = False) -> TimingStats:
        """One of `rounds` rounds: a short warm-up (the other side ran in between), then sampling
        under the config's stopping rule with a `rounds`-th of its budget, for at least a quarter
        of that (max_reps still caps each round). The GPU's clocks are read (nvidia-smi, a
        process of its own) only after the `last` one. `hold`: the protocol's (`TimingProtocol.hold`)."""
        cfg = self.cfg
        budget = cfg.budget_s / rounds
        share = dataclasses.replace(cfg, budget_s=budget, warmup_ms=cfg.warmup_ms / ROUND_WARMUP_SHARE)
        return self.sample(timing_mode, sync, share, warm=True, clocks=last, min_s=budget * ROUND_MIN_SHARE, hold=hold)

    def sample(
        self,
        timing_mode: str,
        sync: str,
        cfg: Any,
        warm: bool = False,
        clocks: bool = True,
        min_s: float = 0.0,
        hold: bool = False,
    ) -> TimingStats:
        """Sample `timing_mode` calls under `cfg`'s stopping rule, for at least `min_s` seconds; on CUDA with
        stream sync and `hold`, each batch queued behind the timer's hold."""
        calls = self.graphs if timing_mode == TimingMode.GRAPH else self.eager
        if calls is None:
            raise ValueError("graph mode needs graphs captured by prepare(graph=True)")
        self.last_mode = timing_mode
        warmup = 0
        if warm:
            warmup, self.call_ms[timing_mode] = _warm_up(calls, cfg.warmup_ms, self._sync)
        if self.device.type == Device.CUDA:
            call_ms = self.call_ms.get(timing_mode, 0.0)
            held = self._hold if hold and sync == SyncMode.STREAM else None
            stats = _sample_cuda(calls, self.device, cfg, sync, self.flush, clocks, min_s, call_ms, held)
        else:
            stats = _sample_cpu(calls, cfg, min_s)
        return dataclasses.replace(stats, warmup_calls=warmup, timing_mode=timing_mode, input_sets=self.input_sets)


def _bound(fn: Callable[..., Any], args: Sequence[Any]) -> Callable[[], Any]:
    """`fn` called on `args`, as a call that takes none."""
    return lambda: fn(*args)


ROUND_WARMUP_SHARE = 4  # a round's warm-up is 1/this of timing.warmup_ms (the first warm-up is whole)
ROUND_MIN_SHARE = 0.25  # a round samples for at least this share of its budget: a round of a fast call that
# met target_rse after a few dozen calls (a millisecond) would measure one moment, not a state


_L2_DEFAULT: Optional[int] = None  # the context's persisting-L2 limit before any model code ran (remember_l2_default)


def remember_l2_default() -> None:
    """Note the current context's persisting-L2 limit, before any model code runs: a limit above
    it, found when a timing starts, was set by the model."""
    global _L2_DEFAULT
    _L2_DEFAULT = persisting_l2()


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer twice the device's L2 size; writing it evicts everything the last call left in L2."""
    l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 << 20)
    return torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.int32, device=device)


def batch_size(call_ms: float, left_s: float, cap: int) -> int:
    """How many timed regions the next batch queues: BATCH (at most `cap`, the reps left), fewer when
    that many calls of `call_ms` each would run past the `left_s` seconds left of the sampling's budget,
    and at least one. Ten calls of 727 ms are 7.3 s: without this a 1.5 s budget's rounds each ran 10 s
    at least. `call_ms` 0 (not known) keeps BATCH."""
    most = max(1, min(BATCH, cap))
    if call_ms <= 0:
        return most
    return max(1, min(most, int(max(left_s, 0.0) * 1e3 // call_ms)))


def _warm_up(calls: Sequence[Callable[[], Any]], warmup_ms: float, sync: Callable[[], None]) -> tuple[int, float]:
    """Untimed calls (each synchronised) until `warmup_ms` has passed, at least one: how many, and
    the wall milliseconds per call (an upper bound of its GPU time)."""
    count = 0
    started = time.perf_counter()
    while count == 0 or (time.perf_counter() - started) * 1e3 < warmup_ms:
        calls[count % len(calls)]()
        sync()
        count += 1
    return count, (time.perf_counter() - started) * 1e3 / count


class Hold:
    """The spin a held batch is queued behind (see the module's doc): started before the batch, and
    asked after each region's call is queued whether the GPU had already reached it."""

    def __init__(self, event: Callable[..., Any] = torch.cuda.Event, spin: Callable[[int], None] = torch.cuda._sleep):
        self.cycles = HOLD_CYCLES  # the next batch's spin; a timer keeps its hold from one round to the next
        self.waits = 0  # regions dropped this sampling: the GPU reached their start before the host queued their call
        self.longest_ms = 0.0  # the longest hold a batch of this sampling was queued behind
        self._held = 0  # the current batch's spin
        self._late = False  # a region of the current batch was late
        self._events = (event(enable_timing=True), event(enable_timing=True))
        self._spin = spin

    def begin(self) -> None:
        """A new sampling: its counts start at zero, its first hold is the last one's."""
        self.waits, self.longest_ms = 0, 0.0

    @property
    def ended(self) -> bool:
        """Whether the holding ended: a batch was late behind the longest spin, and later batches are unheld."""
        return self.cycles == 0

    def start(self) -> None:
        self._late, self._held = False, self.cycles
        if not self.cycles:
            return
        self._events[0].record()
        self._spin(self.cycles)
        self._events[1].record()

    def late(self, start: torch.cuda.Event) -> bool:
        """Whether the region that `start` opened may hold a wait for the host (its start event had
        fired by the time its call was queued); the next batch's hold is then twice as long. Not asked once the
        holding ended: the query would stand between the call and its end event."""
        if not self._held or not start.query():
            return False
        self._late = True
        return True

    def done(self) -> None:
        """After the batch was read: note the hold's length, and after a late region lengthen the next one, or
        end the holding when this one was the longest."""
        if not self._held:
            return
        self.longest_ms = max(self.longest_ms, self._events[0].elapsed_time(self._events[1]))
        if self._late:
            self.cycles = 2 * self.cycles if self.cycles < HOLD_MAX_CYCLES else 0

    def keep(self, timed: list[float], late: list[bool]) -> list[float]:
        """The batch's samples less the late regions' (all of them when unheld, or behind the longest hold)."""
        if not self._held or self._held >= HOLD_MAX_CYCLES:
            return timed
        self.waits += sum(late)
        return [t for t, was_late in zip(timed, late) if not was_late]


class _Unheld:
    """What an unheld sampling's batches are queued behind: nothing (Hold's interface)."""

    waits, longest_ms, ended = 0, 0.0, False

    def begin(self) -> None:
        return None

    def start(self) -> None:
        return None

    def late(self, start: Any) -> bool:
        return False

    def done(self) -> None:
        return None

    def keep(self, timed: list[float], late: list[bool]) -> list[float]:
        return timed


def _sample_cuda(
    calls: Sequence[Callable[[], Any]],
    device: torch.device,
    cfg: Any,
    sync: str,
    flush: Optional[torch.Tensor],
    clocks: bool = True,
    min_s: float = 0.0,
    call_ms: float = 0.0,
    hold: Optional[Hold] = None,
) -> TimingStats:
    """`call_ms`: the latest warm-up's time per call, which sizes the first batch (`batch_size`); each
    batch's median sizes the next (ten samples at most: no sort of every sample between batches).
    `hold`: queue each batch behind a spin, and drop the regions the host was late for."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(BATCH + 1)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(BATCH + 1)]

    l2_reset = flush is not None and persisting_l2() >= 0  # -1: a GPU without persisting L2 (before Ampere)
    held = hold if hold is not None else _Unheld()
    held.begin()
    found = [0]  # limits above the context's own, found before sampling or before a timed call
    if l2_reset:
        initial = reset_persisting_l2()
        if _L2_DEFAULT is not None and initial > _L2_DEFAULT:  # the context's own (9.4 MiB on an H100) is not a finding
            found.append(initial)

    def batch(chosen: Sequence[Callable[[], Any]]) -> tuple[list[float], list[bool]]:
        """Queue len(chosen) timed regions back to back (behind the hold, if any), then wait once and
        read them all: each region's time, and whether the host was late for it."""
        late: list[bool] = []
        held.start()
        for call, start, end in zip(chosen, starts, ends):
            if flush is not None:
                if l2_reset and persisting_l2() > 0:  # a call set aside L2 that the flush would not evict
                    found.append(reset_persisting_l2())
                flush.zero_()  # outside the events
            start.record()
            call()
            late.append(call is not _nothing and held.late(start))
            if sync == SyncMode.DEVICE:
                torch.cuda.synchronize(device)
            end.record()
        ends[len(chosen) - 1].synchronize()
        held.done()
        return [start.elapsed_time(end) for start, end in zip(starts[: len(chosen)], ends)], late

    # Every batch ends with one empty region, so the overhead is estimated under the same clocks
    # and queue conditions as the samples around it (not once, on a GPU that may still be idling).
    empty: list[float] = []
    samples: list[float] = []
    started = time.perf_counter()
    per_call = call_ms  # sizes the next batch: the warm-up's time per call, then the latest batch's median
    while (reason := _stop_reason(samples, started, cfg, statistics.median(empty) if empty else 0.0, min_s)) is None:
        n = len(samples)
        count = batch_size(per_call, cfg.budget_s - (time.perf_counter() - started), cfg.max_reps - n)
        (*timed, nothing), late = batch([calls[(n + j) % len(calls)] for j in range(count)] + [_nothing])
        per_call = statistics.median(timed)
        samples.extend(held.keep(timed, late))
        empty.append(nothing)
    overhead = statistics.median(empty)
    torch.cuda.synchronize(device)
    from harness.device.environment import gpu_state

    state = gpu_state(device) if clocks else {}
    return TimingStats.from_samples(
        samples,
        timer="cuda_events",
        warmup_calls=0,
        stopped_by=reason,
        overhead_ms=overhead,
        subtract=cfg.subtract_overhead,
        sync=sync,
        flush_bytes=flush.numel() * flush.element_size() if flush is not None else 0,
        sm_clock_mhz=state.get("sm_clock_mhz"),
        clock_event_reasons=str(state.get("clock_event_reasons", "")),
        l2_reset=l2_reset,
        l2_persisting_found=max(found),
        held_ms=held.longest_ms,
        host_waits=held.waits,
        hold_ended=held.ended,
    )


def _sample_cpu(calls: Sequence[Callable[[], Any]], cfg: Any, min_s: float = 0.0) -> TimingStats:
    def region(call: Callable[[], Any]) -> float:
        t0 = time.perf_counter_ns()
        call()
        return (time.perf_counter_ns() - t0) / 1e6

    overhead = statistics.median([region(_nothing) for _ in range(OVERHEAD_REPS)])
    samples: list[float] = []
    started = time.perf_counter()
    while (reason := _stop_reason(samples, started, cfg, overhead, min_s)) is None:
        samples.append(region(calls[len(samples) % len(calls)]))
    return TimingStats.from_samples(
        samples,
        timer="perf_counter",
        warmup_calls=0,
        stopped_by=reason,
        overhead_ms=overhead,
        subtract=cfg.subtract_overhead,
    )
