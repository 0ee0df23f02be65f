"""Correctness, decided in the judge on outputs where they lie (never by the candidate).

Everything here works on tensors of any device, a chunk at a time, so comparing a GB output
needs no full extra copy of it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

import torch

from harness.core.config import DEFAULT_TOLERANCE, Tolerance
from harness.core.records import CheckResult
from harness.core.status import SECOND_DRAW, Backward, Gradients
from harness.device.inputs import chunk

TINY_OUTPUT_RELATIVE = 1e-2  # an output smaller than atol: the error's rms may be at most this fraction of the output's
NOISE_RATIO = 1e-3  # an output whose float64 value's rms is under this fraction of its float32 rms is rounding noise
NOISE_FACTOR = 1e3  # on an output that is rounding noise, the error's rms may be at most this many times the noise's
# KernelBench's allclose, atol = rtol (its v0 and v0.1 eval; its main branch now takes 1e-4 for float32)
KERNELBENCH_TOLERANCE = 1e-2


def compare_outputs(
    name: str,
    expected: dict[str, Any],
    actual: dict[str, Any],
    tolerances: dict[str, Tolerance],
    noise: Optional[Mapping[int, float]] = None,
) -> CheckResult:
    """Compare saved outputs ({"types": [...], "tensors": [...]}) of reference and candidate.
    `noise`: the outputs (by index) that are rounding noise around zero on every call of the plan
    (`rounding_noise`), each with its level, the largest rms of the reference's output: they are
    judged against that level, not against their own size, and the result carries a note. An output
    the worker found with no values of its own (`actual["lazy"]`: a tensor subclass, the meta
    device, a storage smaller than its shape) fails on that, before anything else is asked of it."""
    exp, act = expected["tensors"], actual["tensors"]
    if len(exp) != len(act):
        return outputs_counted(name, len(act), len(exp))
    worst: CheckResult | None = None
    notes: list[str] = []
    lazy = actual.get("lazy") or []
    for index, (e, a, kind) in enumerate(zip(exp, act, actual["types"])):
        label = f"output {index}" if len(exp) > 1 else "output"
        if index < len(lazy) and lazy[index]:  # no values of its own: a tensor subclass, meta, a short storage
            return CheckResult(name, False, f"{label} {lazy[index]}")
        if kind != "Tensor":
            return CheckResult(name, False, f"{label} is a {kind}, not a plain torch.Tensor")
        problem = _form(index, label, expected, actual)
        if problem:
            return CheckResult(name, False, problem)
        if a is None:
            return CheckResult(name, False, f"{label} has no values the judge can read")
        result = _compare_tensor(name, label, e, a, tolerances, noise=(noise or {}).get(index, 0.0))
        if not result.passed:
            return result
        notes += [result.note] if result.note else []
        if worst is None or (result.max_abs_error or 0.0) > (worst.max_abs_error or 0.0):
            worst = result
    return (
        dataclasses.replace(worst, note="; ".join(notes))
        if worst is not None
        else CheckResult(name, True, "ok (no outputs)")
    )


def outputs_counted(name: str, got: int, expected: int) -> CheckResult:
    """The failed check of a model that returned another number of outputs than the reference."""
    return CheckResult(name, False, f"returned {got} outputs, the reference returns {expected}")


def _form(index: int, label: str, expected: dict[str, Any], actual: dict[str, Any]) -> str:
    """Layout, device and input aliasing of an output against the reference's (when recorded)."""

    def get(record: dict[str, Any], key: str) -> Any:
        values = record.get(key)
        return values[index] if values is not None and index < len(values) else None

    if get(actual, "layouts") not in (None, "torch.strided"):
        return f"{label} has layout {get(actual, 'layouts')}, not a dense (strided) tensor"
    if None not in (get(expected, "devices"), get(actual, "devices")) and get(actual, "devices") != get(
        expected, "devices"
    ):
        return f"{label} is on {get(actual, 'devices')}, the reference's on {get(expected, 'devices')}"
    alias, reference_alias = get(actual, "aliases"), get(expected, "aliases")
    if alias is not None and alias >= 0 and reference_alias != alias:
        return f"{label} shares memory with input {alias}; the reference returns a tensor of its own"
    return ""


def rms(flat: torch.Tensor) -> float:
    """The root mean square of the finite elements of a flat tensor, in chunks."""
    total, count = 0.0, 0
    step = chunk(flat)
    for start in range(0, flat.numel(), step):
        part = flat[start : start + step].to(torch.float64 if flat.dtype == torch.float64 else torch.float32)
        finite = part[torch.isfinite(part)]
        total += float(finite.double().pow(2).sum())
        count += finite.numel()
    return math.sqrt(total / count) if count else 0.0


def _compare_tensor(
    name: str,
    label: str,
    e: torch.Tensor,
    a: torch.Tensor,
    tolerances: dict[str, Tolerance],
    *,
    outputs: bool = True,
    noise: float = 0.0,
) -> CheckResult:
    if tuple(a.shape) != tuple(e.shape):
        return CheckResult(name, False, f"{label} has shape {tuple(a.shape)}, expected {tuple(e.shape)}")
    if a.dtype != e.dtype:
        return CheckResult(
            name,
            False,
            f"{label} has dtype {str(a.dtype).removeprefix('torch.')}, expected {str(e.dtype).removeprefix('torch.')}",
        )
    if not e.is_floating_point():
        a = a.to(e.device)
        equal = torch.equal(a, e)
        mismatch = float((a != e).float().mean()) if e.numel() else 0.0
        return CheckResult(
            name,
            equal,
            "ok" if equal else f"{label} differs in {mismatch:.2%} of elements (exact match required)",
            0.0,
            0.0,
            mismatch,
        )
    tol = tolerances.get(str(e.dtype).removeprefix("torch."), DEFAULT_TOLERANCE)
    flat_e, flat_a = e.reshape(-1), a.reshape(-1)
    scale = rms(flat_e) if tol.norm else 0.0
    tally = _tally(tol, scale, flat_e, outputs, noise)
    compute = torch.float64 if e.dtype == torch.float64 else torch.float32
    step = chunk(e)
    for start in range(0, flat_e.numel(), step):
        # Chunks bound the memory a 1 GB output needs; float32 keeps the differences of nearby
        # values exact enough (Sterbenz) at a fraction of float64's cost.
        ce = flat_e[start : start + step].to(compute)
        ca = flat_a[start : start + step].to(device=ce.device, dtype=compute)  # a host mailbox: a chunk at a time
        if not tally.finite_chunk(ce, ca):
            problem = tally.nonfinite_chunk(ce, ca, start)
            if problem:
                return CheckResult(name, False, f"{label} {problem}")
    return tally.result(name, label, tol, scale, flat_e.numel())


def _tally(tol: Tolerance, scale: float, flat_e: torch.Tensor, outputs: bool, noise: float) -> "_Tally":
    """The bounds of one floating comparison. The absolute term is the tolerance's own plus the
    norm-wise one. Where the dtype's rule has a norm-wise term (KernelBench's has none), one of two
    rules also bounds the error's rms:
    - an output that is rounding noise around zero on every call of the plan (`noise` is its level;
      a defect of the problem) is judged against that level: within NOISE_FACTOR times it, in rms
      and (beyond atol) elementwise. Another noise, or exact zeros, pass; a wrong value above the
      noise does not. The rule below would judge the noise against itself, and fail honest kernels.
    - else, an output smaller than atol (a softmax over 393216 columns is ~2.5e-6), where atol alone
      would pass any answer of that size, zeros too: the error's rms at most TINY_OUTPUT_RELATIVE of
      the output's (rounding is relative, so honest float32 sits orders below it). Only for a forward
      output of one sign (probabilities, norms, losses): noise around a value that is zero in exact
      arithmetic (a Linear's bias gradient before a BatchNorm) has both signs; it is left to atol."""
    if noise > 0:
        return _Tally(
            tol.atol + tol.norm * scale + NOISE_FACTOR * noise,
            tol.rtol,
            limit=NOISE_FACTOR * noise if tol.norm > 0 else 0.0,
            noise=noise,
        )
    tiny = outputs and tol.norm > 0 and 0 < scale < tol.atol and one_sign(flat_e)
    return _Tally(tol.atol + tol.norm * scale, tol.rtol, limit=TINY_OUTPUT_RELATIVE * scale if tiny else 0.0)


class _Tally:
    """What the chunks of one floating comparison add up to: the largest errors, the elements
    outside the tolerance (and outside KernelBench's), the worst element, the squared error."""

    def __init__(self, atol: float, rtol: float, limit: float = 0.0, noise: float = 0.0) -> None:
        self.atol, self.rtol = atol, rtol
        self.limit = limit  # the largest rms the error may have (0: no limit; `_tally` says when there is one)
        self.noise = noise  # the output is rounding noise around zero at this level (0: it is not)
        self.max_abs = self.max_rel = 0.0
        self.outside = self.loose = 0  # elements outside the tolerance; of those, outside KernelBench's too
        self.squares = 0.0  # sum of squared differences over finite elements, kept under a limit only
        self.worst: tuple[float, float, float] | None = None  # (excess over the bound, got, expected)

    def _worst(self, excess: torch.Tensor, ca: torch.Tensor, ce: torch.Tensor) -> None:
        index = int(torch.argmax(excess))
        if self.worst is None or float(excess[index]) > self.worst[0]:
            self.worst = (float(excess[index]), float(ca[index]), float(ce[index]))

    def finite_chunk(self, ce: torch.Tensor, ca: torch.Tensor) -> bool:
        """Tally a chunk where both sides are finite, in few passes; False (nothing tallied) when
        either side has a NaN or Inf (the difference's maximum is then NaN or Inf)."""
        diff = torch.sub(ca, ce).abs_()
        largest = float(diff.max()) if diff.numel() else 0.0
        if not (largest == largest and largest != float("inf")):
            return False
        magnitude = ce.abs()
        self.max_abs = max(self.max_abs, largest)
        self.max_rel = max(self.max_rel, float(torch.div(diff, magnitude).nan_to_num_(0.0, 0.0, 0.0).max()))
        self.squares += float(diff.square().sum()) if self.limit else 0.0
        bound = magnitude.mul_(self.rtol).add_(self.atol)
        outside = int(torch.gt(diff, bound).sum())
        if outside:
            self.outside += outside
            self.loose += int(torch.gt(diff, ce.abs().mul_(KERNELBENCH_TOLERANCE).add_(KERNELBENCH_TOLERANCE)).sum())
            self._worst(diff.sub_(bound), ca, ce)
        return True

    def nonfinite_chunk(self, ce: torch.Tensor, ca: torch.Tensor, start: int) -> str:
        """Tally a chunk with a NaN or Inf: they must sit where the reference has them (Inf of the
        same sign); the finite rest is compared as usual. Returns the problem, or ""."""
        finite_e, finite_a = torch.isfinite(ce), torch.isfinite(ca)
        if not (bool(finite_e.all()) and bool(finite_a.all())):
            nan_e, nan_a = torch.isnan(ce), torch.isnan(ca)
            if not torch.equal(nan_e, nan_a):
                return (
                    f"has NaN where the reference does not, or lacks NaN where it does ({int((nan_e ^ nan_a).sum())} "
                    f"positions from element {start})"
                )
            inf_e, inf_a = torch.isinf(ce), torch.isinf(ca)
            if not torch.equal(inf_e, inf_a) or not torch.equal(ce[inf_e], ca[inf_a]):
                return f"has Inf where the reference does not, or of the other sign (from element {start})"
            ce = torch.where(finite_e, ce, 0.0)
            ca = torch.where(finite_e, ca, 0.0)
        diff = (ca - ce).abs_()
        magnitude = ce.abs()
        excess = diff - (self.atol + self.rtol * magnitude)
        self.loose += int((diff > KERNELBENCH_TOLERANCE * (1 + magnitude)).sum())
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.max_rel = max(self.max_rel, float(torch.where(magnitude > 0, diff / magnitude, 0.0).max()))
        self.squares += float(diff.square().sum()) if self.limit else 0.0
        self.outside += int((excess > 0).sum())
        self._worst(excess, ca, ce)
        return ""

    def result(self, name: str, label: str, tol: Tolerance, scale: float, count: int) -> CheckResult:
        mismatch = self.outside / max(count, 1)
        if self.outside:
            assert self.worst is not None
            reason = (
                f"{label}: {mismatch:.2%} of elements outside atol={tol.atol:g}, rtol={tol.rtol:g}"
                + (f", norm={tol.norm:g} x rms {scale:.3g}" if tol.norm else "")
                + "; "
                f"max abs error {self.max_abs:.3g} (worst: got {self.worst[1]:.6g}, expected {self.worst[2]:.6g})"
            )
            return CheckResult(
                name, False, reason, self.max_abs, self.max_rel, mismatch, within_kernelbench=self.loose == 0
            )
        error = math.sqrt(self.squares / max(count, 1)) if self.limit else 0.0
        if error > self.limit:
            return CheckResult(
                name,
                False,
                self._over_limit(label, tol, scale, error),
                self.max_abs,
                self.max_rel,
                0.0,
                within_kernelbench=self.loose == 0,
            )
        note = (
            f"{label} is rounding noise around zero (on every call the reference's float64 value is under "
            f"{NOISE_RATIO:g} of its float32 rms): "
            f"a defect of the problem; it was judged against {NOISE_FACTOR:g}x the noise's rms, not against its own "
            "size"
        )
        return CheckResult(name, True, "ok", self.max_abs, self.max_rel, 0.0, note=note if self.noise else "")

    def _over_limit(self, label: str, tol: Tolerance, scale: float, error: float) -> str:
        """Why a comparison whose every element is inside the bound fails on its error's rms (`error`)."""
        if self.noise:
            return (
                f"{label}: the reference's output is rounding noise around zero (rms at most {self.noise:.3g}: a "
                f"defect of the problem), but the error's rms is {error:.3g}, over {NOISE_FACTOR:g}x that; max abs "
                f"error {self.max_abs:.3g}"
            )
        return (
            f"{label}: every element is within atol={tol.atol:g} of an output whose rms is {scale:.3g}, smaller than "
            "atol, "
            f"but the error's rms is {error / scale:.3g} of the output's (over {TINY_OUTPUT_RELATIVE:g}); max abs "
            f"error {self.max_abs:.3g}"
        )


def compare_gradients(
    expected: dict[str, Any], actual: dict[str, Any], tolerances: dict[str, Tolerance], factor: float
) -> tuple[Gradients, str]:
    """Gradients saved by reference and candidate workers ({"status", "reason", "tensors", ...}):
    (Gradients, why). Tolerances are the outputs' times `factor`."""
    wanted, got = expected["tensors"], actual["tensors"]
    if actual["status"] != Backward.RAN:
        return Gradients.FORWARD_ONLY, actual["reason"]
    if wanted and not got:
        return Gradients.FORWARD_ONLY, "no gradient reaches its inputs or parameters"
    missing = [name for name in wanted if name not in got]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        verb, owner = ("gets", "reference's does") if len(missing) == 1 else ("get", "reference's do")
        return Gradients.MISMATCH, f"{', '.join(missing[:3])}{more} {verb} no gradient; the {owner}"
    scaled = {
        dtype: Tolerance(atol=t.atol * factor, rtol=t.rtol * factor, norm=t.norm * factor)
        for dtype, t in tolerances.items()
    }
    worst = 0.0
    for name, e in wanted.items():
        result = _compare_tensor("gradients", name, e, got[name], scaled, outputs=False)
        if not result.passed:
            return Gradients.MISMATCH, f"gradient of {result.reason}"
        worst = max(worst, result.max_abs_error or 0.0)
    return Gradients.MATCH, f"{len(wanted)} gradients match; max abs error {worst:.2g}"


def precision_figures(
    got: list[Any], ours: list[Any], wide: list[Any], in_tf32: Optional[list[Any]]
) -> dict[str, float]:
    """The candidate's (`got`) and the reference's (`ours`) relative errors against the float64 twin's
    outputs (`wide`), whether those are float32, and TF32's (the reference on inputs and weights cut to
    TF32, where it multiplies matrices or convolves); {} when an error is not a number."""
    candidate, reference = relative_error(got, wide), relative_error(ours, wide)
    if candidate != candidate or reference != reference:
        return {}
    found = {"candidate": candidate, "reference": reference, "float32": float(float32_outputs(ours))}
    rounded = relative_error(in_tf32, wide) if in_tf32 is not None else float("nan")
    if rounded == rounded:
        found["tf32"] = rounded
    return found


def second_draw(first: tuple[str, str], second: tuple[Gradients, str], trial: int) -> tuple[Gradients, str]:
    """The gradients' verdict from two draws: the first, on trial 1's inputs, did not match; the
    second, on trial `trial + 1`'s, decides. Where a forward has a kink (a ReLU at zero, a tie in a
    max), two forwards that round differently can land on its two sides, and the gradients jump
    there: a mismatch that other inputs do not repeat is that, and a wrong backward repeats."""
    status, why = second
    where = f"{SECOND_DRAW} (trial {trial + 1}'s inputs)"
    if status == Gradients.MATCH:
        return status, (
            f"the first draw (trial 1's inputs) did not match ({first[1]}), but {where} every gradient did ({why}): "
            "a kink of the forward that the two sides' rounding put on its two sides"
        )
    return status, f"{first[1]}; and {where}: {why}"


def one_sign(values: torch.Tensor) -> bool:
    """Every finite element >= 0, or every one <= 0 (a chunk at a time)."""
    positive = negative = True
    step = chunk(values)
    for start in range(0, values.numel(), step):
        part = values[start : start + step]
        positive = positive and not bool((part < 0).any())
        negative = negative and not bool((part > 0).any())
        if not (positive or negative):
            return False
    return True


def float32_outputs(outputs: list[Any]) -> bool:
    """Whether the outputs' floating tensors are float32 (at least one): a float32 problem's."""
    floating = [o for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point()]
    return bool(floating) and all(o.dtype == torch.float32 for o in floating)


def relative_error(outputs: list[Any], wide: list[Any]) -> float:
    """||x - exact|| / ||exact|| over all floating outputs against their float64 values (`wide`),
    over finite elements, accumulated in float64 a chunk at a time; nan when not comparable."""
    num = den = 0.0
    if len(outputs) != len(wide):
        return float("nan")
    for got, exact in zip(outputs, wide):
        if not (
            isinstance(exact, torch.Tensor)
            and exact.is_floating_point()
            and isinstance(got, torch.Tensor)
            and got.shape == exact.shape
        ):
            return float("nan")
        flat_g, flat_e = got.reshape(-1), exact.reshape(-1)
        step = chunk(exact)
        for start in range(0, flat_e.numel(), step):
            e = flat_e[start : start + step].double()
            g = flat_g[start : start + step].to(device=e.device, dtype=torch.float64)
            finite = torch.isfinite(e) & torch.isfinite(g)
            num += float(((g - e)[finite] ** 2).sum())
            den += float((e[finite] ** 2).sum())
    return (num / den) ** 0.5 if den > 0 else float("nan")


def output_rms(outputs: list[Any]) -> list[float]:
    """Each output's rms over its finite elements (nan for one that is not a floating tensor)."""
    return [
        rms(o.reshape(-1)) if isinstance(o, torch.Tensor) and o.is_floating_point() else float("nan") for o in outputs
    ]


def rounding_noise(outputs: list[Any], exact: list[float]) -> dict[int, float]:
    """The floating outputs of one call that are rounding noise around zero, by index, each with its
    rms: the float64 twin's output (`exact`: the rms of each, `output_rms`) is under NOISE_RATIO of
    the output's, which is not zero. A mean of group-normalised values is zero in exact arithmetic:
    ~1e-9 of both signs in float32, ~1e-17 in float64. A real output, however small, has a float64
    value of its own size; exact zeros are no noise."""
    found: dict[int, float] = {}
    for index, (out, wide) in enumerate(zip(outputs, exact)):
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
            level = rms(out.reshape(-1))
            if level > 0 and wide <= NOISE_RATIO * level:
                found[index] = level
    return found
