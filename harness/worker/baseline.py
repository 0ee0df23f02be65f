"""The baseline role: torch.compile of the reference (the problem's own Model on the reference's
weights). It compiles, its calls are checked against the reference, then it is timed; it has no
same-seed, buffers, gradients or timed-output steps."""

from __future__ import annotations

import time
from typing import Any

import torch

from harness.core import protocol as P
from harness.core.status import Status
from harness.device.failures import classify
from harness.device.setup import synchronize
from harness.worker.compared import Worker, calls_since, inductor_cache


class BaselineRun(Worker):
    """torch.compile(mode=job.compile_mode) of the reference, in a worker like a candidate's."""

    role = P.Role.BASELINE

    def run(self) -> None:
        model_class, cache = self.load()
        model = self.construct(model_class)
        assert self.job.compile_mode is not None
        inductor_cache(self.job.build_cache)
        runner = self._compile(model, self.job.compile_mode)
        self.phase("check")
        before_checks = dict(cache.calls)
        with torch.no_grad():
            staged = self.check_calls(model, runner, self.session.first)
        checked = calls_since(cache.calls, before_checks)
        timing = self.job.timing is not None
        timing_staged = self._ask(P.WantKind.TIMING) if timing else staged
        self.end_phase()
        before_timing = dict(cache.calls)
        if timing:
            self.time_rounds(runner, self.start_timing(timing_staged), profiled=False)
            self.end_phase()
        self.finish(cache, checked, before_timing)

    def _compile(self, model: Any, mode: str) -> Any:
        """torch.compile the (weight-loaded) model; the first call, which compiles, is timed here."""
        self.load_reference_weights(model)
        self.phase("compile")
        started = time.perf_counter()
        try:
            runner = torch.compile(model, mode=mode)
            model.eval()
            with torch.no_grad():
                first = self.plane.staged(self.session.first.sets[0])
                runner(*[a.clone() if isinstance(a, torch.Tensor) else a for a in first])
            synchronize(self.device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.BUILD_FAILED) from None
        self.send(P.Compiled(round(time.perf_counter() - started, 3)))
        self.end_phase()
        return runner
