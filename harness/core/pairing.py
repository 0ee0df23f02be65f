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

This module is the statistics and the choices, pure functions of what both sides reported; the
parent's side of the rounds (`Pairing`, which answers the worker's `ready` and `round` messages and
asks the judge for the reference's rounds in between) is in harness.parent.compared_pass.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from typing import Optional

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


@dataclasses.dataclass(frozen=True)
class ProblemTiming:
    """How a problem's compared models are timed, decided once from the reference's pass."""

    timing_mode: str  # eager or graph (timing.mode resolved: `resolve_timing_mode`)
    reason: str = ""  # the measurement that chose it under timing.mode auto
    floor_ms: float = 0.0  # the hard floor: a median below it is re-timed eagerly with device sync (0: none known)


def resolve_timing_mode(timing_mode: str, reference_profile: Optional[CallProfile]) -> tuple[str, str]:
    """The timing mode for a problem from timing.mode: eager, graph, or auto (graph when the
    reference is launch-bound, `CallProfile.launch_bound`, else eager); and, for auto, the measurement that chose it."""
    if timing_mode != TimingMode.AUTO:
        return timing_mode, ""
    bound, why = reference_profile.launch_bound() if reference_profile is not None else (False, "")
    return (TimingMode.GRAPH if bound else TimingMode.EAGER), why


def choose_protocol(
    timing_mode: str,
    sync: str,
    reference: P.Ready,
    compared: P.Ready,
    compared_name: str = "the candidate",
    timing_mode_reason: str = "",
    hold: bool = False,
) -> P.TimingProtocol:
    """One protocol for both sides: whichever side needs the stricter one, both get it.
    `timing_mode` is the problem's resolved timing mode (eager or graph, `resolve_timing_mode`), `sync` the
    configured timing.sync; `timing_mode_reason` is the measurement that chose it, when one did (timing.mode auto).
    `hold` (timing.hold): hold the regions (`TimingProtocol.hold`) of graph replays, and of eager calls when a
    measurement chose eager (the reference is not launch-bound) and the compared model's profile is not launch-bound
    either; never under device sync, nor eager in place of the problem's graph mode (a capture failed). A held eager
    call would not pay for its host launches, so a launch-bound candidate, or one not profiled, is timed unheld, and
    so is the reference beside it."""
    sides = (("the reference", reference), (compared_name, compared))
    chosen_sync, sync_reason = (SyncMode.DEVICE if sync == SyncMode.DEVICE else SyncMode.STREAM), ""
    needs = [f"{name}: {ready.needs_device}" for name, ready in sides if ready.needs_device]
    if sync == SyncMode.AUTO and needs:
        chosen_sync, sync_reason = SyncMode.DEVICE, "device sync for both sides because " + "; ".join(needs)
    chosen_mode, why_mode = TimingMode.EAGER, ""
    if timing_mode == TimingMode.GRAPH:
        failed = [f"{name}: {ready.graph_error}" for name, ready in sides if ready.graph_error]
        if failed:
            why_mode = graph_failure(failed)
        else:
            chosen_mode, why_mode = (
                TimingMode.GRAPH,
                f"CUDA graphs for both sides because {timing_mode_reason}" if timing_mode_reason else "",
            )
    gpu_bound = bool(timing_mode_reason) and compared.profile is not None and not compared.profile.launch_bound()[0]
    held = hold and chosen_sync == SyncMode.STREAM and chosen_mode == timing_mode
    held = held and (chosen_mode == TimingMode.GRAPH or gpu_bound)
    return P.TimingProtocol(chosen_mode, chosen_sync, sync_reason, why_mode, held)


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
        timing_mode=protocol.timing_mode,
        sync=protocol.sync,
        sync_reason=protocol.sync_reason,
        fallback=protocol.timing_mode_reason if protocol.timing_mode == TimingMode.EAGER else "",
        input_sets=last.input_sets,
        flush_bytes=last.flush_bytes,
        sm_clock_mhz=last.sm_clock_mhz,
        clock_event_reasons=last.clock_event_reasons,
        l2_reset=last.l2_reset,
        l2_persisting_found=max(r.l2_persisting_found for r in rounds),
        held_ms=max(r.held_ms for r in rounds),
        host_waits=sum(r.host_waits for r in rounds),
        hold_ended=any(r.hold_ended for r in rounds),
    )
