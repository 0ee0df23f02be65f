"""What a problem's own reference gives a check nothing to judge by, found from the reference itself
(in the judge, and by the lint); such a finding is a note on the verdict, never a failure.

- An *inert buffer*: changed, at the start or once a train call has updated it, it changes no
  output of the eval and train calls that follow and no other buffer after them. BatchNorm's
  `num_batches_tracked` with `momentum` set only counts: a candidate without it, or one that
  counts otherwise, is not wrong. With `momentum=None` it sets the weights of the running
  averages, changes `running_mean`, and is not inert; nor are the running statistics, which an
  eval call reads. The judge probes a buffer only when a candidate's is missing or differs
  (`InertBuffers`), on a copy of the reference.
- An output that is *rounding noise*: on every call of the plan the float64 twin's output is under
  `compare.NOISE_RATIO` of the float32 output's rms (`compare.rounding_noise`): a mean of
  group-normalised values is zero in exact arithmetic, and its float32 values (~1e-9, both signs)
  are the reference's rounding, not an answer. `NoiseScan` follows it through the reference's pass
  of the plan; the comparison then judges that output against the noise's level.
- A trial whose *redraw overflows* the reference: its outputs are Inf or NaN where the calls on the
  problem's own distribution have none (a cumulative product of values in [0, 4)). An honest kernel
  that multiplies in another order meets the overflow elsewhere, so the trial could only fail it:
  `OverflowScan` finds it in the reference's pass of the plan, and the trial draws as the problem does.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Device, Distribution
from harness.core.records import CheckResult
from harness.device.inputs import as_outputs, chunk
from harness.device.inputs import same_tensor_bits as same_bits
from harness.device.setup import synchronize
from harness.judge.compare import NOISE_FACTOR, NOISE_RATIO, rounding_noise

INERT = "no output (train or eval) and no other buffer depends on it in this problem; it is not judged"
NOISE_THEN = f"; candidates' outputs there are judged against {NOISE_FACTOR:g}x that level, with a note"


class NoiseScan:
    """Which outputs are rounding noise around zero on every call seen: by index, the largest rms
    the float32 output had (its level). `open` while one could still be (nothing seen yet, or some
    output was noise on every call so far): only then is the float64 twin worth running."""

    def __init__(self) -> None:
        self.levels: Optional[dict[int, float]] = None  # None: no call seen yet

    @property
    def open(self) -> bool:
        return self.levels is None or bool(self.levels)

    def observe(self, outputs: list[Any], exact: Optional[list[float]]) -> None:
        """One call: the reference's outputs, and the rms of each of the float64 twin's
        (`compare.output_rms`; None: it could not run, and nothing can be called noise)."""
        found = rounding_noise(outputs, exact) if exact is not None else {}
        self.levels = (
            found
            if self.levels is None
            else {i: max(level, found[i]) for i, level in self.levels.items() if i in found}
        )

    def notes(self, what: str, then: str = "") -> tuple[str, ...]:
        """One note per output that is noise on every call seen (`what` names the calls), each
        ending with `then`."""
        levels = sorted((self.levels or {}).items())
        return tuple(
            f"output {i} is rounding noise around zero on {what} (its rms at most {level:.2g}, its float64 value "
            f"under {NOISE_RATIO:g} of that): a defect of the problem{then}"
            for i, level in levels
        )


@dataclasses.dataclass
class OverflowScan:
    """Which trials' redraws overflow the reference (trial -> the note saying so), from the plan's calls in order."""

    trials: dict[int, str] = dataclasses.field(default_factory=dict)
    # whether every output of the calls on the problem's own distribution so far was finite (None: no such call
    # yet, and nothing to tell an overflowing redraw by)
    finite_given: Optional[bool] = None

    def observe(self, call: P.Call, outputs: list[Any]) -> bool:
        """One call of the plan and the reference's outputs: whether its trial is found to overflow
        now (the call is then to be made again, on the problem's own distribution)."""
        share = non_finite_share(outputs)
        if call.distribution == Distribution.GIVEN or call.input in self.trials:
            self.finite_given = self.finite_given is not False and share == 0
            return False
        if not (share and self.finite_given):
            return False
        self.trials[call.input] = (
            f"trial {call.input + 1}'s {call.distribution} inputs overflow the reference ({share:.1%} of its outputs "
            "Inf or NaN, none on the problem's own inputs): that trial uses the problem's own distribution, as the "
            "problem's range is not one a kernel can be judged beyond"
        )
        return True

    def label(self, call: P.Call) -> str:
        """How a check of `call` is named: its plan's label, without the redraw where its trial overflowed."""
        if call.input in self.trials:
            return dataclasses.replace(call, distribution=Distribution.GIVEN).label
        return call.label

    def notes(self) -> tuple[str, ...]:
        return tuple(note for _, note in sorted(self.trials.items()))


def non_finite_share(outputs: list[Any]) -> float:
    """The share of the floating outputs' elements that are Inf or NaN (0.0 when there are none), a chunk at a
    time as `compare.rms` goes."""
    floating = [t.reshape(-1) for t in outputs if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    total = sum(flat.numel() for flat in floating)
    bad = sum(
        int((~torch.isfinite(flat[start : start + chunk(flat)])).sum())
        for flat in floating
        for start in range(0, flat.numel(), chunk(flat))
    )
    return bad / total if total else 0.0


def perturbations(value: torch.Tensor) -> list[torch.Tensor]:
    """Other values of a buffer, near and far: a flag flipped; a count one and a thousand on; a
    float doubled (one up) and negated."""
    if value.dtype == torch.bool:
        return [~value]
    if value.is_floating_point() or value.is_complex():
        return [value * 2 + 1, -value - 0.5]
    return [value + 1, value + 1000]


PROBE_CALLS = ((False, 0), (True, 0), (True, 1), (False, 1))  # (train, input set) of each call a probe makes, in order
# the calls before which a probe changes the buffer: at the start, and once a train call has updated it
CHANGED_BEFORE = (0, 2)


@dataclasses.dataclass
class InertBuffers:
    """Which of the reference's buffers are inert, each probed on a copy of the model the first time
    a candidate's is missing or differs. From `state` (the state the plan's calls start from), the
    copy makes PROBE_CALLS (eval, train, train, eval, on two input sets), each seeded alike, with
    the buffer as it is and changed before one of them (`perturbations`, CHANGED_BEFORE), so that a
    value read only before the first update, or only after it, is changed where it is read
    (BatchNorm's running mean with momentum=None: its first train call replaces it whole). A probe
    that fails, or a reference that does not repeat itself bit for bit, leaves the buffer judged."""

    model: Any  # the reference's model (copied for each probe, never called itself)
    state: dict[str, Any]  # the state the probe starts from
    inputs: Callable[[], list[list[Any]]]  # the probe's two input sets
    seed: int  # torch is seeded with this plus the call's index before each call
    known: dict[str, bool] = dataclasses.field(default_factory=dict)

    def __call__(self, name: str) -> bool:
        if name not in self.known:
            self.known[name] = self._probe(name)
        return self.known[name]

    def _probe(self, name: str) -> bool:
        device = next((t.device for t in self.state.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == Device.CUDA else []):
                twin, sets = copy.deepcopy(self.model), self.inputs()
                if name not in dict(twin.named_buffers()):
                    return False
                # non-persistent buffers as they are
                start = {key: b.detach().clone() for key, b in twin.named_buffers()} | self.state
                base = self._run(twin, start, sets, name, None)
                changes = [(at, k) for at in CHANGED_BEFORE for k in range(len(perturbations(twin.get_buffer(name))))]
                return all(_same(base, self._run(twin, start, sets, name, change)) for change in changes)
        except Exception:  # a probe that cannot run says nothing: the buffer stays judged
            synchronize(device)
            return False

    def _run(
        self, twin: Any, start: dict[str, Any], sets: list[list[Any]], name: str, change: Optional[tuple[int, int]]
    ) -> list[torch.Tensor]:
        """The outputs of PROBE_CALLS from `start`, with `name` changed to its perturbation
        change[1] before call change[0] (None: unchanged), and every other buffer after them."""
        own = dict(twin.named_parameters()) | dict(twin.named_buffers())
        for key, saved in start.items():
            own[key].copy_(saved)
        results: list[torch.Tensor] = []
        for index, (train, inputs) in enumerate(PROBE_CALLS):
            if change is not None and change[0] == index:
                buffer = twin.get_buffer(name)
                buffer.copy_(perturbations(buffer)[change[1]])
            twin.train(train)
            torch.manual_seed(self.seed + index)
            args = [a.clone() if isinstance(a, torch.Tensor) else a for a in sets[inputs]]
            results += [o.detach().clone() for o in as_outputs(twin(*args)) if isinstance(o, torch.Tensor)]
        synchronize(next(iter(own.values())).device if own else torch.device("cpu"))
        return results + [b.detach().clone() for key, b in twin.named_buffers() if key != name]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))


def judge_buffers(name: str, results: dict[str, Optional[CheckResult]], inert: Callable[[str], bool]) -> CheckResult:
    """The buffers check from each buffer's comparison (None: the candidate has none of that name):
    the first missing, then the first differing, buffer that is not inert fails it; inert ones that
    are missing or differ become its note. Passed, it is the comparison with the largest error."""
    missing = [key for key, result in results.items() if result is None]
    differing = [key for key, result in results.items() if result is not None and not result.passed]
    for key in missing + differing:
        if inert(key):
            continue
        result = results[key]
        if result is None:
            return CheckResult(name, False, f"buffer {key} is missing")
        return dataclasses.replace(
            result,
            reason=f"buffer {key} differs from the reference's: "
            f"{result.reason.removeprefix('output: ').removeprefix('output ')}",
        )
    passed = [result for result in results.values() if result is not None and result.passed]
    worst = max(reversed(passed), key=lambda r: r.max_abs_error or 0.0) if passed else CheckResult(name, True, "ok")
    notes = [f"buffer {key} is missing" for key in missing] + [
        f"buffer {key} differs from the reference's" for key in differing
    ]
    return dataclasses.replace(worst, note=f"{', '.join(notes)}: {INERT}") if notes else worst
