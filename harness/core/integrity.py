"""The integrity findings on one candidate, from what its worker reported: pure functions from
evidence (profiles, extension call counts, the ATen operators of a CPU forward, timings) to (flag
code, one-line reason) pairs.
harness/core/flags.py applies the policies; evaluate.py gathers the evidence."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Optional

from harness.core.config import Device
from harness.core.records import CallProfile, CheckResult, ForwardOps, SpeedOfLight, TimingStats
from harness.core.scan import custom_share
from harness.core.status import Code, Finding

PROFILE_FLOOR = 0.8  # a median under this fraction of the profiled call's own GPU time is flagged

# ATen operators that do none of a problem's arithmetic (is_compute), named without "aten::" and
# without an in-place "_": allocations and fills, copies and dtype or layout changes, views and
# shape queries, conjugate and negative bits, scalar reads.
ALLOCATIONS = (
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones "
    "full full_like new_full scalar_tensor zero fill resize resize_as set lift lift_fresh lift_fresh_copy"
)
COPIES = (
    "copy clone contiguous to _to_copy _copy_from _copy_from_and_resize type_as detach alias resolve_conj "
    "resolve_neg _conj conj item _local_scalar_dense"
)
VIEWS = (
    "view view_as _unsafe_view reshape reshape_as _reshape_alias as_strided t transpose permute expand expand_as "
    "squeeze unsqueeze select slice narrow unflatten flatten "
    "split split_with_sizes chunk unbind diagonal movedim moveaxis swapaxes swapdims numpy_T mT unfold size sym_size "
    "stride sym_stride numel sym_numel dim result_type"
)
NON_COMPUTE = frozenset(f"{ALLOCATIONS} {COPIES} {VIEWS}".split())


def own_kernels(
    profile: Optional[CallProfile], reference: Optional[CallProfile], names: set[str], floor: float
) -> tuple[Optional[float], list[Finding]]:
    """The share of the profiled GPU time in the candidate's own kernels (`names`), and what it
    shows: none ran (no-custom-kernel), every kernel of the reference's call ran besides them
    (wraps-reference), or they are under `floor` of the time (own-share-low). (None, []) without
    a profile."""
    if profile is None:
        return None, []
    if not profile.kernels:  # nothing ran on the GPU: a kept or constant answer, where the reference computes one
        if reference is None or not reference.kernels:
            return None, []
        launched = sum(k.count for k in reference.kernels)
        return 0.0, [
            (
                Code.NO_CUSTOM_KERNEL,
                f"its profiled call ran no kernel at all, where the reference's ran {launched}: its output comes from "
                "no computation on the call (a kept or constant answer)",
            )
        ]
    share = custom_share([(k.name, k.total_ms) for k in profile.kernels], names)
    if share == 0:
        ran = ", ".join(_short(k.name) for k in profile.kernels[:3])
        why = (
            f"none of its own kernels ({', '.join(sorted(names)[:4])}) ran"
            if names
            else "it brings no kernel of its own"
        )
        return share, [(Code.NO_CUSTOM_KERNEL, f"{why}; the profiled call ran only {ran}")]
    found: list[Finding] = []
    if reference is not None and reference.kernels:
        counts = Counter({k.name: k.count for k in profile.kernels})
        if all(counts[k.name] >= k.count for k in reference.kernels):
            found.append(
                (
                    Code.WRAPS_REFERENCE,
                    (
                        "every kernel of the reference's call "
                        f"({', '.join(_short(k.name) for k in reference.kernels[:3])}) ran in its call too, as "
                        f"often; its own kernels ({share:.1%} of the GPU time) only add to the reference's work"
                    ),
                )
            )
    if share < floor:
        found.append(
            (
                Code.OWN_SHARE_LOW,
                f"its own kernels take {share:.2%} of the profiled GPU time (under check.own_share_floor={floor:g})",
            )
        )
    return share, found


def extension_use(counted: Optional[dict[str, int]]) -> list[Finding]:
    """CPU evidence, where there is no profile: a candidate none of whose load_inline extension
    functions was called in its checked calls (or that builds none) is a torch pass-through.
    `counted` is None when the worker did not report counts."""
    if counted is None or any(n > 0 for n in counted.values()):
        return []
    if counted:
        return [
            (
                Code.NO_CUSTOM_KERNEL,
                f"none of its extensions' functions ({', '.join(sorted(counted)[:4])}) was called in its checked "
                "forward calls",
            )
        ]
    return [(Code.NO_CUSTOM_KERNEL, "it builds no extension of its own (load_inline); its forward is torch's")]


def is_compute(name: str) -> bool:
    """An ATen operator that can do a problem's arithmetic (matmul, addmm, convolutions, norms,
    activations, elementwise and reductions): any `aten::` operator outside NON_COMPUTE, and not a
    query (`is_contiguous`, `_has_compatible_shallow_copy_type`, `_nnpack_available`). An
    in-place variant is its operator (`aten::relu_` is `aten::relu`)."""
    base = _base(name)
    return (
        name.startswith("aten::")
        and base not in NON_COMPUTE
        and not base.startswith(("is_", "_has_"))
        and not base.endswith("_available")
    )


def _base(name: str) -> str:
    """`aten::clamp_min_` -> `clamp_min`: the operator without its namespace or in-place mark."""
    base = name.removeprefix("aten::")
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def reference_ops(
    candidate: Optional[ForwardOps], reference: Optional[ForwardOps], called: Mapping[str, int]
) -> list[Finding]:
    """CPU evidence beside the extension counts: the ATen compute operators of the candidate's
    observed forward against the reference's on the same call. When its extension functions ran
    (`called`) and every compute operator of the reference ran in its forward too, as often, torch
    did the reference's work: `no-custom-kernel` when all of those ran inside its extension
    functions (C++ that only calls ATen), else `wraps-reference` (its functions only add to torch's
    work). Nothing without both observations, or when the reference runs no compute operator."""
    if (
        candidate is None
        or reference is None
        or candidate.error
        or reference.error
        or not any(n > 0 for n in called.values())
    ):
        return []
    wanted, ran, inside = Counter[str](), Counter[str](), Counter[str]()
    for op in reference.compute:
        wanted[_base(op.name)] += op.count
    for op in candidate.compute:
        ran[_base(op.name)] += op.count
        inside[_base(op.name)] += op.inside
    if not wanted or any(ran[name] < n for name, n in wanted.items()):
        return []
    listed = ", ".join(f"aten::{name} x{n}" for name, n in sorted(wanted.items())[:6]) + (
        ", ..." if len(wanted) > 6 else ""
    )
    functions = ", ".join(sorted(name for name, n in called.items() if n > 0)[:4])
    if all(inside[name] >= n for name, n in wanted.items()):
        return [
            (
                Code.NO_CUSTOM_KERNEL,
                f"its extension functions ({functions}) call torch's operators for the reference's work: every "
                f"compute operator of the reference's forward ({listed}) ran inside them",
            )
        ]
    outside = sum(min(ran[name] - inside[name], n) for name, n in wanted.items())
    return [
        (
            Code.WRAPS_REFERENCE,
            f"every compute operator of the reference's forward ({listed}) ran in its forward too, as often "
            f"({outside} of them outside its extension functions); its extension functions ({functions}) only add to "
            "torch's work",
        )
    ]


def side_work(profile: Optional[CallProfile], threads: Any) -> list[Finding]:
    """Work outside the calling stream: other streams, launches after forward returned, streams
    still busy when the calling one drained (profile); threads left running (the worker's `Threads`
    message, or None)."""
    found: list[Finding] = []
    if profile is not None and (profile.streams > 1 or profile.after_return or profile.busy_after_return):
        parts = [f"its call ran on {profile.streams} streams"] if profile.streams > 1 else []
        if profile.after_return:
            parts.append(f"{profile.after_return} GPU activities were launched after forward returned")
        if profile.busy_after_return:
            parts.append(
                f"{profile.busy_after_return} were still running on other streams when the calling stream had finished"
            )
        found.append((Code.SIDE_STREAM, "; ".join(parts) + " (it was timed with a device-wide synchronise)"))
    if threads is not None:
        found.append(
            (
                Code.SIDE_STREAM,
                f"forward left {threads.count} thread(s) running after it returned ({', '.join(threads.names)}; "
                f"first seen after {threads.label})",
            )
        )
    return found


CPU_COPY_BYTES = 64 << 20  # the buffer a CPU's copy bandwidth is measured over (harness.judge.roofline)


def hard_floor_ms(sol: SpeedOfLight, device: str) -> float:
    """The time no implementation can beat: the problem's fewest bytes at the measured copy bandwidth
    (`SpeedOfLight.bytes_ms`). On the CPU, whose caches are not flushed between timed calls, a
    working set smaller than the buffer the bandwidth was measured over may run from cache, faster
    than that: there is no floor then (0)."""
    if device == Device.CPU and sol.min_bytes < CPU_COPY_BYTES:
        return 0.0
    return sol.bytes_ms


def implausible_time(
    timing: TimingStats,
    speedup: float,
    reference_ms: float,
    profile: Optional[CallProfile],
    sol: Optional[SpeedOfLight],
    max_speedup: float,
    impossible_below: float,
    device: str = Device.CUDA,
) -> list[Finding]:
    """Timings to doubt: over `max_speedup` x eager or under the GPU time of the call's own
    profile (suspect-time, to look at), and under the hard speed-of-light floor (implausible-time:
    the fewest bytes at peak bandwidth, which no algorithm avoids; the reference's FLOPs are its
    algorithm's, not the problem's). A time under the floor was already re-timed eagerly with
    device sync (harness.core.pairing), so one still there is not a result."""
    found: list[Finding] = []
    median = timing.median_ms
    if speedup > max_speedup:
        found.append(
            (
                Code.SUSPECT_TIME,
                (
                    f"{speedup:.1f}x faster than eager ({median:.4g} ms vs {reference_ms:.4g} ms) is above "
                    f"check.max_plausible_speedup={max_speedup:g}; look at the profile and the source"
                ),
            )
        )
    if (
        profile is not None
        and profile.launches
        and median < PROFILE_FLOOR * min(profile.kernel_ms, profile.span_ms or profile.kernel_ms)
    ):
        found.append(
            (
                Code.SUSPECT_TIME,
                (
                    f"the timed median {median:.4g} ms is below the GPU time of its own profiled call "
                    f"({profile.kernel_ms:.4g} ms in {profile.launches} activities); the timing does not cover the "
                    "work"
                ),
            )
        )
    if sol is not None and sol.bytes_ms > 0 and median < hard_floor_ms(sol, device) * impossible_below:
        found.append(
            (
                Code.IMPLAUSIBLE_TIME,
                (
                    f"{median:.4g} ms is below the speed-of-light floor {sol.bytes_ms:.4g} ms: the problem's fewest "
                    "bytes "
                    f"({sol.min_bytes:.3g} B, inputs and weights read once, outputs written once) at "
                    f"{sol.peak_gbps:.4g} GB/s, "
                    "which no algorithm avoids; the timing misses work or the output is not computed"
                ),
            )
        )
    return found


PRECISION_FLOOR = 1e-6  # relative errors below this are never called imprecise


def below_float32(
    median_ms: float,
    sol: Optional[SpeedOfLight],
    precision: Mapping[str, float],
    precision_ratio: float,
    allow_tf32: bool,
) -> list[Finding]:
    """Float32 arithmetic, by one rule: on a float32 problem that does not allow TF32, a candidate
    whose median is below the float32 compute floor (the reference algorithm's FLOPs at the measured
    float32 matrix-multiply rate) while its error against float64 is over `precision_ratio` times the
    float32 reference's own did not compute in float32 (TF32, fp16, bf16). Both figures are in the
    reason. Either alone is no finding: an honest kernel may be fast, and one may be less precise
    (less-precise) and slow."""
    if allow_tf32 or sol is None or sol.dtype != "float32" or not precision:
        return []
    floor = sol.compute_ms
    candidate, reference = precision.get("candidate", 0.0), precision.get("reference", 0.0)
    if floor <= 0 or median_ms <= 0 or median_ms >= floor:
        return []
    if candidate <= max(precision_ratio * reference, PRECISION_FLOOR):
        return []
    times = f"{candidate / reference:.0f} times" if reference > 0 else "over"
    gflop = sol.flops / 1e9
    return [
        (
            Code.BELOW_FLOAT32,
            (
                f"its median {median_ms:.4g} ms is below the float32 compute floor {floor:.4g} ms ({gflop:.4g} GFLOP "
                f"at the measured float32 rate {sol.peak_tflops:.4g} TFLOP/s), and its relative error against float64, "
                f"{candidate:.2g}, is {times} the float32 reference's {reference:.2g} (over "
                f"check.precision_ratio={precision_ratio:g}): float32 arithmetic cannot give both; a problem that "
                "allows TF32 declares HARNESS_ALLOW_TF32 = True"
            ),
        )
    ]


# a failed candidate's error is TF32's up to this many times the error that cutting the reference's inputs and
# weights to TF32 gives the problem (the judge's "tf32" figure, measured where the reference multiplies matrices or
# convolves): a kernel that reads float32 as the tensor cores do sits near 1, one that rounds to nearest below it;
# bf16 on zero-mean inputs (3 times the cut's error at any inner dimension) and a wrong value over TF32's own
# error do not
REDUCED_PRECISION_REACH = 1.5


def tolerance_below_float32(
    failed: Optional[CheckResult],
    precision: Mapping[str, float],
    precision_ratio: float,
    allow_tf32: bool,
) -> list[Finding]:
    """The same rule for a candidate the float32 tolerance failed: on a float32 problem that does
    not allow TF32, a value mismatch (not a shape, a NaN or a count) whose relative error against
    float64 is over `precision_ratio` times the float32 reference's own, and within
    REDUCED_PRECISION_REACH times what cutting the reference's inputs and weights to TF32 gives (where
    it multiplies matrices or convolves), is an error of TF32's size: the candidate is less precise,
    whether or not the tolerance's norm term covers that error at this size. By size alone the rule
    cannot tell TF32 from another approximation as coarse (a tanh GELU where the problem computes the
    erf one), so the reason names the size, not the cause. It is not timed, so its speed is no evidence
    either way."""
    if failed is None or failed.passed or not failed.mismatch_fraction:
        return []
    if allow_tf32 or not precision.get("failed") or not precision.get("float32") or "tf32" not in precision:
        return []  # the judge's figures: float32 outputs, and what TF32 gives where the reference multiplies
    candidate, reference = precision.get("candidate", 0.0), precision.get("reference", 0.0)
    reach = REDUCED_PRECISION_REACH * precision["tf32"]
    if not max(precision_ratio * reference, PRECISION_FLOOR) < candidate <= reach:
        return []
    times = f"{candidate / reference:.0f} times" if reference > 0 else "over"
    return [
        (
            Code.BELOW_FLOAT32,
            (
                f"{failed.name}: {failed.reason}; its relative error against float64, {candidate:.2g}, is {times} the "
                f"float32 reference's {reference:.2g} (over check.precision_ratio={precision_ratio:g}), and within "
                f"{REDUCED_PRECISION_REACH:g} times the {precision['tf32']:.2g} that TF32's cut of the reference's "
                "inputs and weights gives: an error of TF32's size on a float32 problem (TF32 arithmetic, or an "
                "approximation as coarse, e.g. of an activation); a problem that allows TF32 declares "
                "HARNESS_ALLOW_TF32 = True"
            ),
        )
    ]


def persisting_l2(timing: TimingStats) -> list[Finding]:
    """A persisting-L2 limit set while being timed: L2 set aside for lines the flush would not
    evict, so cold-cache timings run warm. The timer undoes it before every call; it is flagged."""
    if timing.l2_persisting_found <= 0:
        return []
    return [
        (
            Code.TAMPER_SUSPECT,
            (
                f"set a persisting-L2 limit of {timing.l2_persisting_found / 2**20:.3g} MiB while being timed (L2 "
                "the flush does not evict); the timer reset it to 0 and made its lines normal before every timed "
                "call"
            ),
        )
    ]


def _short(name: str) -> str:
    return name.split("(")[0][:60]
