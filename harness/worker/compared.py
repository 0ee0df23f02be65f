"""What every compared role shares: the data plane (`DataPlane`: inputs from the judge's region,
outputs into its mailbox), the reference's weights put into the model (`ReferenceWeights`), and the
`Worker` that holds both: each step reported on the channel and answered by the parent, the phases,
loading and constructing the model, the checked forward and calls, and the timing rounds.

A role (harness.worker.candidate, harness.worker.baseline) is a `Worker` with a run sequence of its
own, made of these steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from harness.core import buildbook
from harness.core import protocol as P
from harness.core.channel import ChannelWriter
from harness.core.config import Device, ModuleMode, WeightSource
from harness.core.errors import one_line
from harness.core.integrity import is_compute
from harness.core.records import ExtensionBuild, ForwardOps, from_dict
from harness.core.scan import declared_kernels
from harness.core.status import Backward, Status
from harness.device.buildcache import BuildCache
from harness.device.checks import paired_by, step_counter, weight_pairs, weights_problems
from harness.device.failures import WorkerFailure, classify, load_module
from harness.device.guard import Guard
from harness.device.inputs import aliased_input, as_outputs, same_bits
from harness.device.profile import observe_ops, observed_call
from harness.device.regions import (
    GUARD,
    PLAIN,
    POISON,
    Region,
    band_changes,
    layout,
    past_end,
    unmaterialised,
    view,
    write,
)
from harness.device.setup import launch_check, setup_device, synchronize
from harness.device.timed import prepare_timer, time_round
from harness.worker.sandbox import end_descendants, enter_pending, own_builds, own_reads


class DataPlane:
    """The judge's two regions as this worker maps them (`map`): the inputs region (each step's inputs
    as the judge staged them, and the reference's weights) and the mailbox (each step's outputs).
    Where the inputs region is in host memory on a CUDA run, the model gets device copies of its
    inputs, which the judge cannot see: the worker checks them itself (`check_copies`)."""

    def __init__(self, session: P.SessionHandle, guard_bands: bool, report: Callable[[Any], None]) -> None:
        self.session = session
        self.guard_bands = guard_bands  # report a write past the end of a device copy (job.guard_bands)
        self.report = report  # sends a message on the worker's channel
        self.device: Any = None  # the torch.device (`map`)
        self.inputs: Any = None  # the judge's inputs region, mapped (`map`)
        self.mailbox: Any = None  # the judge's mailbox region, mapped (`map`)
        self._copies = False  # the inputs region is in host memory on a CUDA run: the model gets device copies
        self._last: Any = None  # (views, tensors) of the input set staged last
        self._views: dict[Any, Any] = {}
        self._bands: dict[int, Any] = {}  # id of a device copy -> the guard band after it
        self._unsafe_reported = False

    def map(self, device: Any) -> None:
        """Map the judge's regions on `device` (before the boundary is entered: Landlock refuses the
        judge's /proc entries to a process inside it)."""
        self.device = device
        try:
            self.inputs = Region.open(self.session.inputs, device)
            self.mailbox = Region.open(self.session.mailbox, device)
        except Exception as exc:
            raise WorkerFailure(Status.HARNESS_ERROR, f"could not map the judge's regions: {one_line(exc)}") from None
        self._copies = self.inputs.kind == P.RegionKind.HOST and device.type == Device.CUDA

    def args(self, args: Any) -> list[Any]:
        """Arguments as the judge staged them: views into the inputs region, or plain values."""
        return [view(self.inputs.tensor, a.tensor) if a.tensor is not None else a.value for a in args]

    def weights(self) -> dict[str, torch.Tensor]:
        """The reference's state_dict, as views into the inputs region."""
        return {w.name: view(self.inputs.tensor, w.tensor) for w in self.session.weights}

    def staged(self, args: Any, fresh: bool = True) -> list[Any]:
        """The staged input set: the same tensor objects whenever the judge staged the same layout.
        They are views into the inputs region, or, where the region is in host memory on a CUDA
        run, device copies of them, refilled from the region each time a step's inputs are staged."""
        key = tuple(args)
        if key not in self._views:
            views = self.args(args)
            tensors = [self._guarded_copy(v) if self._copies and isinstance(v, torch.Tensor) else v for v in views]
            self._views[key] = (views, tensors)
        elif self._copies and fresh:
            for view_, tensor in zip(*self._views[key]):
                if isinstance(tensor, torch.Tensor):
                    tensor.copy_(view_)
        self._last = self._views[key]
        return self._views[key][1]

    def _guarded_copy(self, source: Any) -> Any:
        """A device copy of `source`, followed in its allocation by a guard band of poison (as the
        judge's regions have), so a write past its end is seen (`check_copies`)."""
        nbytes = source.numel() * source.element_size()
        block = torch.empty(nbytes + GUARD, dtype=torch.uint8, device=self.device)
        block[nbytes:].fill_(POISON)
        tensor = block[:nbytes].view(source.dtype).view(source.shape)
        tensor.copy_(source)
        self._bands[id(tensor)] = block[nbytes:]
        return tensor

    def check_copies(self, label: str) -> None:
        """Where the worker runs on device copies of a host region, the judge cannot see them: the
        worker checks that forward left them as the judge staged them (a chunk at a time), and
        reports the first write past one's end (its guard band changed) once."""
        if not self._copies:
            return
        for position, (staged, tensor) in enumerate(zip(*self._last)):
            if not isinstance(tensor, torch.Tensor):
                continue
            if not same_bits(tensor, staged):
                raise WorkerFailure(Status.MUTATED_INPUT, f"forward changed input {position} in place ({label})")
            band = self._bands.get(id(tensor))
            if band is not None and not self._unsafe_reported and self.guard_bands:
                changed = band_changes(band)
                if changed:
                    self._unsafe_reported = True
                    self.report(P.Unsafe(past_end(position, changed, label)))

    def deliver(self, outputs: list[Any], inputs: list[Any], names: Optional[list[str]]) -> tuple[P.Output, ...]:
        """Put `outputs` in the mailbox, when they fit, and describe each for the step's report: its
        type, name, layout, device, the input it aliases and where it lies (offset -1: it did not fit).
        An output with no values of its own (`unmaterialised`: a tensor subclass, the meta device, a
        storage smaller than its shape) is described and never touched: the judge fails it on its
        description, and the parent flags it lazy-output. So is a sparse or nested one, on its layout.
        A failure to copy an output (its dtype, its device, a CUDA error forward left) is the
        model's (`model_fault`), unless the mailbox refuses a write of the harness's own as well."""
        lazy = [unmaterialised(o) if isinstance(o, torch.Tensor) else "" for o in outputs]
        tensors = [o for o, why in zip(outputs, lazy) if not why and dense(o)]
        specs, end = layout(tensors)
        fits = end <= self.mailbox.nbytes
        if fits:
            for position, (tensor, spec) in enumerate(zip(tensors, specs)):
                self._write(position, tensor, spec)
            with model_fault("after its outputs were copied to the judge"):
                synchronize(self.device)
        described = []
        spec_of = iter(specs)
        for position, o in enumerate(outputs):
            name = names[position] if names else ""
            if lazy[position]:  # nothing of it is read: a subclass's attributes run its own code
                described.append(P.Output(type(o).__name__, name, lazy=lazy[position]))
            elif dense(o):
                spec = next(spec_of)
                if not fits:
                    spec = dataclasses.replace(spec, offset=-1)
                described.append(P.Output("Tensor", name, str(o.layout), o.device.type, aliased_input(o, inputs), spec))
            elif isinstance(o, torch.Tensor):  # the judge reads its layout, and fails it
                form = f"nested {o.layout}" if o.is_nested else str(o.layout)
                described.append(P.Output("Tensor", name, form, o.device.type))
            else:
                described.append(P.Output(type(o).__name__, name))
        return tuple(described)

    def _write(self, position: int, tensor: torch.Tensor, spec: P.TensorSpec) -> None:
        """One output into its place in the mailbox. When the copy raises, a write of the harness's
        own into the same place tells whose fault it is: the mailbox's (`harness error`) when that
        fails too, else the output's (`runtime error`, or `CUDA fault` for a CUDA error)."""
        try:
            write(self.mailbox.tensor, [tensor], [spec])
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            failure = classify(exc, Status.RUNTIME_ERROR)
            if failure.status is Status.RUNTIME_ERROR:
                try:
                    self.mailbox.tensor[spec.offset : spec.offset + spec.nbytes].zero_()
                    synchronize(self.device)
                except Exception as ours:
                    why = f"the judge's mailbox refuses a write of the harness's own: {one_line(ours)}"
                    raise WorkerFailure(Status.HARNESS_ERROR, why) from None
            what = f"output {position} ({str(tensor.dtype).removeprefix('torch.')} on {tensor.device})"
            raise WorkerFailure(failure.status, f"{what} could not be copied to the judge: {failure.reason}") from None


class ReferenceWeights:
    """How the reference's weights go into the model (`pairs`, `load`), and the names they pair: later
    steps name the model's buffers and gradients as the reference does (`name_of`)."""

    def __init__(self, source: str, specs: tuple[P.Named, ...], report: Callable[[Any], None]) -> None:
        self.source = source  # check.weights: the reference's weights ("transplant") or its own ("seed")
        self.specs = specs  # the reference's state_dict, as laid out in the inputs region
        self.report = report  # sends a message on the worker's channel
        self._renamed: dict[str, str] = {}  # own name -> the reference's, where the model renamed them

    def name_of(self, name: str) -> str:
        """The reference's name for the model's weight `name`."""
        return self._renamed.get(name, name)

    def pairs(self, model: Any) -> Optional[list[tuple[str, str]]]:
        """How the reference's weights go into the model (`weight_pairs`), or None when it keeps the
        weights it built under the shared seed: check.weights is seed (KernelBench's way), or they
        pair neither by name nor by position (then `WeightsBySeed` says why; the verdict is flagged)."""
        if self.source == WeightSource.SEED:
            return None
        reference = {w.name: w.tensor for w in self.specs}
        own = model.state_dict()
        pairs = weight_pairs(own, reference)
        if pairs is None:
            self.report(P.WeightsBySeed(weights_problems(own, reference)[:500]))
        return pairs

    def load(self, model: Any, reference: dict[str, Any], pairs: Optional[list[tuple[str, str]]] = None) -> None:
        """The reference's state_dict (`reference`, in the inputs region) into `model`: by name when
        the names match; else, when ModelNew renamed them (gamma for bn.weight, a Sequential
        re-indexed), by registration order, where every parameter and buffer pairs with one of the
        same shape (num_batches_tracked aside). The pairs are reported (`WeightsMapped`); later steps
        name buffers and gradients as the reference does. No such pairing (a compile baseline whose
        weights will not load): `weights mismatch`."""
        own = model.state_dict()
        pairs = weight_pairs(own, reference) if pairs is None else pairs
        if pairs is None:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, weights_problems(own, reference)[:500])
        if pairs:
            how = paired_by(own, reference, pairs)
            self._renamed = {mine: theirs for mine, theirs in pairs if mine != theirs}
            # counters that could not pair keep their own
            unpaired = {k: own[k] for k in own if step_counter(k) and k not in dict(pairs)}
            reference = {mine: reference[theirs] for mine, theirs in pairs} | unpaired
            self.report(P.WeightsMapped(tuple(sorted(self._renamed.items())[:200]), how))
        try:
            model.load_state_dict(reference, strict=True)
        except BaseException as exc:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, one_line(exc)) from None


class Worker:
    """One compared model in its own process. Its inputs and the reference's weights are in a
    region the judge shares with it (`plane`); it puts each step's outputs in the judge's mailbox
    region, reports the step on the channel, and waits for the parent's go-ahead (which carries the
    inputs the judge staged next). Subclasses give each role its `run` sequence."""

    role: P.Role  # the role a subclass runs (the job's role picks the subclass)

    def __init__(self, job: P.WorkerJob, channel: ChannelWriter, acks: Any) -> None:
        self.job = job
        self.channel = channel
        self.acks = acks  # the parent's go-ahead lines (a private copy of stdin)
        self.session = job.session
        self.phase_seconds: dict[str, float] = {}
        self.device: Any = None  # the torch.device, once set up (`load`)
        self.guard = Guard(self)  # the identities the model must leave alone, taken before its module is imported
        # both report through `send`, looked up at each message (as the guard sees it); the plane is mapped in `load`
        self.plane = DataPlane(job.session, job.guard_bands, lambda message: self.send(message))
        self.weights = ReferenceWeights(job.weights, job.session.weights, lambda message: self.send(message))
        self._phase_name, self._phase_started = "", 0.0
        self._steps: list[P.StepKind] = []  # the steps reported so far, in the order protocol.STEPS declares
        # the ATen operators of the observed checked call (a candidate on the CPU)
        self.forward_ops: Optional[ForwardOps] = None

    def run(self) -> None:
        raise NotImplementedError

    def send(self, message: Any) -> None:
        """One typed message (harness.core.protocol) on the result channel."""
        self.channel.send(P.encode(message))

    def phase(self, name: str) -> None:
        self.send(P.Phase(name))
        print(f"[harness] phase {name}", file=sys.stderr, flush=True)
        self._phase_name, self._phase_started = name, time.perf_counter()

    def _around_build(self, starting: bool) -> None:
        """A build in __init__ or forward runs under the load limit, then its phase resumes afresh."""
        if self._phase_name != "load":
            self.send(P.Phase("load" if starting else self._phase_name))

    def end_phase(self) -> None:
        self.phase_seconds[self._phase_name] = round(time.perf_counter() - self._phase_started, 4)

    # -- each step on the channel ----------------------------------------------------------------

    def _step(
        self,
        step: P.StepKind,
        index: int,
        outputs: list[Any],
        inputs: list[Any],
        *,
        want: P.Want,
        names: Optional[list[str]] = None,
        status: Backward = Backward.RAN,
        reason: str = "",
        own_weights: bool = False,
    ) -> Optional[P.Staged]:
        """Put `outputs` in the mailbox, report the step, and wait for the parent's go-ahead; the
        inputs the judge staged for the next step come with it. A step out of the role's declared
        order (protocol.STEPS) is the harness's own error."""
        order = P.out_of_order(
            self.role,
            self._steps,
            P.Step(step, index, outputs=tuple(P.Output("") for _ in outputs)),
            len(self.job.calls),
            self.job.gradients,
        )
        if order:
            raise WorkerFailure(Status.HARNESS_ERROR, f"the worker's {order}")
        self._steps.append(step)
        label = step if step != P.StepKind.CALL else f"call_{index}"
        if step in (P.StepKind.SAME_SEED, P.StepKind.CALL):
            with model_fault(f"checking its inputs after forward ({label})"):
                self.plane.check_copies(label)
        with model_fault(f"describing its {label} outputs to the judge"):
            described = self.plane.deliver(outputs, inputs, names)
        reply = self._exchange(P.Step(step, index, described, status, reason, want, own_weights))
        return from_dict(P.Staged, reply["staged"]) if reply.get("staged") is not None else None

    def _exchange(self, message: Any) -> dict[str, Any]:
        """Send `message` on the channel and wait for the parent's answer (one JSON line)."""
        self.send(message)
        line = self.acks.readline()
        if not line:
            raise WorkerFailure(Status.HARNESS_ERROR, f"the parent went away after a {type(message).__name__} message")
        return json.loads(line)

    def _ask(self, kind: P.WantKind) -> Optional[P.Staged]:
        """Ask for inputs without reporting outputs (a step with none)."""
        return self._step(P.StepKind.STAGE, 0, [], [], want=P.Want(kind))

    # -- the checked forward ---------------------------------------------------------------------

    def _observed(self, model: Any, args: list[Any], label: str, index: int, cache: BuildCache) -> list[Any]:
        """A checked forward (`_call`) with the ATen operators it runs recorded, those its extension
        functions call told apart (harness.device.profile.observe_ops): the CPU's evidence where CUDA has
        the kernel profile, against the reference's on the same call."""
        functions = {name.rsplit(".", 1)[-1] for name in cache.calls}
        out, self.forward_ops = observe_ops(lambda: self._call(model, args, label), is_compute, functions, index)
        return out

    def _call(self, model: Any, args: list[Any], label: str) -> list[Any]:
        """One checked forward: its outputs (tensors only), after the guard's check and a look for
        threads it left running."""
        threads_before = set(threading.enumerate())
        try:
            out = model(*args)
            synchronize(self.device)
            launch_check(self.device)  # a launch error forward left unchecked is raised here, not in the harness's code
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.RUNTIME_ERROR) from None
        with model_fault(f"after forward ({label})"):
            self.guard.check(f"forward ({label})")
            alive = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
            if alive:
                self.send(P.Threads(label, tuple(alive[:5]), len(alive)))
            outputs = as_outputs(out)
        bad = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if bad:
            raise WorkerFailure(Status.RUNTIME_ERROR, f"forward returned {', '.join(bad)} where tensors were expected")
        return outputs

    # -- the steps every role's pass is made of --------------------------------------------------

    def load(self) -> tuple[type, BuildCache]:
        """Phase load: the device, the judge's regions mapped, the boundary entered (from here on the
        process writes only where the run allows, harness.worker.sandbox), the build cache, the guard,
        and the model's class from its module."""
        job = self.job
        self.phase("load")
        self.device, arch, _ = setup_device(job)
        self.plane.map(self.device)  # before the boundary: Landlock refuses the judge's /proc entries inside it
        cache_root = Path(job.build_cache)
        owner = buildbook.owner_of(job.source_text or Path(job.source).read_text(encoding="utf-8", errors="replace"))
        # what it may read besides the allow-list: its module's file (tracebacks, Triton's and inspect's
        # source lookups) and its own builds in the cache, with their digests
        enter_pending(reads=own_reads(job.source, cache_root, owner))
        cache = BuildCache(
            cache_root,
            arch,
            around_build=self._around_build,
            on_event=lambda event: self.send(P.Built(ExtensionBuild(**event))),
            owner=owner,
            staging=own_builds(),
        )
        cache.install()
        module = load_module(Path(job.source), f"__{self.role.value}__", job.source_text, job.problem_text)
        self.guard.check("import")
        model_class = getattr(module, job.class_name, None)
        if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
            raise WorkerFailure(
                Status.INTERFACE_ERROR, f"the module defines no nn.Module subclass named {job.class_name}"
            )
        self.end_phase()
        return model_class, cache

    def construct(self, model_class: type) -> Any:
        """Phase construct: the model built under the shared seed on the device."""
        self.phase("construct")
        init_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in self.plane.args(self.session.init_args)]
        try:
            torch.manual_seed(self.job.construct_seed)
            model = model_class(*init_args)
            model = model.to(self.device)
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        self.guard.check("construction")
        self.end_phase()
        return model

    def check_calls(self, model: Any, runner: Any, staged: P.Staged, cache: Optional[BuildCache] = None) -> P.Staged:
        """Every planned call of `runner` (`model`, or its compiled form) on the inputs the judge staged,
        each reported as a step; returns what the judge staged after the last. With `cache` (a
        candidate's) on the CPU, the ATen operators of one call are observed (`_observed`)."""
        calls = self.job.calls
        observed = observed_call(calls) if cache is not None and self.device.type == Device.CPU else -1
        for index, call in enumerate(calls):
            model.train(call.module_mode == ModuleMode.TRAIN)
            # The inputs of every call are written by the judge into the same memory: an answer
            # memoised by input identity or address comes back stale and fails the comparison.
            args = self.plane.staged(staged.sets[0], staged.fresh)
            torch.manual_seed(self.job.rng_seed + index)  # as the judge seeds its reference call
            out = (
                self._observed(runner, args, f"call_{index}", index, cache)
                if index == observed and cache is not None
                else self._call(runner, args, f"call_{index}")
            )
            last = index + 1 == len(calls)
            reply = self._step(
                P.StepKind.CALL,
                index,
                out,
                args,
                want=P.Want(P.WantKind.NONE) if last else P.Want(P.WantKind.CALL, index + 1),
            )
            # The judge stages what a passing call asks for; a failing one ends the worker instead.
            assert reply is not None
            staged = reply
            del out
        return staged

    def load_reference_weights(self, model: Any, pairs: Optional[list[tuple[str, str]]] = None) -> None:
        """The reference's state_dict, from the inputs region, into `model` (`ReferenceWeights.load`)."""
        self.weights.load(model, self.plane.weights(), pairs)

    # -- timing ----------------------------------------------------------------------------------

    def start_timing(self, staged: Optional[P.Staged]) -> list[list[Any]]:
        """Phase time begins: the timing threads set, and the input sets the judge staged for timing."""
        assert staged is not None
        self.phase("time")
        if self.device.type == Device.CPU and self.job.cpu_threads:
            torch.set_num_threads(self.job.cpu_threads)  # checks use every core; timings this many
        return [self.plane.staged(s) for s in staged.sets]

    def time_rounds(self, runner: Any, sets: list[list[Any]], *, profiled: bool) -> Optional[list[Any]]:
        """Warm up and (when `profiled`) profile, then time the forward over the staged sets in the
        rounds the parent asks for (in turns with the reference in the judge). Returns the output of
        the last timed call on the first set, when there is one."""
        assert self.job.timing is not None
        own = declared_kernels(Path(self.job.source)) if profiled else set()  # the kernels a graph must not leave out
        timer, ready, last = prepare_timer(runner, sets, self.device, self.job.timing, profiled=profiled, own=own)
        self.guard.check("timing")
        self.phase_seconds["prepare"] = round(time.perf_counter() - self._phase_started, 4)
        reply = self._exchange(ready)
        while reply.get("round") is not None:
            ask = P.decode(reply["round"])
            stats = time_round(timer, ask)
            self.guard.check("timing")
            reply = self._exchange(P.RoundTimed(ask.round, stats))
        with model_fault("reading the output of its last timed call"):
            return last()

    def finish(self, cache: BuildCache, checked: dict[str, int], before_timing: dict[str, int]) -> None:
        """The extension calls counted while checked and while timed (with the observed call's ATen
        operators, when there are some), then the last message."""
        self.send(P.ExtensionCalls(checked, calls_since(cache.calls, before_timing), self.forward_ops))
        self.send(P.Done(self.phase_seconds, end_descendants()))


def dense(output: Any) -> bool:
    """Whether `output` is a tensor with bytes of its own to copy: a plain tensor (harness.device.regions.PLAIN),
    strided, not nested, and not on the meta device."""
    return (
        type(output) in PLAIN
        and output.layout == torch.strided
        and not output.is_nested
        and output.device.type != "meta"
    )


@contextlib.contextmanager
def model_fault(where: str) -> Iterator[None]:
    """Harness code that handles what the model left (its outputs, its inputs, its buffers, the
    device after its call): what it raises is the model's doing, under the status
    harness.device.failures.classify gives it (a CUDA error, sticky or left pending by a launch
    forward never checked, is `CUDA fault`; else `runtime error`), with `where` in the reason. A
    WorkerFailure passes as it is (a mutated input, tampering, the harness's own error)."""
    try:
        yield
    except WorkerFailure:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        failure = classify(exc, Status.RUNTIME_ERROR)
        raise WorkerFailure(failure.status, f"{failure.reason} ({where})") from None


def calls_since(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Calls into each extension function since `before` (functions built since count from zero)."""
    return {name: count - before.get(name, 0) for name, count in now.items()}


def inductor_cache(build_cache: str) -> None:
    """torch.compile's caches beside the build cache, for a worker with no folder of its own (one the
    parent started gets its own folder's, harness.worker.sandbox.take_own: a cache every candidate
    could write is one a candidate could poison for the baseline)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(build_cache).parent / "inductor"))
