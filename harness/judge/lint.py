"""Can a problem tell right from wrong? Checks on the reference itself, run in a subprocess.

    python -m harness.judge.lint PROBLEM_FILE DEVICE SETTINGS_JSON     (prints one JSON line)

For one problem: the reference is deterministic; an all-zeros, a constant and an input-independent
output would all fail the tolerance; no output is rounding noise around zero; outputs depend on
the inputs and on the weights; on CUDA, the eager reference is not launch-bound and its time is in
the suite's range; its memory fits the device the suite targets. Each check is pass, fail, warn or
skip, with the numbers behind it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from harness.core.config import Device, TimerSettings
from harness.core.errors import one_line
from harness.core.records import from_dict
from harness.core.status import Vocabulary


class LintOutcome(Vocabulary):
    """A lint check's verdict; a problem with any `fail` fails the lint."""

    PASS = "pass"  # the problem can tell right from wrong here
    FAIL = "fail"  # it cannot: a wrong kernel would pass, or the problem cannot be run as the suite needs
    WARN = "warn"  # close to failing, or outside the suite's aims
    SKIP = "skip"  # the check does not apply (or needs CUDA)


@dataclasses.dataclass(frozen=True)
class LintCheck:
    """One check on one problem, as the lint process prints it (JSON) and the report shows it."""

    name: str  # what is checked, e.g. "deterministic"
    verdict: LintOutcome  # its verdict (a plain string from JSON is read as one)
    detail: str  # the numbers behind it

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", LintOutcome(self.verdict))


def _by_share(share: float) -> LintOutcome:
    """The verdict on a wrong output that matches `share` of the elements: fail when it passes the
    tolerance (every element), warn when it nearly does (over 90%), else pass."""
    return LintOutcome.FAIL if share == 1.0 else (LintOutcome.WARN if share > 0.9 else LintOutcome.PASS)


def _compared(outputs: list[Any]) -> list[Any]:
    """The outputs the harness compares by value: floating tensors (within the tolerance) and
    integer ones (exactly, as argmax's indices are)."""
    import torch

    return [
        o
        for o in outputs
        if isinstance(o, torch.Tensor) and (o.is_floating_point() or (not o.is_complex() and o.dtype != torch.bool))
    ]


def _share_within(candidate: list[Any], expected: list[Any], atol: float, rtol: float, norm: float = 0.0) -> float:
    """The share of elements of `expected` that `candidate` matches within the tolerance, the
    harness's rule (harness.judge.compare: plus norm x rms of the expected output); 1.0: it passes."""
    import torch

    from harness.judge.compare import rms

    inside = total = 0
    for c, e in zip(candidate, expected):
        scale = rms(e.reshape(-1)) if norm and e.is_floating_point() else 0.0
        ok = torch.isclose(c.to(e.dtype).expand_as(e), e, atol=atol + norm * scale, rtol=rtol, equal_nan=True)
        inside += int(ok.sum())
        total += ok.numel()
    return inside / max(total, 1)


def lint(path: Path, device_name: str, settings: dict[str, Any]) -> list[LintCheck]:
    """The checks on the problem at `path`, on `device_name`, with `settings` (the tolerance, the
    memory and time limits, the timing config), in the report's order."""
    import importlib.util

    import torch

    from harness.device.inputs import as_outputs, randomize_state

    atol, rtol, norm = settings["atol"], settings["rtol"], settings.get("norm", 0.0)
    device = torch.device(device_name)
    spec = importlib.util.spec_from_file_location("__lint_problem__", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def inputs(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        return [a.to(device) if isinstance(a, torch.Tensor) else a for a in module.get_inputs()]

    torch.manual_seed(1)
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    checks: list[LintCheck] = []
    if device.type == Device.CUDA:
        torch.cuda.reset_peak_memory_stats(device)
    with torch.no_grad():
        first_inputs, other_inputs = inputs(11), inputs(12)
        first = _compared(as_outputs(model(*first_inputs)))
        again = _compared(as_outputs(model(*first_inputs)))
        other = _compared(as_outputs(model(*other_inputs)))
        if not first:
            return [
                LintCheck(
                    "compared outputs",
                    LintOutcome.FAIL,
                    "the reference returns no floating or integer tensor: nothing to compare",
                )
            ]
        same = _share_within(again, first, 0.0, 0.0)
        close = _share_within(again, first, atol, rtol, norm)
        checks.append(
            LintCheck(
                "deterministic",
                LintOutcome.PASS if close == 1.0 else LintOutcome.FAIL,
                f"the same inputs twice: {same:.2%} of elements bit-identical, {close:.2%} within tolerance",
            )
        )
        zeros = _share_within([torch.zeros_like(o) for o in first], first, atol, rtol, norm)
        checks.append(LintCheck("zeros fail", _by_share(zeros), f"an all-zeros output matches {zeros:.2%} of elements"))
        checks.append(_rounding_noise(model, [first_inputs, other_inputs]))
        if all(o.numel() <= 1 for o in first):  # a loss: a constant equal to it is the output itself
            checks.append(
                LintCheck(
                    "constant fails",
                    LintOutcome.SKIP,
                    "every output has one element: its own mean is itself; 'depends on inputs' judges it",
                )
            )
        else:
            constant = _share_within(
                [torch.full_like(o, float(o.float().mean())) for o in first], first, atol, rtol, norm
            )
            checks.append(
                LintCheck(
                    "constant fails",
                    _by_share(constant),
                    f"a constant output (the mean) matches {constant:.2%} of elements",
                )
            )
        stale = (
            _share_within(first, other, atol, rtol, norm)
            if all(a.shape == b.shape for a, b in zip(first, other))
            else 0.0
        )
        checks.append(
            LintCheck(
                "depends on inputs",
                _by_share(stale),
                f"the output for other inputs matches {stale:.2%} of this one's elements",
            )
        )
        if any(True for _ in model.parameters()) or any(True for _ in model.buffers()):
            randomize_state(model, 13)
            moved = _compared(as_outputs(model(*first_inputs)))
            kept = _share_within(moved, first, atol, rtol, norm)
            checks.append(
                LintCheck(
                    "depends on weights",
                    _by_share(kept),
                    f"with redrawn weights the output still matches {kept:.2%} of elements",
                )
            )
        else:
            checks.append(LintCheck("depends on weights", LintOutcome.SKIP, "the model has no parameters or buffers"))
    return checks + _memory_and_launches(model, first_inputs, first, device, settings)


def _rounding_noise(model: Any, sets: list[list[Any]]) -> LintCheck:
    """Fails when an output is rounding noise around zero on every input set: its float64 value
    (the model's float64 copy's) is under NOISE_RATIO of its float32 rms (a mean of
    group-normalised values is zero in exact arithmetic). No kernel's answer to it can be judged:
    the harness judges it against the noise's level, with a note, but the problem has a defect."""
    import copy

    import torch

    from harness.device.inputs import as_outputs
    from harness.judge.compare import NOISE_RATIO, output_rms
    from harness.judge.degenerate import NoiseScan

    scan = NoiseScan()
    try:
        twin = copy.deepcopy(model).double()
        for args in sets:
            wide = as_outputs(
                twin(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
            )
            scan.observe(as_outputs(model(*args)), output_rms(wide))
    except Exception as exc:
        return LintCheck(
            "not rounding noise", LintOutcome.SKIP, f"the float64 copy of the model does not run: {one_line(exc)}"
        )
    if not scan.levels:
        return LintCheck(
            "not rounding noise",
            LintOutcome.PASS,
            f"every floating output's float64 value is at least {NOISE_RATIO:g} of its float32 rms (or both are "
            f"zero), on {len(sets)} input sets",
        )
    return LintCheck(
        "not rounding noise",
        LintOutcome.FAIL,
        "; ".join(scan.notes(f"{len(sets)} input sets", ": no kernel's answer to it can be judged")),
    )


def _memory_and_launches(
    model: Any, args: list[Any], outputs: list[Any], device: Any, settings: dict[str, Any]
) -> list[LintCheck]:
    """Fits in memory (CUDA: the peak so far; CPU: inputs, outputs and weights, a floor), then, on
    CUDA, not launch-bound and time in range."""
    import torch

    limit = settings["memory_gb"] * (1 << 30)
    if device.type == Device.CUDA:
        peak = torch.cuda.max_memory_allocated(device)
        return [
            LintCheck(
                "fits in memory",
                LintOutcome.PASS if peak <= limit else LintOutcome.FAIL,
                f"peak {peak / (1 << 30):.2f} GiB allocated, limit {settings['memory_gb']:g} GiB",
            ),
            *_launch_bound(model, args, device, settings),
        ]
    tensors = (
        [a for a in args if isinstance(a, torch.Tensor)] + outputs + list(model.parameters()) + list(model.buffers())
    )
    floor = sum(t.numel() * t.element_size() for t in tensors)
    return [
        LintCheck(
            "fits in memory",
            LintOutcome.PASS if floor <= limit else LintOutcome.FAIL,
            f"inputs, outputs and weights take {floor / (1 << 30):.2f} GiB (a floor), limit "
            f"{settings['memory_gb']:g} GiB",
        ),
        LintCheck("not launch-bound", LintOutcome.SKIP, "needs CUDA to judge"),
    ]


def _launch_bound(model: Any, args: list[Any], device: Any, settings: dict[str, Any]) -> list[LintCheck]:

    import torch

    from harness.device.profile import profile_call
    from harness.device.timing import flush_buffer, time_forward

    cfg = from_dict(TimerSettings, settings["timing"])
    with torch.no_grad():
        stats = time_forward(model, [args], device, cfg)
        profile = profile_call(model, args, device, flush_buffer(device))
    busy = profile.kernel_ms / stats.median_ms if stats.median_ms > 0 else 0.0
    low, high = settings["time_ms"]
    checks = [
        LintCheck(
            "not launch-bound",
            LintOutcome.PASS if busy >= 0.5 else LintOutcome.FAIL,
            f"GPU work is {profile.kernel_ms:.4g} ms of a {stats.median_ms:.4g} ms call ({busy:.0%}) in "
            f"{profile.launches} launches",
        )
    ]
    inside = low <= stats.median_ms <= high
    checks.append(
        LintCheck(
            "time in range",
            LintOutcome.PASS if inside else LintOutcome.WARN,
            f"eager reference {stats.median_ms:.4g} ms; the suite aims for {low:g}-{high:g} ms",
        )
    )
    return checks


def main() -> None:
    path, device, settings = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    try:
        checks = lint(path, device, settings)
    except Exception as exc:  # the problem itself does not run: that is the finding
        checks = [LintCheck("runs", LintOutcome.FAIL, one_line(exc))]
    print(json.dumps([dataclasses.asdict(c) for c in checks]))


if __name__ == "__main__":
    main()
