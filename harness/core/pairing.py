"""Paired timing: the reference and a compared model timed in turns, under one protocol.

A speedup is a ratio of two timings; it is only fair when both are taken under the same conditions.
For each compared model (a candidate, a torch.compile baseline, the null candidate) the lane times
the reference (in its judge) and the compared model (in its worker) in alternating rounds:
- both sides warm up once; each round then re-warms briefly and samples for budget_s / rounds;
- the order is ABBA (reference first in even rounds, second in odd ones), so a drift in clocks,
  power or host load during the timing falls on both sides alike;
- each round k gives a ratio reference median / compared median; the speedup is the median of the
  ratios, with a bootstrap 95% interval over the rounds;
- the protocol is chosen once for both sides: a device-wide synchronise when either side's
  profiled call needs it (timing.sync auto), CUDA graphs only when both sides could be captured.

`Pairing` is the parent's side of this: it answers the worker's `ready` and `round` messages,
asking the judge for the reference's rounds in between.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import statistics
from typing import Any, Optional

from harness.core import protocol as P
from harness.core.config import SyncMode, TimingMode
from harness.core.records import OUTSIDE_CAPTURE, CallProfile, PairedSpeedup, TimingStats

BOOTSTRAP_RESAMPLES = 2000
REFERENCE, COMPARED = "reference", "compared"


def schedule(rounds: int, start: int = 0) -> list[tuple[str, int]]:
    """The order of rounds start .. start + rounds - 1: ABBA ... (the reference first in even
    rounds, the compared model first in odd ones); each side gets every round."""
    order: list[tuple[str, int]] = []
    for k in range(start, start + rounds):
        pair = [(REFERENCE, k), (COMPARED, k)]
        order.extend(pair if k % 2 == 0 else pair[::-1])
    return order


def device_sync_reason(profile: Optional[CallProfile]) -> str:
    """Why a profiled call needs a device-wide synchronise to be timed whole ("" when it does not):
    GPU work on other streams, or launched after forward returned."""
    if profile is None:
        return ""
    why = []
    if profile.streams > 1:
        why.append(f"its profiled call ran GPU work on {profile.streams} streams")
    if profile.after_return:
        why.append(f"{profile.after_return} GPU activities were launched after forward returned")
    if profile.busy_after_return:
        why.append(f"{profile.busy_after_return} GPU activities on other streams outlived the calling stream")
    return "; ".join(why)


# a reference whose kernels keep the GPU busy for less than this share of their span is launch-bound
GPU_BUSY_SHARE = 0.8


def launch_bound(profile: Optional[CallProfile]) -> tuple[bool, str]:
    """Whether the reference's call is launch-bound, and the measurement that says so (or not).

    Measured on its profiled call, run alone on an idle GPU: the span of its GPU work (first start
    to last end) against the time its kernels keep the GPU busy. The rest of the span is the GPU
    waiting for the host to launch the next kernel. When that idle share is over a fifth, an eager
    timing measures the host's launch overhead as much as the GPU's work, and CUDA graphs time
    the GPU alone. A single kernel, however short, leaves no gap: the timer queues it behind the
    L2 flush, so eager timing sees the kernel itself. (False, "") when nothing was measured."""
    if profile is None or not profile.launches or profile.span_ms <= 0:
        return False, ""
    busy = min(profile.kernel_ms / profile.span_ms, 1.0)
    seen = (
        f"the reference's kernels keep the GPU busy for {busy:.0%} of its profiled call's "
        f"{profile.span_ms * 1e3:.0f} us span in {profile.launches} launches"
    )
    if profile.launches > 1 and busy < GPU_BUSY_SHARE:
        return True, f"{seen} (launch-bound: the host launches slower than the GPU runs)"
    return False, f"{seen} (not launch-bound)"


@dataclasses.dataclass(frozen=True)
class ProblemTiming:
    """How a problem's compared models are timed, decided once from the reference's pass."""

    mode: str  # eager or graph (timing.mode resolved: `resolve_mode`)
    reason: str = ""  # the measurement that chose it under timing.mode auto
    floor_ms: float = 0.0  # the hard floor: a median below it is re-timed eagerly with device sync (0: none known)


def resolve_mode(mode: str, reference_profile: Optional[CallProfile]) -> tuple[str, str]:
    """The timing mode for a problem from timing.mode: eager, graph, or auto (graph when the
    reference is launch-bound, `launch_bound`, else eager); and, for auto, the measurement that chose it."""
    if mode != TimingMode.AUTO:
        return mode, ""
    bound, why = launch_bound(reference_profile)
    return (TimingMode.GRAPH if bound else TimingMode.EAGER), why


def choose_protocol(
    mode: str,
    sync: str,
    reference: P.Ready,
    compared: P.Ready,
    compared_name: str = "the candidate",
    mode_reason: str = "",
) -> P.TimingProtocol:
    """One protocol for both sides: whichever side needs the stricter mode, both get it.
    `mode` is the problem's resolved timing mode (eager or graph, `resolve_mode`), `sync` the
    configured timing.sync; `mode_reason` says why graph was chosen, when it was chosen for the problem."""
    sides = (("the reference", reference), (compared_name, compared))
    chosen_sync, sync_reason = (SyncMode.DEVICE if sync == SyncMode.DEVICE else SyncMode.STREAM), ""
    needs = [f"{name}: {ready.needs_device}" for name, ready in sides if ready.needs_device]
    if sync == SyncMode.AUTO and needs:
        chosen_sync, sync_reason = SyncMode.DEVICE, "device sync for both sides because " + "; ".join(needs)
    chosen_mode, why_mode = TimingMode.EAGER, ""
    if mode == TimingMode.GRAPH:
        failed = [f"{name}: {ready.graph_error}" for name, ready in sides if ready.graph_error]
        if failed:
            why_mode = graph_failure(failed)
        else:
            chosen_mode, why_mode = (
                TimingMode.GRAPH,
                f"CUDA graphs for both sides because {mode_reason}" if mode_reason else "",
            )
    return P.TimingProtocol(chosen_mode, chosen_sync, sync_reason, why_mode)


def graph_failure(failed: list[str]) -> str:
    """Why both sides are timed eagerly: a capture that failed, or a graph that leaves out the call's work."""
    if any(OUTSIDE_CAPTURE in why for why in failed):
        return f"{OUTSIDE_CAPTURE}, both sides (" + "; ".join(failed) + ")"
    return "graph capture failed, both sides timed eagerly (" + "; ".join(failed) + ")"


def paired_speedup(
    reference: list[TimingStats], compared: list[TimingStats], protocol: P.TimingProtocol, seed: int = 0
) -> PairedSpeedup:
    """The speedup of the compared model over the reference from paired rounds: the median of the
    rounds' ratios, and a percentile-bootstrap 95% interval of that median (rounds resampled).
    Where overhead is subtracted, both sides lose the same one (`common_overhead`)."""
    if len(reference) != len(compared) or not reference:
        raise ValueError("paired rounds need as many rounds on each side, at least one")
    overhead = common_overhead(reference + compared)
    ratios = [_ratio(_median(r, overhead), _median(c, overhead)) for r, c in zip(reference, compared)]
    middle = statistics.median(ratios)
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP_RESAMPLES))
    low = min(medians[int(0.025 * (BOOTSTRAP_RESAMPLES - 1))], middle)
    high = max(medians[int(math.ceil(0.975 * (BOOTSTRAP_RESAMPLES - 1)))], middle)
    return PairedSpeedup(
        middle, low, high, len(ratios), protocol.describe(), tuple(ratios), pooled(reference, protocol, overhead)
    )


def common_overhead(rounds: list[TimingStats]) -> float:
    """The fixed cost of an empty timed region under the protocol, from both sides' rounds: it is
    the protocol's on this device, not either model's, so both sides of a ratio lose the same one
    (each side's own estimate differs by a few tenths of a microsecond, a few percent of a short call)."""
    return statistics.median(r.overhead_ms for r in rounds)


def _median(stats: TimingStats, overhead: float) -> float:
    if not stats.overhead_subtracted:
        return stats.median_ms
    return statistics.median(stats.corrected_samples(overhead))


def _ratio(reference_ms: float, compared_ms: float) -> float:
    """A round's ratio; a median at the timer's resolution (0 after the overhead is taken off) is
    held at a floor, so the ratio stays finite (and says "too fast to tell apart")."""
    floor = 1e-6
    return max(reference_ms, floor) / max(compared_ms, floor)


def pooled(rounds: list[TimingStats], protocol: P.TimingProtocol, overhead: Optional[float] = None) -> TimingStats:
    """One side's rounds as one timing: every raw sample, the overhead both sides lose (default:
    the median of these rounds'), the clocks read after the last round, and the protocol both sides used."""
    samples = [s for r in rounds for s in r.samples_ms]
    last = rounds[-1]
    return TimingStats.from_samples(
        samples,
        timer=last.timer,
        warmup_calls=sum(r.warmup_calls for r in rounds),
        stopped_by=f"{len(rounds)} rounds ({', '.join(sorted({r.stopped_by for r in rounds}))})",
        overhead_ms=common_overhead(rounds) if overhead is None else overhead,
        subtract=last.overhead_subtracted,
        mode=protocol.mode,
        sync=protocol.sync,
        sync_reason=protocol.sync_reason,
        fallback=protocol.mode_reason if protocol.mode == TimingMode.EAGER else "",
        input_sets=last.input_sets,
        flush_bytes=last.flush_bytes,
        sm_clock_mhz=last.sm_clock_mhz,
        clock_event_reasons=last.clock_event_reasons,
        l2_reset=last.l2_reset,
        l2_persisting_found=max(r.l2_persisting_found for r in rounds),
    )


class Pairing:
    """The parent's side of one compared worker's paired timing.

    The worker says `ready` (warmed up, profiled, graphs captured or not); the parent asks the
    judge to prepare the reference, chooses the protocol, and then walks the schedule: the judge's
    rounds are asked for directly, the worker's are the replies to its messages. While rounds run,
    the host is kept quiet (harness.parent.quiet)."""

    def __init__(
        self,
        judge: Any,
        session: int,
        timing: Any,
        limit: float,
        compared_name: str = "the candidate",
        quiet: Any = None,
        plan: Optional[ProblemTiming] = None,
    ) -> None:
        self.judge = judge  # a JudgeClient
        self.session = session
        self.timing = timing  # the run's TimingConfig
        self.limit = limit  # seconds for each of the judge's requests
        self.compared_name = compared_name
        self.quiet = quiet
        self.plan = plan if plan is not None else ProblemTiming(timing.mode)
        self.mode, self.mode_reason = self.plan.mode, self.plan.reason
        self.protocol: Optional[P.TimingProtocol] = None
        self.ready: Optional[P.Ready] = None
        self.reference_ready: Optional[P.Ready] = None
        self.rounds: dict[str, list[TimingStats]] = {REFERENCE: [], COMPARED: []}
        self._order = schedule(timing.rounds)
        self._next = 0
        self._held = contextlib.ExitStack()
        # the protocol whose median fell below the floor, when the rounds were re-timed
        self.first_protocol: Optional[P.TimingProtocol] = None

    def on_ready(self, ready: P.Ready) -> dict[str, Any]:
        """The worker is ready: prepare the reference, choose the protocol, run up to the worker's first round."""
        self.ready = ready
        self.reference_ready = self.judge.request(
            P.PrepareTiming(self.session, graph=self.mode == TimingMode.GRAPH), self.limit
        )
        self.protocol = choose_protocol(
            self.mode, self.timing.sync, self.reference_ready, ready, self.compared_name, self.mode_reason
        )
        if self.quiet is not None:
            self._held.enter_context(self.quiet.hold())
        return self._advance()

    def on_round(self, timed: P.RoundTimed) -> dict[str, Any]:
        """The worker timed its round: record it, run the judge's rounds up to the worker's next one."""
        expected = self._order[self._next - 1] if self._next else None
        if expected != (COMPARED, timed.round):
            raise ValueError(f"the worker reported round {timed.round} out of turn")
        self.rounds[COMPARED].append(timed.stats)
        return self._advance()

    def _advance(self) -> dict[str, Any]:
        assert self.protocol is not None
        while True:
            while self._next < len(self._order) or self._wants_more():
                if self._next == len(self._order):
                    self._order += schedule(2, start=len(self.rounds[COMPARED]))
                side, k = self._order[self._next]
                self._next += 1
                ask = P.TimeRound(self.session, k, self.timing.rounds, self.protocol)
                if side == COMPARED:
                    return {"round": P.encode(ask)}
                timed: P.RoundTimed = self.judge.request(ask, self.limit)
                self.rounds[REFERENCE].append(timed.stats)
            if not self._below_floor():
                break
            self._retime()
        self.close()
        return {"round": None}

    def _below_floor(self) -> bool:
        """Whether the finished rounds put the compared model below the hard floor, under a
        protocol other than eager with device sync (which leaves nothing out)."""
        assert self.protocol is not None
        if (
            self.first_protocol is not None
            or self.plan.floor_ms <= 0
            or (self.protocol.mode, self.protocol.sync) == (TimingMode.EAGER, SyncMode.DEVICE)
        ):
            return False
        done = self.result()
        return done is not None and done[0].median_ms < self.plan.floor_ms

    def _retime(self) -> None:
        """A time below the hard floor is not a result: both sides are timed again, once, eagerly
        (graph replays give way to calls; calls already eager get a device-wide synchronise); the
        record says why, and a median still below the floor is implausible-time.

        Graph replays give way to eager calls on the calling stream, not to a device sync: a
        device sync adds a host round trip (about 14 us on an H100) whose jitter swamps a
        few-microsecond kernel, and an honest 2.5 us kernel then read 0 ms after the round trip
        was subtracted. Eager calls run on the legacy default stream, so `<<<>>>` launches are
        inside their events."""
        assert self.protocol is not None
        done = self.result()
        assert done is not None
        sync = SyncMode.DEVICE if self.protocol.mode == TimingMode.EAGER else self.protocol.sync
        how = "eagerly with device sync" if sync == SyncMode.DEVICE else "eagerly"
        why = (
            f"re-timed {how}: under {self.protocol.describe()} its median {done[0].median_ms:.4g} ms was below the "
            f"bytes floor {self.plan.floor_ms:.4g} ms"
        )
        self.first_protocol = self.protocol
        self.protocol = P.TimingProtocol(
            TimingMode.EAGER,
            sync,
            "its time was below the bytes floor" if sync == SyncMode.DEVICE else self.protocol.sync_reason,
            why,
        )
        self.rounds = {REFERENCE: [], COMPARED: []}
        self._order, self._next = schedule(self.timing.rounds), 0

    def _wants_more(self) -> bool:
        """Two more rounds each while the speedup's interval is wider than ± timing.interval
        (noisy rounds get more of them), up to timing.max_rounds."""
        done = len(self.rounds[COMPARED])
        if (
            self._next < len(self._order)
            or done + 2 > self.timing.max_rounds
            or done != len(self.rounds[REFERENCE])
            or not done
        ):
            return False
        assert self.protocol is not None
        paired = paired_speedup(self.rounds[REFERENCE], self.rounds[COMPARED], self.protocol)
        return (paired.high - paired.low) / 2 > self.timing.interval * paired.speedup

    def close(self) -> None:
        """The host may be busy again (also when the worker ended early)."""
        self._held.close()

    def result(self) -> Optional[tuple[TimingStats, PairedSpeedup]]:
        """The compared model's pooled timing and the paired speedup; None unless every round arrived."""
        reference, compared = self.rounds[REFERENCE], self.rounds[COMPARED]
        scheduled = sum(side == COMPARED for side, _ in self._order)
        if self.protocol is None or not compared or len(compared) != scheduled or len(reference) != len(compared):
            return None
        return pooled(compared, self.protocol, common_overhead(reference + compared)), paired_speedup(
            reference, compared, self.protocol
        )
