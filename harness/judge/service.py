"""The judge: a long-lived trusted process that serves one problem on one device for a lane.

It runs only the problem's own code and the harness. It makes every input on the device from the
run's secret seeds, runs the reference once through the plan (its record: timing, profile,
speed-of-light, memory), and then serves compared workers one session at a time:
- it copies the worker's inputs and the reference's weights into a region of the worker's own
  (nothing else of the judge's is in it), and stages each call's inputs there;
- it runs the reference in lock-step with the worker (same calls, same order, same state), so an
  expected output exists only for the step being checked: memory stays bounded by one call;
- it compares each step's outputs in place, in the mailbox region the worker wrote them to, and
  checks that the worker left the inputs it was given as they were.
The parent gets verdicts and statistics, never tensors. Requests and replies are typed messages
(harness.core.protocol), one JSON line each, on two pipes of its own; what the problem prints goes to
the judge's log.

`Judge` answers the requests; the work is its collaborators': the reference model and its inputs
(harness.judge.reference.Reference), the sessions and what is staged in their regions
(harness.judge.staging.Stager), the steps' verdicts (`Checker`) and the reference's timing
(`ReferenceTiming`).

Started by `harness.parent.supervise.JudgeClient` as `python -m harness.judge.service REQUEST_FD REPLY_FD`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Device, ModuleMode, Tolerance
from harness.core.errors import one_line
from harness.core.integrity import is_compute
from harness.core.pairing import device_sync_reason
from harness.core.records import CallProfile, CheckResult, ForwardOps
from harness.core.status import Backward, Gradients, Status
from harness.device.buildcache import BuildCache
from harness.device.checks import model_gradients, paired_gradients
from harness.device.failures import WorkerFailure, classify
from harness.device.profile import observe_ops, observed_call, profile_call
from harness.device.regions import device_sharing, dtype_of, view
from harness.device.setup import PREWARM, prewarm_cuda, setup_device, synchronize
from harness.device.timed import prepare_timer, time_round
from harness.device.timing import flush_buffer
from harness.judge.compare import (
    compare_gradients,
    compare_outputs,
    float32_outputs,
    outputs_counted,
    precision_figures,
    second_draw,
)
from harness.judge.degenerate import NOISE_THEN, InertBuffers, judge_buffers
from harness.judge.reference import (
    Reference,
    device_memory,
    in_tf32,
    meta_footprint,
    over_share,
    release,
    structure_notes,
    unfit,
)
from harness.judge.roofline import count_work, device_peaks, floor
from harness.judge.staging import Footprint, SessionState, Stager

# a second gradient draw, when the first did not match, runs on this trial's inputs (trial 2, at the problem's size)
REDRAW_TRIAL = 1


class Checker:
    """The verdict on each step a worker reports: the step must come in the order its role declares
    (protocol.STEPS); the reference runs the same step on the judge's own copy of the inputs, and the worker's outputs
    are compared with its outputs in place, in the worker's mailbox."""

    def __init__(self, job: P.JudgeJob, reference: Reference, stager: Stager, tolerances: dict[str, Tolerance]) -> None:
        self.job = job
        self.reference = reference
        self.stager = stager
        self.device = reference.device
        self.tolerances = tolerances
        self.inert = InertBuffers(
            reference.model,
            reference.randomized,
            lambda: [reference.inputs(0), reference.inputs(min(1, len(job.input_seeds) - 1))],
            job.rng_seed,
        )

    def check(self, number: int, step: P.Step) -> P.StepAnswer:
        """The verdict on one step of session `number`, with what it asks for next staged."""
        session = self.stager.sessions.get(number)
        if session is None:
            return P.StepAnswer(failure=P.Failure(Status.HARNESS_ERROR, f"no session {number}"))
        order = P.out_of_order(
            session.role, session.seen, step, len(P.role_calls(session.role, self.job.calls)), self.job.gradients
        )
        if order:
            return P.StepAnswer(failure=P.Failure(Status.FORGED_RESULT, order))
        session.seen.append(step.step)
        with torch.no_grad():
            verdict = self._judge_step(session, step)
        if verdict.failure is None and (
            verdict.check is None or verdict.check.passed or step.step == P.StepKind.SAME_SEED
        ):
            verdict = dataclasses.replace(verdict, staged=self._stage_next(session, step))
        synchronize(self.device)
        release(self.device)  # what this step held goes back before the worker's next step
        return verdict

    def _stage_next(self, session: SessionState, step: P.Step) -> Optional[P.Staged]:
        """What the worker asked for, or, after a first gradient draw that did not match, another trial's
        inputs for a second draw (what it asked for then comes after that draw)."""
        redraw = step.step == P.StepKind.GRADS and step.index == 0 and session.first_gradients is not None
        staged = self.stager.stage(session, P.Want(P.WantKind.TRIAL, REDRAW_TRIAL) if redraw else step.want)
        return dataclasses.replace(staged, redraw=True) if redraw and staged is not None else staged

    def _judge_step(self, session: SessionState, step: P.Step) -> P.StepAnswer:
        """The reference's side of one step, and the verdict on the worker's."""
        if step.step == P.StepKind.STAGE:
            return P.StepAnswer()
        if step.step == P.StepKind.BUFFERS:
            buffers = dict(self.reference.model.named_buffers())
            if session.own_weights and not all(
                self.inert(k) for k in sorted(set(buffers) - {o.name for o in step.outputs})
            ):
                # its own state under other names: nothing to pair them by (the verdict is flagged)
                return P.StepAnswer()
            return P.StepAnswer(check=self._compare_named(P.BUFFERS_CHECK, buffers, session, step))
        if step.step == P.StepKind.GRADS:
            return self._gradients(session, step)
        if step.step == P.StepKind.SAME_SEED:
            return self._same_seed(session, step)
        if step.step == P.StepKind.TIMED:
            self.reference.model.eval()
            expected = self.reference.forward(self.reference.inputs(0), aliases=True)
            return P.StepAnswer(
                check=self._compare(P.TIMED_CHECK, expected, session, step, self.reference.noise.levels)
            )
        return self._call(session, step)

    def _gradients(self, session: SessionState, step: P.Step) -> P.StepAnswer:
        """The worker's gradients against the reference's on the same inputs (no verdict where the
        reference's own backward fails). A first draw (trial 1's inputs) that does not match asks for a
        second (REDRAW_TRIAL's), which decides (compare.second_draw)."""
        first = session.first_gradients  # the first draw's mismatch, when a second was asked for
        if step.index and first is None:
            return P.StepAnswer(
                failure=P.Failure(Status.FORGED_RESULT, "a second gradient draw the judge did not ask for")
            )
        if self.reference.gradients_note:
            return P.StepAnswer()
        status, reason, grads = model_gradients(
            self.reference.model,
            self.stager.staged_inputs(session, REDRAW_TRIAL if step.index else 0),
            self.job.gradient_seed,
        )
        if status is not Backward.RAN or not grads:  # the reference's own backward failed here (memory): no verdict
            return P.StepAnswer()
        # its own parameters pair by name and shape or not at all; the inputs' gradients always do
        if session.own_weights:
            grads = paired_gradients(
                grads, {o.name: tuple(o.tensor.shape) for o in step.outputs if o.tensor is not None}
            )
        actual: dict[str, Any] = {"status": step.status, "reason": step.reason, "tensors": {}}
        # the reference's gradients; others are not compared
        for output in (o for o in step.outputs if o.name in grads):
            tensor = self._mailbox_tensor(session, output)
            if isinstance(tensor, str):
                return P.StepAnswer(gradients=("mismatch", tensor))
            actual["tensors"][output.name] = tensor
        found = compare_gradients({"tensors": grads}, actual, self.tolerances, self.job.gradient_tolerance_factor)
        if step.index and first is not None:
            found = second_draw(first, found, REDRAW_TRIAL)
        elif found[0] == Gradients.MISMATCH and set(grads) <= set(actual["tensors"]):
            # values, not a missing gradient (which other inputs do not change): the draw is staged with the answer
            session.first_gradients = found if self.job.regular_trials > REDRAW_TRIAL else None
        return P.StepAnswer(gradients=found)

    def _same_seed(self, session: SessionState, step: P.Step) -> P.StepAnswer:
        """The worker's model built under the construct seed, in eval mode, against the reference's
        initial state; whether it keeps those weights decides which ones its calls are judged by."""
        reference = self.reference
        args = self.stager.staged_inputs(session, 0)
        changed = self.stager.mutated(session, args, "same_seed")
        unsafe = self.stager.guards(session, args, "same_seed")
        reference.load(reference.initial)
        reference.model.eval()
        expected = reference.forward(args, aliases=True)
        session.own_weights = step.own_weights
        if not step.own_weights:  # its calls run with the weights it is given: the redrawn ones
            reference.load(reference.randomized)
        check = self._compare(P.SAME_SEED_CHECK, expected, session, step, reference.same_seed_noise.levels)
        return changed or P.StepAnswer(check=check, unsafe=unsafe)

    def _call(self, session: SessionState, step: P.Step) -> P.StepAnswer:
        """One planned call: the worker must leave its inputs alone, and its outputs must match the
        reference's (on the precision call, both are measured against the float64 twin's)."""
        reference = self.reference
        call = self.job.calls[step.index]
        session.next_call += 1
        args = self.stager.staged_inputs(session, call.input)
        changed = self.stager.mutated(session, args, f"call_{step.index}")
        if changed:
            return changed
        unsafe = self.stager.guards(session, args, f"call_{step.index}")
        reference.model.train(call.module_mode == ModuleMode.TRAIN)
        wide = reference.float64(args) if step.index == self.job.precision_call else None
        reference.output_bytes = 0
        torch.manual_seed(self.job.rng_seed + step.index)  # the worker seeds its call the same way
        expected = reference.forward(args, aliases=True)
        session.last_args, session.last_trial = args, call.input
        check = self._compare(reference.overflow.label(call), expected, session, step, reference.noise.levels)
        narrow = None
        if check.mismatch_fraction and float32_outputs(expected["tensors"]):
            # a failed value check's figures: reduced precision's error, or another (harness.core.integrity)
            if wide is None:
                torch.manual_seed(self.job.rng_seed + step.index)
                wide = reference.float64(args)
            torch.manual_seed(self.job.rng_seed + step.index)
            narrow = in_tf32(reference, args) if wide is not None else None
        precision: dict[str, float] = {}
        if wide is not None and (check.passed or check.mismatch_fraction):
            precision = self._precision(session, step, expected, wide, narrow)
            if precision and not check.passed:
                precision["failed"] = 1.0  # the figures of a failed call, not of the precision call
        if wide is not None:
            del wide, narrow
            release(self.device)  # the twin's memory goes back to the device, for the worker beside us
        return P.StepAnswer(check=check, precision=precision, unsafe=unsafe)

    def _precision(
        self,
        session: SessionState,
        step: P.Step,
        expected: dict[str, Any],
        wide: list[Any],
        narrow: Optional[tuple[list[Any], int]] = None,
    ) -> dict[str, float]:
        """The worker's and the reference's relative errors against the float64 twin's outputs,
        those that are rounding noise aside, and (`narrow`: the reference on inputs and weights
        cut to TF32, with its matmul and convolution FLOPs) TF32's, when those FLOPs are not 0
        ({} when the worker's cannot be read, or an error is not a number)."""
        kept = [i for i in range(len(wide)) if i not in (self.reference.noise.levels or {})]
        got = [self._mailbox_tensor(session, step.outputs[i]) for i in kept]
        if any(isinstance(g, str) for g in got):
            return {}
        in_tf32 = [narrow[0][i] for i in kept] if narrow is not None and narrow[1] > 0 else None
        return precision_figures(got, [expected["tensors"][i] for i in kept], [wide[i] for i in kept], in_tf32)

    def _mailbox_tensor(self, session: SessionState, output: P.Output) -> Any:
        """The tensor an output names in the mailbox, or why it cannot be read (a string)."""
        if output.lazy:
            return f"{output.name or 'the output'} {output.lazy}"
        if output.tensor is None:
            return f"{output.type} is not a tensor"
        try:
            return view(session.mailbox.tensor, output.tensor)
        except ValueError as exc:
            return f"its outputs are not where it said ({exc})"

    def _compare(
        self,
        name: str,
        expected: dict[str, Any],
        session: SessionState,
        step: P.Step,
        noise: Optional[dict[int, float]] = None,
    ) -> CheckResult:
        """The step's outputs, read in place in the mailbox, against the reference's (`noise`: those
        that are rounding noise around zero, with their levels: harness.judge.degenerate)."""
        if len(step.outputs) != len(expected["tensors"]):
            return outputs_counted(name, len(step.outputs), len(expected["tensors"]))
        tensors: list[Any] = []
        for output, want in zip(step.outputs, expected["tensors"]):
            spec = output.tensor
            if spec is not None and spec.offset == -1:
                if tuple(spec.shape) == tuple(want.shape) and spec.dtype == str(want.dtype).removeprefix("torch."):
                    return CheckResult(name, False, "the outputs did not reach the judge")
                tensors.append(torch.empty(spec.shape, dtype=_dtype(spec.dtype), device="meta"))
                continue
            got = self._mailbox_tensor(session, output)
            if isinstance(got, str) and output.tensor is not None:
                return CheckResult(name, False, got)
            tensors.append(got if not isinstance(got, str) else None)
        actual = {
            "types": [o.type for o in step.outputs],
            "tensors": tensors + [None] * (len(step.outputs) - len(tensors)),
            "layouts": [o.layout for o in step.outputs],
            "devices": [o.device for o in step.outputs],
            "aliases": [o.alias for o in step.outputs],
            "lazy": [o.lazy for o in step.outputs],
        }
        return compare_outputs(name, expected, actual, self.tolerances, noise)

    def _compare_named(
        self, name: str, expected: dict[str, Any], session: SessionState, step: P.Step
    ) -> Optional[CheckResult]:
        """Module state after every planned call (BatchNorm running statistics and the like)
        against the reference's, by name; a buffer no output depends on (harness.judge.degenerate) that
        is missing or differs is a note, not a failure. None when the reference has none."""
        if not expected:
            return None
        got = {o.name: o for o in step.outputs}
        results = {
            key: self._compare(
                name, {"types": ["Tensor"], "tensors": [value]}, session, P.Step(step.step, outputs=(got[key],))
            )
            if key in got
            else None
            for key, value in expected.items()
        }
        return judge_buffers(name, results, self.inert)


class ReferenceTiming:
    """The reference's timing: at start, one profiled call and its speed-of-light; then, with each
    compared model in turns, its side of the paired rounds (its own timing sets, the same trials
    the worker was staged, held by the session until it closes)."""

    def __init__(self, job: P.JudgeJob, reference: Reference, stager: Stager, check_threads: int) -> None:
        self.job = job
        self.reference = reference
        self.stager = stager
        self.device = reference.device
        self.check_threads = check_threads  # the judge's threads while it checks, restored after timing
        self.profile: Optional[CallProfile] = None  # the reference's profiled call (the record, and the sync protocol)

    def measure(self, report: P.ReferenceReport) -> P.ReferenceReport:
        """`report` with the reference's profile (on a GPU, when timing) and its speed-of-light
        (when asked); a failure of either is reported, not fatal."""
        job, reference = self.job, self.reference
        reference.load(reference.randomized)
        sets = [reference.inputs(t) for t in range(self.stager.footprint.timed_slots)]
        if job.timing is not None and self.device.type == Device.CUDA and job.profile is not None:
            self.profile = job.profile  # from the reference cache: no profiler start in this judge
            report = dataclasses.replace(report, profile=self.profile)
        elif job.timing is not None and self.device.type == Device.CUDA:
            reference.model.eval()
            try:
                with torch.no_grad():
                    reference.forward(sets[0])  # warm: the profile is of a warm call
                    self.profile = profile_call(
                        reference.model,
                        sets[0],
                        self.device,
                        flush_buffer(self.device) if job.timing.flush_l2 else None,
                    )
            except WorkerFailure:
                raise
            except Exception as exc:
                synchronize(self.device)
                report = dataclasses.replace(report, profile_error=one_line(exc))
            report = dataclasses.replace(report, profile=self.profile)
        if job.speed_of_light_cache:
            report = self._speed_of_light(report, sets[0])
        del sets
        return report

    def _speed_of_light(self, report: P.ReferenceReport, args: list[Any]) -> P.ReferenceReport:
        """`report` with the reference's roofline floor on `args`, or why it could not be had."""
        try:
            self.reference.model.eval()
            work = count_work(self.reference.model, args)
            peaks = device_peaks(self.device, work.dtype, Path(self.job.speed_of_light_cache))
            return dataclasses.replace(report, speed_of_light=floor(work, peaks))
        except Exception as exc:  # the floor is extra information; its failure is reported, not fatal
            synchronize(self.device)
            return dataclasses.replace(report, speed_of_light_error=one_line(exc))

    def prepare(self, number: int, graph: bool) -> P.Ready:
        """The reference's side of a session's paired timing: its own timing sets (the same trials
        the worker was staged), warmed up, graphs captured when asked. Held until the session closes."""
        session = self.stager.sessions.get(number)
        if session is None or self.job.timing is None:
            raise ValueError(f"no timed session {number}")
        self.reference.model.eval()
        sets = [self.reference.inputs(k) for k in range(self.stager.footprint.timed_slots)]
        settings = dataclasses.replace(self.job.timing, mode="graph" if graph else "eager")
        with self._threads():
            session.timer, ready, _ = prepare_timer(self.reference.model, sets, self.device, settings, profiled=False)
        return dataclasses.replace(
            ready, needs_device="; ".join(r for r in (ready.needs_device, device_sync_reason(self.profile)) if r)
        )

    def time_round(self, ask: P.TimeRound) -> P.RoundTimed:
        """One round of the reference's side of a prepared session's paired timing."""
        session = self.stager.sessions.get(ask.session)
        if session is None or session.timer is None:
            raise ValueError(f"session {ask.session} was not prepared for timing")
        with self._threads():
            return P.RoundTimed(ask.round, time_round(session.timer, ask))

    @contextlib.contextmanager
    def _threads(self) -> Any:
        """On the CPU the reference is timed with timing.cpu_threads threads, as workers are."""
        if self.device.type == Device.CPU and self.job.cpu_threads:
            torch.set_num_threads(self.job.cpu_threads)
        try:
            yield
        finally:
            torch.set_num_threads(self.check_threads)


def reference_ops(reference: Reference, calls: tuple[P.Call, ...]) -> ForwardOps:
    """The ATen operators of the reference's forward on the call a candidate's worker observes on
    the CPU (harness.device.profile.observed_call), with the plan's weights: what wraps-reference compares a
    candidate's with (harness.core.integrity.reference_ops). The model's state is put back after."""
    if not calls:
        return ForwardOps(error="the plan has no call")
    index = observed_call(calls)
    call = calls[index]
    reference.load(reference.randomized)
    reference.model.train(call.module_mode == ModuleMode.TRAIN)
    args = reference.inputs(call.input)
    with torch.no_grad():
        _, ops = observe_ops(lambda: reference.forward(args), is_compute, call=index)
    reference.load(reference.randomized)
    return ops


class Judge:
    """The requests serve() dispatches: Start runs the reference once through the plan; Open,
    Check, PrepareTiming, TimeRound and Close then serve compared workers' sessions, through the
    reference, the stager, the checker and the reference's timing."""

    reference: Reference  # these four from start(), once the reference has run through the plan
    stager: Stager
    checker: Checker
    timing: ReferenceTiming

    def __init__(self, job: P.JudgeJob, send: Callable[[Any], None]) -> None:
        self.job = job
        self.send = send
        self.tolerances = {k: Tolerance(**v) for k, v in job.tolerances.items()}
        self.device: Optional[torch.device] = None
        self.phase_seconds: dict[str, float] = {}
        self._phase_name = ""
        self._phase_started = 0.0

    @property
    def sessions(self) -> dict[int, SessionState]:
        """The open sessions, by number."""
        stager = getattr(self, "stager", None)
        return stager.sessions if stager is not None else {}

    @property
    def timed_slots(self) -> int:
        """Input-set slots in a session's inputs region (the timing sets)."""
        return self.stager.footprint.timed_slots

    # -- the reference, once -----------------------------------------------------------------

    def start(self) -> P.ReferenceReport:
        """Run the reference once through the plan: its report, or why it cannot serve."""
        try:
            return self._start()
        except WorkerFailure as failure:
            return P.ReferenceReport(False, failure.describe(), phase_seconds=self.phase_seconds)

    def _phase(self, name: str) -> None:
        """Enter start-up phase `name` (the parent hears of it; the last phase's seconds are kept)."""
        if self._phase_name:
            self.phase_seconds[self._phase_name] = round(time.perf_counter() - self._phase_started, 4)
        self.send(P.Phase(name))
        print(f"[harness] judge phase {name}", file=sys.stderr, flush=True)
        self._phase_name, self._phase_started = name, time.perf_counter()

    def _start(self) -> P.ReferenceReport:
        job = self.job
        self._phase("load")
        reference, device_name, check_threads = self._load()
        # Regions in device memory where another process can map it, else in host shared memory.
        region_kind = (
            P.RegionKind.CUDA if reference.device.type == Device.CUDA and device_sharing() else P.RegionKind.HOST
        )

        self._phase("construct")
        self._refuse_what_cannot_fit(reference)
        reference.construct()

        self._phase("check")
        footprint = self._fit(reference, region_kind)
        report = P.ReferenceReport(
            True,
            "ok",
            device_name=device_name,
            data_plane=region_kind,
            other_size=reference.other,
            other_size_note=reference.other_note,
            peak_bytes=reference.forward_peak,
            float64_note="; ".join(n for n in (reference.float64_note, reference.gradients_note) if n),
            input_structure=structure_notes(reference.structures),
            degenerate=(
                reference.noise.notes("every call of the plan", NOISE_THEN)
                or reference.same_seed_noise.notes("the same-seed call (the initial weights)", NOISE_THEN)
            )
            + reference.overflow.notes(),
        )
        if reference.device.type == Device.CPU:
            report = dataclasses.replace(report, forward_ops=reference_ops(reference, job.calls))
        self.reference, self.stager = reference, Stager(job, reference, footprint)
        self.checker = Checker(job, reference, self.stager, self.tolerances)
        self.timing = ReferenceTiming(job, reference, self.stager, check_threads)
        if job.timing is not None or job.speed_of_light_cache:
            # The reference is timed with each compared model, in turns (PrepareTiming, TimeRound);
            # here it is only profiled once (the record, and the sync protocol) and its roofline measured.
            self._phase("time")
            report = self.timing.measure(report)
        self._phase("")
        reference.load(reference.randomized)
        release(reference.device)
        return dataclasses.replace(report, phase_seconds={k: v for k, v in self.phase_seconds.items() if k})

    def _load(self) -> tuple[Reference, str, int]:
        """The device set up, the build cache installed, the problem's module loaded: the reference
        (not constructed yet), the device's name, and the threads the judge checks with."""
        self.device, arch, device_name = setup_device(self.job)
        check_threads = torch.get_num_threads()
        BuildCache(Path(self.job.build_cache), arch).install()
        reference = Reference(self.job, self.device)
        reference.import_problem()
        return reference, device_name, check_threads

    def _refuse_what_cannot_fit(self, reference: Reference) -> None:
        """On a GPU, before anything is allocated: a reference whose weights, inputs and outputs alone (sized on
        the meta device) are over its share of the card's memory is refused with what it needs, rather than run
        until the card runs out. (Not on the CPU, where the plan's measured peak decides, in `_fit`: sizing on
        the meta device costs a fresh process about a second of imports, which a GPU judge's start absorbs.)"""
        if reference.device.type != Device.CUDA:
            return
        why = unfit(
            meta_footprint(reference.module, reference.model_class),
            device_memory(reference.device),
            self.job.memory_fraction,
            reference.device.type,
        )
        if why:
            raise WorkerFailure(Status.OUT_OF_MEMORY, why)

    def _fit(self, reference: Reference, region_kind: str) -> Footprint:
        """Run the reference through the plan: it must leave room for a compared model beside it,
        and its steps size a session's regions."""
        job = self.job
        steps = reference.run_plan()
        peak, total = reference.forward_peak, device_memory(reference.device)
        why = over_share(peak, f"{peak / 2**30:.1f} GiB at its peak", total, job.memory_fraction, reference.device.type)
        if why:
            raise WorkerFailure(Status.OUT_OF_MEMORY, why)
        budget = job.slot_fraction * total
        timed_slots = max(1, min(job.timed_inputs, int(budget // max(reference.set_bytes, 1))))
        return Footprint(region_kind, reference.set_bytes, max(steps), timed_slots)

    # -- sessions ----------------------------------------------------------------------------

    def open(self, role: P.Role) -> P.SessionHandle:
        """A new session for a compared worker of `role`."""
        return self.stager.open(role)

    def close(self, number: int) -> P.Closed:
        """End session `number`."""
        return self.stager.close(number)

    def check(self, number: int, step: P.Step) -> P.StepAnswer:
        """The verdict on one step of session `number`."""
        return self.checker.check(number, step)

    def prepare_timing(self, number: int, graph: bool) -> P.Ready:
        """The reference's side of session `number`'s paired timing, prepared."""
        return self.timing.prepare(number, graph)

    def time_round(self, ask: P.TimeRound) -> P.RoundTimed:
        """One round of the reference's side of a session's paired timing."""
        return self.timing.time_round(ask)


def _dtype(name: str) -> torch.dtype:
    """The torch dtype named `name` (uint8 for a name the regions do not know)."""
    try:
        return dtype_of(name)
    except ValueError:
        return torch.uint8


def serve(requests: Any, send: Callable[[Any], None]) -> None:
    """Answer requests until the parent closes the pipe. A device fault ends the judge (the lane
    starts a new one); anything else fails only the request it happened in."""
    judge: Optional[Judge] = None
    for line in requests:
        if not line.strip():
            continue
        request = P.decode(json.loads(line))
        try:
            if isinstance(request, P.Start):
                judge = Judge(request.job, send)
                send(judge.start())
            elif judge is None:
                send(P.Fault("the judge got a request before Start"))
            elif isinstance(request, P.Open):
                send(judge.open(request.role))
            elif isinstance(request, P.Check):
                send(judge.check(request.session, request.step))
            elif isinstance(request, P.Close):
                send(judge.close(request.session))
            elif isinstance(request, P.PrepareTiming):
                send(judge.prepare_timing(request.session, request.graph))
            elif isinstance(request, P.TimeRound):
                send(judge.time_round(request))
        except BaseException as exc:
            traceback.print_exc()
            failure = classify(exc, Status.HARNESS_ERROR)
            device = getattr(judge, "device", None)
            if failure.status in (Status.CUDA_FAULT, Status.OUT_OF_MEMORY) or _device_broken(device):
                send(P.Fault(failure.describe()))
                return
            if isinstance(request, P.Check):
                send(
                    P.StepAnswer(
                        failure=P.Failure(Status.HARNESS_ERROR, f"the judge failed on this step: {failure.reason}")
                    )
                )
            else:
                send(P.Fault(failure.describe()))
                return


def _device_broken(device: Optional[torch.device]) -> bool:
    if device is None or device.type != Device.CUDA:
        return False
    try:
        torch.cuda.synchronize(device)
        return False
    except Exception:
        return True


def main() -> None:
    request_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if os.environ.get(PREWARM) == Device.CUDA:  # a prestarted judge readies the device while it waits for its problem
        prewarm_cuda()

    def send(message: Any) -> None:
        data = (P.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(reply_fd, data) :]

    with os.fdopen(request_fd, "rb") as requests:
        serve(requests, send)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
