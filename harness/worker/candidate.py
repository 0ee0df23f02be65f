"""The candidate role: a candidate's ModelNew (or the null candidate: the problem's own Model
through the same path), checked step by step against the reference in the judge, then timed."""

from __future__ import annotations

from typing import Any, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Device
from harness.device.checks import model_gradients, paired_gradients
from harness.device.regions import PLAIN
from harness.worker.compared import Worker, calls_since, model_fault


class CandidateRun(Worker):
    """Steps, in the order protocol.STEPS declares: same_seed (its own weights, under the shared
    seed), then the reference's weights loaded, every planned call, its buffers, its gradients
    (when asked), and the last timed call's output."""

    role = P.Role.CANDIDATE

    def run(self) -> None:
        model_class, cache = self.load()
        model = self.construct(model_class)
        self.phase("check")
        before_checks = dict(cache.calls)
        with torch.no_grad():
            model.eval()
            staged, own = self._same_seed(model)
            staged = self.check_calls(model, model, staged, cache)
        checked = calls_since(cache.calls, before_checks)
        timing = self.job.timing is not None
        after_buffers = P.Want(
            P.WantKind.TRIAL if self.job.gradients else P.WantKind.TIMING if timing else P.WantKind.NONE
        )
        with model_fault("reading its buffers after the checked calls"):
            # a subclass is handed on as it is: its own detach would run its code (deliver describes it)
            buffers = [(k, v.detach() if type(v) in PLAIN else v) for k, v in model.named_buffers()]
        staged = self._step(
            P.StepKind.BUFFERS,
            0,
            [v for _, v in buffers],
            [],
            want=after_buffers,
            names=[self.weights.name_of(k) for k, _ in buffers],
        )
        if self.job.gradients:
            staged = self._gradients(model, staged, own, 0)
            if staged is not None and staged.redraw:  # the first draw did not match: the judge asks for another
                staged = self._gradients(model, staged, own, 1)
        self.end_phase()
        before_timing = dict(cache.calls)
        if timing:
            sets = self.start_timing(staged)
            output = self.time_rounds(model, sets, profiled=True)
            if output is not None and all(isinstance(o, torch.Tensor) for o in output):
                self._step(P.StepKind.TIMED, 0, output, sets[0], want=P.Want(P.WantKind.NONE))
            self.end_phase()
        self.finish(cache, checked, before_timing)

    def _same_seed(self, model: Any) -> tuple[Any, bool]:
        """The first call on the weights the model built under the shared seed; then the reference's
        weights go in, unless it keeps its own (check.weights seed, or nothing pairs). Returns what
        the judge staged next, and whether it keeps its own weights."""
        args = self.plane.staged(self.session.first.sets[0])
        with model_fault("reading its state_dict"):
            pairs = self.weights.pairs(model)
        own = pairs is None
        staged = self._step(
            P.StepKind.SAME_SEED,
            0,
            self._call(model, args, "same_seed"),
            args,
            want=P.Want(P.WantKind.CALL),
            own_weights=own,
        )
        if not own:
            self.load_reference_weights(model, pairs)
        return staged, own

    def _gradients(self, model: Any, staged: Optional[P.Staged], own: bool, draw: int) -> Optional[P.Staged]:
        """Training parity: the gradients of a train-mode forward on the judge's trial inputs, named as
        the reference names its parameters; on its own weights, only those that pair with the reference's.
        `draw` 1 is a second draw, on other inputs, that the judge asked for."""
        assert staged is not None
        args = self.plane.staged(staged.sets[0], staged.fresh)
        with model_fault("the gradient check"):
            status, reason, grads = model_gradients(model, args, self.job.gradient_seed, self.guard)
        if own:  # its own parameters: only those the reference has, by name and shape, can be compared
            grads = paired_gradients(
                grads, {f"parameter {w.name}": tuple(w.tensor.shape) for w in self.session.weights}
            )
        names = [
            f"parameter {self.weights.name_of(k.removeprefix('parameter '))}" if k.startswith("parameter ") else k
            for k in grads
        ]
        want = P.Want(P.WantKind.TIMING if self.job.timing is not None else P.WantKind.NONE)
        staged = self._step(
            P.StepKind.GRADS, draw, list(grads.values()), [], want=want, names=names, status=status, reason=reason
        )
        del grads
        if self.device.type == Device.CUDA:
            torch.cuda.empty_cache()
        return staged
