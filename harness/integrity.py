"""The integrity findings on one candidate, from what its worker reported: pure functions from
evidence (profiles, extension call counts, timings) to (flag code, one-line reason) pairs.
harness/flags.py applies the policies; evaluate.py gathers the evidence."""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from harness.flags import Code, Finding
from harness.records import CallProfile, SpeedOfLight, TimingStats
from harness.scan import custom_share

PROFILE_FLOOR = 0.8  # a median under this fraction of the profiled call's own GPU time is flagged


def own_kernels(profile: Optional[CallProfile], reference: Optional[CallProfile], names: set[str], floor: float) -> tuple[Optional[float], list[Finding]]:
    """The share of the profiled GPU time in the candidate's own kernels (`names`), and what it
    shows: none ran (no-custom-kernel), every kernel of the reference's call ran besides them
    (wraps-reference), or they are under `floor` of the time (own-share-low). (None, []) without
    a profile."""
    if profile is None or not profile.kernels:
        return None, []
    share = custom_share([(k.name, k.total_ms) for k in profile.kernels], names)
    if share == 0:
        ran = ", ".join(_short(k.name) for k in profile.kernels[:3])
        why = f"none of its own kernels ({', '.join(sorted(names)[:4])}) ran" if names else "it brings no kernel of its own"
        return share, [(Code.NO_CUSTOM_KERNEL, f"{why}; the profiled call ran only {ran}")]
    found: list[Finding] = []
    if reference is not None and reference.kernels:
        counts = Counter({k.name: k.count for k in profile.kernels})
        if all(counts[k.name] >= k.count for k in reference.kernels):
            found.append(
                (
                    Code.WRAPS_REFERENCE,
                    (f"every kernel of the reference's call ({', '.join(_short(k.name) for k in reference.kernels[:3])}) ran in its call too, as often; its own kernels ({share:.1%} of the GPU time) only add to the reference's work"),
                )
            )
    if share < floor:
        found.append((Code.OWN_SHARE_LOW, f"its own kernels take {share:.2%} of the profiled GPU time (under check.own_share_floor={floor:g})"))
    return share, found


def extension_use(counted: Optional[dict[str, int]]) -> list[Finding]:
    """CPU evidence, where there is no profile: a candidate none of whose load_inline extension
    functions was called in its checked calls (or that builds none) is a torch pass-through.
    `counted` is None when the worker did not report counts."""
    if counted is None or any(n > 0 for n in counted.values()):
        return []
    if counted:
        return [(Code.NO_CUSTOM_KERNEL, f"none of its extensions' functions ({', '.join(sorted(counted)[:4])}) was called in its checked forward calls")]
    return [(Code.NO_CUSTOM_KERNEL, "it builds no extension of its own (load_inline); its forward is torch's")]


def side_work(profile: Optional[CallProfile], threads: Any) -> list[Finding]:
    """Work outside the calling stream: other streams, launches after forward returned, streams
    still busy when the calling one drained (profile); threads left running (the worker's `Threads` message, or None)."""
    found: list[Finding] = []
    if profile is not None and (profile.streams > 1 or profile.after_return or profile.busy_after_return):
        parts = [f"its call ran on {profile.streams} streams"] if profile.streams > 1 else []
        if profile.after_return:
            parts.append(f"{profile.after_return} GPU activities were launched after forward returned")
        if profile.busy_after_return:
            parts.append(f"{profile.busy_after_return} were still running on other streams when the calling stream had finished")
        found.append((Code.SIDE_STREAM, "; ".join(parts) + " (it was timed with a device-wide synchronise)"))
    if threads is not None:
        found.append((Code.SIDE_STREAM, f"forward left {threads.count} thread(s) running after it returned ({', '.join(threads.names)}; first seen after {threads.label})"))
    return found


def implausible_time(timing: TimingStats, speedup: float, reference_ms: float, profile: Optional[CallProfile], sol: Optional[SpeedOfLight], max_speedup: float, impossible_below: float) -> list[Finding]:
    """Timings to doubt: over `max_speedup` x eager or under the GPU time of the call's own
    profile (suspect-time, to look at), and under the hard speed-of-light floor (implausible-time:
    the fewest bytes at peak bandwidth, which no algorithm avoids; the reference's FLOPs are its
    algorithm's, not the problem's). A time under the floor was already re-timed eagerly with
    device sync (harness.pairing), so one still there is not a result."""
    found: list[Finding] = []
    median = timing.median_ms
    if speedup > max_speedup:
        found.append((Code.SUSPECT_TIME, (f"{speedup:.1f}x faster than eager ({median:.4g} ms vs {reference_ms:.4g} ms) is above check.max_plausible_speedup={max_speedup:g}; look at the profile and the source")))
    if profile is not None and profile.launches and median < PROFILE_FLOOR * min(profile.kernel_ms, profile.span_ms or profile.kernel_ms):
        found.append((Code.SUSPECT_TIME, (f"the timed median {median:.4g} ms is below the GPU time of its own profiled call ({profile.kernel_ms:.4g} ms in {profile.launches} activities); the timing does not cover the work")))
    if sol is not None and sol.bytes_ms > 0 and median < sol.bytes_ms * impossible_below:
        found.append(
            (
                Code.IMPLAUSIBLE_TIME,
                (
                    f"{median:.4g} ms is below the speed-of-light floor {sol.bytes_ms:.4g} ms: the problem's fewest bytes "
                    f"({sol.min_bytes:.3g} B, inputs and weights read once, outputs written once) at {sol.peak_gbps:.4g} GB/s, "
                    "which no algorithm avoids; the timing misses work or the output is not computed"
                ),
            )
        )
    return found


def persisting_l2(timing: TimingStats) -> list[Finding]:
    """A persisting-L2 limit set while being timed: L2 set aside for lines the flush would not
    evict, so cold-cache timings run warm. The timer undoes it before every call; it is flagged."""
    if timing.l2_persisting_found <= 0:
        return []
    return [(Code.TAMPER_SUSPECT, (f"set a persisting-L2 limit of {timing.l2_persisting_found / 2**20:.3g} MiB while being timed (L2 the flush does not evict); the timer reset it to 0 and made its lines normal before every timed call"))]


def _short(name: str) -> str:
    return name.split("(")[0][:60]
