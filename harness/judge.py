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
(harness.protocol), one JSON line each, on two pipes of its own; what the problem prints goes to
the judge's log.

Started by `harness.supervise.JudgeClient` as `python -m harness.judge REQUEST_FD REPLY_FD`.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness import protocol as P
from harness.compare import compare_gradients, compare_outputs, relative_error
from harness.config import Tolerance
from harness.records import CheckResult
from harness.regions import Region, aligned, device_sharing, guard_broken, layout, past_end, view, write
from harness.status import Status
from harness.errors import one_line
from harness.worker.checks import model_gradients, paired_gradients
from harness.worker.device import setup_device, synchronize
from harness.worker.failures import WorkerFailure, classify, load_module
from harness.worker.inputs import aliased_input as _aliased_input, as_outputs, other_sizes, randomize_state, redistribute, same_bits, structure
from harness.worker.timed import prepare_timer, time_round
from harness.pairing import device_sync_reason
from harness.profile import profile_call
from harness.timing import flush_buffer


class _Session:
    def __init__(self, number: int, role: P.Role, inputs: Region, mailbox: Region, slots: list[int]) -> None:
        self.number = number
        self.role = role
        self.inputs = inputs
        self.mailbox = mailbox
        self.slots = slots  # offset of each input-set slot in `inputs`
        self.next_call = 0
        self.seen: list[str] = []
        self.pristine: Optional[list[Any]] = None  # the judge's own copy of what is staged in slot 0
        self.pristine_trial: Optional[int] = None
        self.in_slot: Optional[int] = None  # the trial whose inputs slot 0 holds
        self.in_slot_args: tuple[P.Arg, ...] = ()
        self.last_args: Optional[list[Any]] = None  # the inputs the reference's last call ran on
        self.last_trial: Optional[int] = None
        self.timer: Any = None  # the reference's side of this session's paired timing (harness.timing.Timer)
        self.own_weights = False  # the worker keeps its same-seed weights: its calls are judged against the initial ones

    def free(self) -> None:
        self.inputs.free()
        self.mailbox.free()


class Judge:
    def __init__(self, job: P.JudgeJob, send: Callable[[Any], None]) -> None:
        self.job = job
        self.send = send
        self.tolerances = {k: Tolerance(**v) for k, v in job.tolerances.items()}
        self.sessions: dict[int, _Session] = {}
        self._count = 0
        self.float64_note = ""
        self.gradients_note = ""  # why the gradient check is skipped, when it is
        self.other: dict[str, Any] = {}
        self.other_note = ""
        self.phase_seconds: dict[str, float] = {}
        self.structures: Optional[list[tuple[str, ...]]] = None  # per input: what get_inputs() guarantees (worker.structure)

    # -- the reference, once -----------------------------------------------------------------

    def start(self) -> P.ReferenceReport:
        try:
            return self._start()
        except WorkerFailure as failure:
            return P.ReferenceReport(False, f"{failure.status.value}: {failure.reason}", phase_seconds=self.phase_seconds)

    def _phase(self, name: str) -> None:
        if getattr(self, "_phase_name", None):
            self.phase_seconds[self._phase_name] = round(time.perf_counter() - self._phase_started, 4)
        self.send(P.Phase(name))
        print(f"[harness] judge phase {name}", file=sys.stderr, flush=True)
        self._phase_name, self._phase_started = name, time.perf_counter()

    def _start(self) -> P.ReferenceReport:
        job = self.job
        self._phase("load")
        self.device, arch, device_name = setup_device(job)
        self._check_threads = torch.get_num_threads()
        from harness.buildcache import BuildCache

        BuildCache(Path(job.build_cache), arch).install()
        self.module = load_module(Path(job.source), "__reference__")
        model_class = getattr(self.module, "Model", None)
        if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
            raise WorkerFailure(Status.INTERFACE_ERROR, "the module defines no nn.Module subclass named Model")
        for name in ("get_inputs", "get_init_inputs"):
            if not callable(getattr(self.module, name, None)):
                raise WorkerFailure(Status.INTERFACE_ERROR, f"the problem defines no {name}()")

        # Regions in device memory where another process can map it, else in host shared memory.
        self.region_kind = "cuda" if self.device.type == "cuda" and device_sharing() else "host"

        self._phase("construct")
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        try:
            self.init_args = list(self.module.get_init_inputs())
            torch.manual_seed(job.construct_seed)
            self.model = model_class(*self.init_args).to(self.device)
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        self.initial = _snapshot(self.model)
        self._probe_other_size()
        if job.randomize_weights:
            randomize_state(self.model, job.construct_seed)
        self.randomized = _snapshot(self.model)

        self._phase("check")
        steps = self._reference_pass()
        self.mailbox_bytes = max(steps)
        peak = self.forward_peak
        total = _device_memory(self.device)
        if peak > job.memory_fraction * total:
            raise WorkerFailure(
                Status.OUT_OF_MEMORY,
                f"the reference needs {peak / 2**30:.1f} GiB at its peak, over {job.memory_fraction:.0%} of the "
                f"{total / 2**30:.1f} GiB the {self.device.type} has; a compared model beside it would not fit",
            )
        budget = job.slot_fraction * total
        self.timed_slots = max(1, min(job.timed_inputs, int(budget // max(self.set_bytes, 1))))

        report = P.ReferenceReport(True, "ok", device_name=device_name, data_plane=self.region_kind, other_size=self.other, other_size_note=self.other_note, peak_bytes=peak, float64_note="; ".join(n for n in (self.float64_note, self.gradients_note) if n), input_structure=self._structure_notes())
        self.reference_profile = None
        if job.timing is not None or job.speed_of_light_cache:
            # The reference is timed with each compared model, in turns (PrepareTiming, TimeRound);
            # here it is only profiled once (the record, and the sync protocol) and its roofline measured.
            self._phase("time")
            self._load(self.randomized)
            sets = [self._inputs(t) for t in range(self.timed_slots)]
            if job.timing is not None and self.device.type == "cuda":
                self.model.eval()
                try:
                    with torch.no_grad():
                        self._forward(sets[0])  # warm: the profile is of a warm call
                        self.reference_profile = profile_call(self.model, sets[0], self.device, flush_buffer(self.device) if job.timing.flush_l2 else None)
                except WorkerFailure:
                    raise
                except Exception as exc:
                    synchronize(self.device)
                    report = dataclasses.replace(report, profile_error=one_line(exc))
                report = dataclasses.replace(report, profile=self.reference_profile)
            if job.speed_of_light_cache:
                report = self._speed_of_light(report, sets[0])
            del sets
        self._phase("")
        self._load(self.randomized)
        _release(self.device)
        return dataclasses.replace(report, phase_seconds={k: v for k, v in self.phase_seconds.items() if k})

    def _reference_pass(self) -> list[int]:
        """Every step of the plan once: the reference must run, and the mailbox must hold the
        largest step's outputs. Returns each step's output bytes; sets self.set_bytes (the largest
        input set: every trial, the other-size one too, has calls in the plan)."""
        job = self.job
        sizes = []
        self.set_bytes = 0
        try:
            with torch.no_grad():
                self.model.eval()
                sizes.append(self._bytes(self._forward(self._inputs(0))))
                self._load(self.randomized)
                for index, call in enumerate(job.calls):
                    self.model.train(call.mode == "train")
                    args = self._inputs(call.input)
                    self.set_bytes = max(self.set_bytes, layout(_tensors(args))[1])
                    if index == job.precision_call:
                        # The twin is optional (skipped where it would not fit): its memory is not the reference's.
                        before = self._peak()
                        self._float64_probe(args)
                        self._peak_floor = before
                        if self.device.type == "cuda":
                            torch.cuda.reset_peak_memory_stats(self.device)
                    sizes.append(self._bytes(self._forward(args)))
                sizes.append(self._bytes([b for _, b in self.model.named_buffers()]))
            self.forward_peak = self._peak()  # the reference alone: what must fit beside a worker
            if job.gradients:
                status, reason, grads = model_gradients(self.model, self._inputs(0), job.gradient_seed)
                sizes.append(self._bytes(list(grads.values())))
                del grads
                _release(self.device)
                if status != "ok":  # e.g. its backward does not fit: no verdict rather than a wrong one
                    self.gradients_note = f"the gradient check is skipped: the reference's own backward fails ({reason})"
        except WorkerFailure:
            raise
        except BaseException as exc:
            raise classify(exc, Status.RUNTIME_ERROR) from None
        return sizes

    def _probe_other_size(self) -> None:
        """The reference must run at the other size; if it cannot, that trial falls back to the
        problem's own size (and the record says why), rather than failing the reference."""
        index = self.job.other_size_trial
        if index is None:
            return
        self.other = other_sizes(self.module)
        if not self.other:
            self.other_note = "the problem declares no HARNESS_EXTRA_SIZES and has no integer batch_size above 1"
            return
        try:
            self.model.eval()
            with torch.no_grad():
                self.model(*self._inputs(index))
            synchronize(self.device)
        except Exception as exc:
            synchronize(self.device)
            self.other_note = f"the reference fails at {self.other} ({one_line(exc)})"
            self.other = {}

    def _float64_probe(self, args: list[Any]) -> None:
        try:
            self._float64(args)
        except Exception as exc:
            self.float64_note = f"the float64 twin cannot run: {one_line(exc)}"

    def _float64(self, args: list[Any]) -> Optional[list[Any]]:
        """The reference's call in float64 (a copy of the model in its current state): the
        yardstick of precision. None when it would not fit beside what is held now."""
        if self.float64_note:
            return None
        need = 2 * (_nbytes(_tensors(args)) + sum(p.numel() * p.element_size() for p in self.model.state_dict().values()))
        need += 2 * getattr(self, "_output_bytes", 0)
        if need > _free_memory(self.device):
            self.float64_note = f"the float64 twin needs about {need / 2**30:.1f} GiB, more than is free"
            return None
        twin = copy.deepcopy(self.model).double()
        twin.train(self.model.training)
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        with torch.no_grad():
            out = as_outputs(twin(*wide))
        synchronize(self.device)
        del twin, wide
        return out

    def _speed_of_light(self, report: P.ReferenceReport, args: list[Any]) -> P.ReferenceReport:
        from harness.roofline import count_work, device_peaks, floor

        try:
            self.model.eval()
            work = count_work(self.model, args)
            peaks = device_peaks(self.device, work.dtype, Path(self.job.speed_of_light_cache))
            return dataclasses.replace(report, speed_of_light=floor(work, peaks))
        except Exception as exc:  # the floor is extra information; its failure is reported, not fatal
            synchronize(self.device)
            return dataclasses.replace(report, speed_of_light_error=one_line(exc))

    # -- sessions ----------------------------------------------------------------------------

    def open(self, role: P.Role) -> P.Session:
        self._count += 1
        weights = [(k, v) for k, v in self.randomized.items()]
        weight_specs, weights_end = layout([v for _, v in weights])
        end = layout(_tensors(self.init_args), weights_end)[1]
        slot_size = aligned(self.set_bytes)
        slots = [aligned(end) + k * slot_size for k in range(self.timed_slots)]
        inputs = Region.allocate(aligned(end) + slot_size * self.timed_slots, self.device, self.region_kind)
        try:
            mailbox = Region.allocate(self.mailbox_bytes, self.device, self.region_kind)
        except BaseException:
            inputs.free()
            raise
        session = _Session(self._count, role, inputs, mailbox, slots)
        self.sessions[session.number] = session
        write(inputs.tensor, [v for _, v in weights], weight_specs)
        init = self._write_set(session, self.init_args, weights_end, "get_init_inputs()")
        first = self._stage(session, P.Want("trial", 0) if role is not P.Role.BASELINE else P.Want("call", 0))
        self._load(self.randomized)
        synchronize(self.device)
        assert first is not None
        return P.Session(session.number, inputs.handle, mailbox.handle, init, tuple(P.Named(k, s) for (k, _), s in zip(weights, weight_specs)), first)

    def close(self, number: int) -> P.Closed:
        session = self.sessions.pop(number, None)
        if session is not None:
            session.pristine = None
            session.timer = None
            session.free()
        _release(self.device)
        return P.Closed(number)

    # -- paired timing -----------------------------------------------------------------------

    def prepare_timing(self, number: int, graph: bool) -> P.Ready:
        """The reference's side of a session's paired timing: its own timing sets (the same trials
        the worker was staged), warmed up, graphs captured when asked. Held until the session closes."""
        session = self.sessions.get(number)
        if session is None or self.job.timing is None:
            raise ValueError(f"no timed session {number}")
        self.model.eval()
        sets = [self._inputs(k) for k in range(self.timed_slots)]
        settings = dataclasses.replace(self.job.timing, mode="graph" if graph else "eager")
        with self._timing_threads():
            session.timer, ready, _ = prepare_timer(self.model, sets, self.device, settings, profiled=False)
        return dataclasses.replace(ready, needs_device=device_sync_reason(self.reference_profile))

    def time_round(self, ask: P.TimeRound) -> P.RoundTimed:
        session = self.sessions.get(ask.session)
        if session is None or session.timer is None:
            raise ValueError(f"session {ask.session} was not prepared for timing")
        with self._timing_threads():
            return P.RoundTimed(ask.round, time_round(session.timer, ask))

    @contextlib.contextmanager
    def _timing_threads(self) -> Any:
        """On the CPU the reference is timed with timing.cpu_threads threads, as workers are."""
        if self.device.type == "cpu" and self.job.cpu_threads:
            torch.set_num_threads(self.job.cpu_threads)
        try:
            yield
        finally:
            torch.set_num_threads(self._check_threads)

    def check(self, number: int, step: P.Step) -> P.Verdict:
        session = self.sessions.get(number)
        if session is None:
            return P.Verdict(failure=(Status.HARNESS_ERROR.value, f"no session {number}"))
        order = self._out_of_order(session, step)
        if order:
            return P.Verdict(failure=(Status.FORGED_RESULT.value, order))
        session.seen.append(step.step)
        with torch.no_grad():
            verdict = self._judge_step(session, step)
        if verdict.failure is None and (verdict.check is None or verdict.check.passed or step.step == "same_seed"):
            verdict = dataclasses.replace(verdict, staged=self._stage(session, step.want))
        synchronize(self.device)
        _release(self.device)  # what this step held goes back before the worker's next step
        return verdict

    def _out_of_order(self, session: _Session, step: P.Step) -> str:
        calls = len(self.job.calls)
        if step.step == "same_seed":
            ok = not session.seen and session.role is not P.Role.BASELINE
        elif step.step == "call":
            ok = step.index == session.next_call and (session.role is P.Role.BASELINE or "same_seed" in session.seen)
        elif step.step == "buffers":
            ok = session.next_call == calls and "buffers" not in session.seen
        elif step.step == "grads":
            ok = session.seen[-1:] == ["buffers"] and self.job.gradients and session.role is not P.Role.BASELINE
        elif step.step == "timed":
            ok = "buffers" in session.seen and "timed" not in session.seen
        elif step.step == "stage":  # inputs asked for, no outputs to judge (a baseline's timing sets)
            ok = not step.outputs and session.next_call > 0
        else:
            return f"unknown step {step.step!r}"
        return "" if ok else f"step {step.step} {step.index} arrived out of the plan's order (after {', '.join(session.seen[-2:]) or 'nothing'})"

    def _judge_step(self, session: _Session, step: P.Step) -> P.Verdict:
        if step.step == "stage":
            return P.Verdict()
        if step.step == "buffers":
            buffers = dict(self.model.named_buffers())
            if session.own_weights and not set(buffers) <= {o.name for o in step.outputs}:
                return P.Verdict()  # its own state under other names: nothing to pair them by (the verdict is flagged)
            return P.Verdict(check=self._compare_named(P.BUFFERS_CHECK, buffers, session, step))
        if step.step == "grads":
            if self.gradients_note:
                return P.Verdict()
            status, reason, grads = model_gradients(self.model, self._staged_inputs(session, 0), self.job.gradient_seed)
            if status != "ok" or not grads:  # the reference's own backward failed here (memory): no verdict
                return P.Verdict()
            if session.own_weights:  # its own parameters pair by name and shape or not at all; the inputs' gradients always do
                grads = paired_gradients(grads, {o.name: tuple(o.tensor.shape) for o in step.outputs if o.tensor is not None})
            actual = {"status": step.status, "reason": step.reason, "tensors": {}}
            for output in (o for o in step.outputs if o.name in grads):  # the reference's gradients; others are not compared
                tensor = self._mailbox_tensor(session, output)
                if isinstance(tensor, str):
                    return P.Verdict(gradients=("mismatch", tensor))
                actual["tensors"][output.name] = tensor
            return P.Verdict(gradients=compare_gradients({"tensors": grads}, actual, self.tolerances, self.job.gradient_tolerance_factor))
        if step.step == "same_seed":
            args = self._staged_inputs(session, 0)
            changed = self._mutated(session, args, "same_seed")
            unsafe = self._guards(session, args, "same_seed")
            self._load(self.initial)
            self.model.eval()
            expected = self._forward(args, aliases=True)
            session.own_weights = step.own_weights
            if not step.own_weights:  # its calls run with the weights it is given: the redrawn ones
                self._load(self.randomized)
            return changed or P.Verdict(check=self._compare("same-seed construction (eval)", expected, session, step), unsafe=unsafe)
        if step.step == "timed":
            self.model.eval()
            return P.Verdict(check=self._compare(P.TIMED_CHECK, self._forward(self._inputs(0), aliases=True), session, step))
        call = self.job.calls[step.index]
        session.next_call += 1
        args = self._staged_inputs(session, call.input)
        changed = self._mutated(session, args, f"call_{step.index}")
        if changed:
            return changed
        unsafe = self._guards(session, args, f"call_{step.index}")
        self.model.train(call.mode == "train")
        wide = self._float64(args) if step.index == self.job.precision_call else None
        self._output_bytes = 0
        torch.manual_seed(self.job.rng_seed + step.index)  # the worker seeds its call the same way
        expected = self._forward(args, aliases=True)
        session.last_args, session.last_trial = args, call.input
        check = self._compare(call.label, expected, session, step)
        precision: dict[str, float] = {}
        if wide is not None and check.passed:
            got = [self._mailbox_tensor(session, o) for o in step.outputs]
            if not any(isinstance(g, str) for g in got):
                candidate, reference = relative_error(got, wide), relative_error(expected["tensors"], wide)
                if candidate == candidate and reference == reference:
                    precision = {"candidate": candidate, "reference": reference}
        if wide is not None:
            del wide
            _release(self.device)  # the twin's memory goes back to the device, for the worker beside us
        return P.Verdict(check=check, precision=precision, unsafe=unsafe)

    def _staged_inputs(self, session: _Session, trial: int) -> list[Any]:
        """The judge's own copy of what it staged for this call (made afresh if it was not kept)."""
        if session.pristine is not None and session.pristine_trial == trial:
            args = session.pristine
        else:
            args = self._inputs(trial)
        session.pristine, session.pristine_trial = None, None  # the reference's call may write into it
        return args

    @property
    def _worker_copies(self) -> bool:
        """Whether workers compute on device copies of a host region, which the judge cannot see."""
        return self.region_kind == "host" and self.device.type == "cuda"

    def _mutated(self, session: _Session, args: list[Any], label: str) -> Optional[P.Verdict]:
        """The worker's copy of the inputs must still hold what the judge staged. (A worker on a
        CUDA device with a host region computes on device copies the judge cannot see; it checks
        them itself.)"""
        if self._worker_copies:
            return None
        staged = [view(session.inputs.tensor, spec) for spec in layout(_tensors(args), session.slots[0])[0]]
        for position, (mine, theirs) in enumerate(zip(_tensors(args), staged)):
            if not same_bits(mine, theirs):
                return P.Verdict(failure=(Status.MUTATED_INPUT.value, f"forward changed input {position} in place ({label})"))
        return None

    def _guards(self, session: _Session, args: list[Any], label: str) -> str:
        """Why the guard band after one of the worker's inputs no longer holds its poison (a write
        past the input's end), or "". Not kept where the worker computes on device copies."""
        if self._worker_copies or not self.job.guard_bands:
            return ""
        broken = guard_broken(session.inputs.tensor, layout(_tensors(args), session.slots[0])[0])
        return past_end(*broken, label) if broken is not None else ""

    def _stage(self, session: _Session, want: P.Want) -> Optional[P.Staged]:
        if want.kind == "none":
            return P.Staged(())
        if want.kind == "timing":
            session.in_slot = None
            sets = []
            for k, offset in enumerate(session.slots):
                sets.append(self._write_set(session, self._inputs(k), offset))
            session.pristine, session.pristine_trial = None, None
            return P.Staged(tuple(sets))
        if want.kind == "call":
            if not 0 <= want.index < len(self.job.calls):
                return None
            trial = self.job.calls[want.index].input
        elif want.kind == "trial" and 0 <= want.index < len(self.job.input_seeds):
            trial = want.index
        else:
            return None
        if session.in_slot == trial:
            # The slot still holds this trial's inputs (the judge or the worker checked that forward
            # left them alone): nothing to write, and a worker on device copies need not copy again.
            session.pristine, session.pristine_trial = self._inputs_again(session, trial), trial
            return P.Staged((session.in_slot_args,), fresh=False)
        args = self._inputs(trial)
        staged = self._write_set(session, args, session.slots[0])
        session.pristine, session.pristine_trial = args, trial
        session.in_slot, session.in_slot_args = trial, staged
        return P.Staged((staged,))

    def _inputs_again(self, session: _Session, trial: int) -> list[Any]:
        """The judge's own copy of a trial's inputs once more. On the CPU, making them is the
        costly part of a step: the copy the reference just used is kept when it is still bit for
        bit what the slot holds (the reference may write into its inputs). On a GPU, make them again."""
        used = session.last_args
        session.last_args = None
        if self.device.type == "cpu" and used is not None and session.last_trial == trial:
            slot = [view(session.inputs.tensor, spec) for spec in layout(_tensors(used), session.slots[0])[0]]
            if all(same_bits(mine, theirs) for mine, theirs in zip(_tensors(used), slot)):
                return used
        return self._inputs(trial)

    def _write_set(self, session: _Session, args: list[Any], offset: int, where: str = "get_inputs()") -> tuple[P.Arg, ...]:
        """Write `args`' tensors into the worker's inputs region from `offset`; their Args."""
        tensors = _tensors(args)
        specs, _ = layout(tensors, offset)
        write(session.inputs.tensor, tensors, specs)
        found = iter(specs)
        return tuple(P.Arg(tensor=next(found)) if isinstance(a, torch.Tensor) else P.Arg(value=_json_value(a, where)) for a in args)

    # -- comparison --------------------------------------------------------------------------

    def _mailbox_tensor(self, session: _Session, output: P.Output) -> Any:
        """The tensor an output names in the mailbox, or why it cannot be read (a string)."""
        if output.tensor is None:
            return f"{output.type} is not a tensor"
        try:
            return view(session.mailbox.tensor, output.tensor)
        except ValueError as exc:
            return f"its outputs are not where it said ({exc})"

    def _compare(self, name: str, expected: dict[str, Any], session: _Session, step: P.Step) -> CheckResult:
        tensors: list[Any] = []
        for index, (output, want) in enumerate(zip(step.outputs, expected["tensors"])):
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
        }
        return compare_outputs(name, expected, actual, self.tolerances)

    def _compare_named(self, name: str, expected: dict[str, Any], session: _Session, step: P.Step) -> Optional[CheckResult]:
        """Module state after every planned call (BatchNorm running statistics and the like)
        against the reference's, by name. None when the reference has none."""
        if not expected:
            return None
        got = {o.name: o for o in step.outputs}
        missing = [k for k in expected if k not in got]
        if missing:
            return CheckResult(name, False, f"buffer {missing[0]} is missing")
        worst: Optional[CheckResult] = None
        for key, value in expected.items():
            single = P.Step(step.step, outputs=(got[key],))
            result = self._compare(name, {"types": ["Tensor"], "tensors": [value]}, session, single)
            if not result.passed:
                return dataclasses.replace(result, reason=f"buffer {key} differs from the reference's: {result.reason.removeprefix('output: ').removeprefix('output ')}")
            if worst is None or (result.max_abs_error or 0.0) >= (worst.max_abs_error or 0.0):
                worst = result
        return worst

    # -- the reference's data ----------------------------------------------------------------

    def _structure_notes(self) -> tuple[str, ...]:
        """Per structured input: what its redraws keep, and for a mask or integer values that the
        trials use get_inputs()'s own draws under their fresh seeds (no redraw)."""
        notes = []
        for position, found in enumerate(self.structures or []):
            if not found:
                continue
            kept = "not redrawn: each trial uses get_inputs() under its own secret seed" if {"0/1 mask", "integer-valued"} & set(found) else "the normal, signed and shifted redraws keep it"
            notes.append(f"input {position}: {', '.join(found)} ({kept})")
        return tuple(notes)

    def _inputs(self, trial: int) -> list[Any]:
        """Trial `trial`'s inputs, made on the device: get_inputs() under the trial's seed (module
        constants overridden for the other-size trial), then the trial's distribution."""
        job = self.job
        seed = job.input_seeds[trial]
        sizes = self.other if trial == job.other_size_trial else {}
        saved = {name: getattr(self.module, name) for name in sizes}
        try:
            for name, value in sizes.items():
                setattr(self.module, name, value)
            torch.manual_seed(seed)
            with self.device:
                raw = list(self.module.get_inputs())
            args = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in raw]
            if self.structures is None:  # read once, from the first draw: the problem's guarantees
                self.structures = [structure(a) for a in args]
            keep = self.structures + [()] * (len(args) - len(self.structures))
            return [redistribute(a, job.distributions[trial], seed + position, keep[position]) for position, a in enumerate(args)]
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        finally:
            for name, value in saved.items():
                setattr(self.module, name, value)

    def _forward(self, args: list[Any], aliases: bool = False) -> dict[str, Any]:
        """The reference's outputs on `args`, as the record compare_outputs reads."""
        try:
            out = as_outputs(self.model(*args))
            synchronize(self.device)
        except BaseException as exc:
            raise classify(exc, Status.RUNTIME_ERROR) from None
        self._output_bytes = _nbytes(_tensors(out))
        return {
            "types": [type(o).__name__ for o in out],
            "tensors": [o.detach().as_subclass(torch.Tensor) if isinstance(o, torch.Tensor) else o for o in out],
            "layouts": [str(o.layout) if isinstance(o, torch.Tensor) else "" for o in out],
            "devices": [o.device.type if isinstance(o, torch.Tensor) else "" for o in out],
            "aliases": [_aliased_input(o, args) if isinstance(o, torch.Tensor) else -1 for o in out],
        }

    def _bytes(self, outputs: Any) -> int:
        if isinstance(outputs, dict):
            outputs = outputs["tensors"]
        return layout(_tensors(outputs))[1]

    def _load(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            own = self.model.state_dict()
            for key, value in state.items():
                own[key].copy_(value)

    def _peak(self) -> int:
        if self.device.type == "cuda":
            return max(getattr(self, "_peak_floor", 0), int(torch.cuda.max_memory_allocated(self.device)))
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


RELEASE_ABOVE = 256 << 20  # cached, unused device memory the judge keeps at most between steps


def _release(device: torch.device) -> None:
    """Give cached device memory back, so that the worker beside the judge can have it (only when
    there is much of it: emptying the cache after every small step would cost its reallocation)."""
    if device.type == "cuda" and torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) > RELEASE_ABOVE:
        torch.cuda.empty_cache()


def _snapshot(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _tensors(values: list[Any]) -> list[Any]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _nbytes(tensors: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtype(name: str) -> torch.dtype:
    from harness.regions import dtype_of

    try:
        return dtype_of(name)
    except ValueError:
        return torch.uint8


def _json_value(value: Any, where: str) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise WorkerFailure(Status.INTERFACE_ERROR, f"{where} returns a {type(value).__name__}, which the harness cannot hand to workers (tensors and JSON values only)") from None
    return value


def _device_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _free_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


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
                send(P.Fault(f"{failure.status.value}: {failure.reason}"))
                return
            if isinstance(request, P.Check):
                send(P.Verdict(failure=(Status.HARNESS_ERROR.value, f"the judge failed on this step: {failure.reason}")))
            else:
                send(P.Fault(f"{failure.status.value}: {failure.reason}"))
                return


def _device_broken(device: Optional[torch.device]) -> bool:
    if device is None or device.type != "cuda":
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

    def send(message: Any) -> None:
        data = (P.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(reply_fd, data):]

    with os.fdopen(request_fd, "rb") as requests:
        serve(requests, send)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
