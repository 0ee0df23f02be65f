"""The worker subprocess: runs one compared model (a candidate, or torch.compile of the reference).

Started by `harness.supervise` as `python -m harness.worker`; it imports torch, then reads its job
as one JSON line on stdin (so a worker can be started ahead of its job).
It never decides a verdict, and never sees an expected output: it loads the module (building
inline extensions through the content-addressed cache), constructs the model, runs the planned
forward calls on the inputs the judge staged in its region, puts each step's outputs in the judge's
mailbox, times the forward, and reports each step on the authenticated result channel. Anything it
prints goes to a log, never into the results.

The helpers at module level (classify, load_module, Guard, prepare_timer, model_gradients, ...) are
shared with the judge, which runs the problem's reference with the same code.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Optional

from harness.channel import ChannelWriter
from harness.status import Status


class WorkerFailure(Exception):
    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:limit] if first else type(exc).__name__


_NEEDS_CUDA_MARKERS = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "no CUDA device",
)
_CUDA_FAULT_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "CUBLAS_STATUS",
    "CUDNN_STATUS_EXECUTION_FAILED",
)


def classify(exc: BaseException, default: Status) -> WorkerFailure:
    """Map an exception raised by model code to a status; `default` names the phase's failure."""
    import torch

    from harness.buildcache import BuildFailedError, NeedsCudaError

    if isinstance(exc, WorkerFailure):
        return exc
    if not isinstance(exc, BuildFailedError):
        traceback.print_exception(exc, file=sys.stderr)  # where it was raised, for the candidate's log
        sys.stderr.flush()
    from harness.scratch import no_space

    full = no_space(exc)
    if full:
        return WorkerFailure(Status.HARNESS_ERROR, f"harness error: {full}")
    message = str(exc)
    if isinstance(exc, BuildFailedError):
        return WorkerFailure(Status.BUILD_FAILED, exc.first_error)
    if isinstance(exc, NeedsCudaError) or any(m in message for m in _NEEDS_CUDA_MARKERS):
        return WorkerFailure(Status.NEEDS_CUDA, one_line(exc))
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in message.lower():
        return WorkerFailure(Status.OUT_OF_MEMORY, one_line(exc))
    accelerator_error = getattr(torch, "AcceleratorError", ())
    if (accelerator_error and isinstance(exc, accelerator_error)) or any(m in message for m in _CUDA_FAULT_MARKERS):
        return WorkerFailure(Status.CUDA_FAULT, one_line(exc))
    if isinstance(exc, ImportError) and default is Status.IMPORT_ERROR:
        return WorkerFailure(Status.IMPORT_ERROR, one_line(exc))
    return WorkerFailure(default, one_line(exc) + _memory_held_outside())


LEAK_SHARE = 0.9  # device memory in use beyond this share, mostly outside PyTorch's allocator, is named


def _memory_held_outside() -> str:
    """A note when the device is nearly full while PyTorch's allocator holds little of it: memory
    taken outside the allocator (a handle, stream or cudaMalloc per call never freed) explains
    errors that do not name it ("Invalid argument")."""
    import torch

    try:
        if not torch.cuda.is_initialized():
            return ""
        free, total = torch.cuda.mem_get_info()
        held = torch.cuda.memory_reserved()
    except Exception:
        return ""
    used = total - free
    if used < LEAK_SHARE * total or held > used / 2:
        return ""
    return f" (the device had {free >> 20} MiB free of {total >> 20} MiB, and PyTorch's allocator held only {held >> 20} MiB: memory taken outside it, and never given back?)"


def load_module(path: Path, module_name: str) -> types.ModuleType:
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise WorkerFailure(Status.SYNTAX_ERROR, f"line {exc.lineno}: {exc.msg}") from None
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit at import is a failure of the module, not of the worker
        if isinstance(exc, KeyboardInterrupt):
            raise
        failure = classify(exc, Status.IMPORT_ERROR)
        if failure.status is Status.BUILD_FAILED:
            print(getattr(exc, "log", ""), file=sys.stderr, flush=True)  # the full compiler output, for the log
        raise failure from None
    return module


def same_bits(a: Any, b: Any) -> bool:
    """Inputs left as they were: bit-for-bit equal tensors (or equal values)."""
    import torch

    from harness.compare import same_bits as tensors_equal

    if not isinstance(a, torch.Tensor):
        return a == b
    return tensors_equal(a, b)


def setup_device(job: dict[str, Any]) -> tuple[Any, str, str]:
    """TF32 policy, the device, the architecture builds target, and the device's name."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = bool(job["allow_tf32"])
    torch.backends.cudnn.allow_tf32 = bool(job["allow_tf32"])
    if job["device"] == "cuda":
        if not torch.cuda.is_available():
            raise WorkerFailure(Status.NEEDS_CUDA, "the run asked for CUDA and the process sees no CUDA device")
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        torch.empty(1, device=device)  # the context, before any model code runs
        from harness.timing import remember_l2_default

        remember_l2_default()
        major, minor = torch.cuda.get_device_capability(device)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # build for this GPU only: faster, and part of the key
        return device, f"{major}.{minor}", torch.cuda.get_device_name(device)
    from harness.environment import cpu_name

    return torch.device("cpu"), "cpu", cpu_name()


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Worker:
    """One compared model (a candidate's ModelNew, or torch.compile of the reference) in its own
    process. Its inputs and the reference's weights are in a region the judge shares with it; it
    puts each step's outputs in the judge's mailbox region, reports the step on the channel, and
    waits for the parent's go-ahead (which carries the inputs the judge staged next)."""

    def __init__(self, job: dict[str, Any], channel: ChannelWriter, acks: Any) -> None:
        from harness.protocol import Session
        from harness.records import from_dict

        self.job = job
        self.channel = channel
        self.acks = acks  # the parent's go-ahead lines (a private copy of stdin)
        self.role: str = job["role"]
        self.session: Session = from_dict(Session, job["session"])
        self.phase_seconds: dict[str, float] = {}
        self._views: dict[Any, Any] = {}
        self._bands: dict[int, Any] = {}  # id of a device copy -> the guard band after it
        self._unsafe_reported = False

    def phase(self, name: str) -> None:
        self.channel.send({"type": "phase", "phase": name})
        print(f"[harness] phase {name}", file=sys.stderr, flush=True)
        self._phase_name, self._phase_started = name, time.perf_counter()

    def _around_build(self, starting: bool) -> None:
        """A build in __init__ or forward runs under the load limit, then its phase resumes afresh."""
        if self._phase_name != "load":
            self.channel.send({"type": "phase", "phase": "load" if starting else self._phase_name})

    def end_phase(self) -> None:
        self.phase_seconds[self._phase_name] = round(time.perf_counter() - self._phase_started, 4)

    def run(self) -> None:
        import torch

        from harness.regions import Region

        job = self.job
        self.phase("load")
        device, arch, device_name = setup_device(job)
        self.device = device
        from harness.buildcache import BuildCache

        cache = BuildCache(
            Path(job["build_cache"]), arch,
            around_build=self._around_build,
            on_event=lambda event: self.channel.send({"type": "builds", "builds": [event]}),
        )
        cache.install()
        self.guard = Guard(self)
        self.reference_names: Callable[[str], str] = lambda name: name  # own name -> the reference's (renamed weights)
        module = load_module(Path(job["source"]), f"__{self.role}__")
        self.guard.check("import")
        model_class = getattr(module, job["class_name"], None)
        if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
            raise WorkerFailure(Status.INTERFACE_ERROR, f"the module defines no nn.Module subclass named {job['class_name']}")
        self.end_phase()

        self.phase("construct")
        try:
            self.inputs = Region.open(self.session.inputs, device)
            self.mailbox = Region.open(self.session.mailbox, device)
        except Exception as exc:
            raise WorkerFailure(Status.HARNESS_ERROR, f"could not map the judge's regions: {one_line(exc)}") from None
        self._copies = self.inputs.kind == "host" and device.type == "cuda"
        init_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in self._args(self.session.init_args)]
        try:
            torch.manual_seed(job["construct_seed"])
            model = model_class(*init_args)
            model = model.to(device)
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        self.guard.check("construction")
        self.end_phase()

        runner = model
        if job.get("compile_mode"):
            # torch.compile's caches beside the build cache: reused across runs, never in the run's scratch
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(job["build_cache"]).parent / "inductor"))
            runner = self._compile(model, job["compile_mode"], device)

        self.phase("check")
        calls = job["calls"]
        before_checks = dict(cache.calls)
        staged = self.session.first
        own = False  # ModelNew keeps its own same-seed weights (check.weights seed, or nothing pairs)
        with torch.no_grad():
            if self.role != "baseline":
                model.eval()
                args = self._set(staged.sets[0])
                pairs = self._weight_pairs(model, job.get("weights", "transplant"))
                own = pairs is None
                staged = self._step("same_seed", 0, self._call(model, args, "same_seed"), args, want=("call", 0), own_weights=own)
                if not own:
                    self._load_reference_weights(model, pairs)
            for index, call in enumerate(calls):
                model.train(call["mode"] == "train")
                # The inputs of every call are written by the judge into the same memory: an answer
                # memoised by input identity or address comes back stale and fails the comparison.
                args = self._set(staged.sets[0], staged.fresh)
                torch.manual_seed(job.get("rng_seed", 0) + index)  # as the judge seeds its reference call
                out = self._call(runner, args, f"call_{index}")
                last = index + 1 == len(calls)
                staged = self._step("call", index, out, args, want=("none", 0) if last else ("call", index + 1))
                del out
        checked_calls = _delta(cache.calls, before_checks)
        gradients = job.get("gradients") and self.role != "baseline"
        timing = job.get("timing") is not None
        if self.role == "baseline":  # the compiled reference: its calls are checked, then it is timed
            staged = self._ask("timing") if timing else staged
        else:
            after_buffers = ("trial", 0) if gradients else ("timing", 0) if timing else ("none", 0)
            staged = self._step("buffers", 0, [v.detach() for _, v in model.named_buffers()], [], want=after_buffers, names=[self.reference_names(k) for k, _ in model.named_buffers()])
        if gradients:
            status, reason, grads = model_gradients(model, self._set(staged.sets[0], staged.fresh), job["gradient_seed"], self.guard)
            if own:  # its own parameters: only those the reference has, by name and shape, can be compared
                grads = paired_gradients(grads, {f"parameter {w.name}": tuple(w.tensor.shape) for w in self.session.weights})
            names = [f"parameter {self.reference_names(k.removeprefix('parameter '))}" if k.startswith("parameter ") else k for k in grads]
            staged = self._step("grads", 0, list(grads.values()), [], want=("timing", 0) if timing else ("none", 0), names=names, status=status, reason=reason)
            del grads
            if device.type == "cuda":
                torch.cuda.empty_cache()
        self.end_phase()

        before_timing = dict(cache.calls)
        if timing:
            self.phase("time")
            if device.type == "cpu" and job["cpu_threads"]:
                torch.set_num_threads(job["cpu_threads"])  # checks use every core; timings this many
            self._time(runner, [self._set(s) for s in staged.sets], device)
            self.end_phase()
        self.channel.send({"type": "extension_calls", "checked": checked_calls, "timed": _delta(cache.calls, before_timing)})
        self.channel.send({"type": "done", "device_name": device_name, "phase_seconds": self.phase_seconds})

    # -- the data plane --------------------------------------------------------------------------

    def _args(self, args: Any) -> list[Any]:
        from harness.regions import view

        return [view(self.inputs.tensor, a.tensor) if a.tensor is not None else a.value for a in args]

    def _set(self, args: Any, fresh: bool = True) -> list[Any]:
        """The staged input set: the same tensor objects whenever the judge staged the same layout.
        They are views into the inputs region, or, where the region is in host memory on a CUDA
        run, device copies of them, refilled from the region each time a step's inputs are staged."""
        import torch

        key = tuple(args)
        if key not in self._views:
            views = self._args(args)
            tensors = [self._guarded_copy(v) if self._copies and isinstance(v, torch.Tensor) else v for v in views]
            self._views[key] = (views, tensors)
        elif self._copies and fresh:
            for view_, tensor in zip(*self._views[key]):
                if isinstance(tensor, torch.Tensor):
                    tensor.copy_(view_)
        self._last = self._views[key]
        return self._views[key][1]

    def _guarded_copy(self, view: Any) -> Any:
        """A device copy of `view`, followed in its allocation by a guard band of poison (as the
        judge's regions have), so a write past its end is seen (`_check_copies`)."""
        import torch

        from harness.regions import GUARD, POISON

        nbytes = view.numel() * view.element_size()
        block = torch.empty(nbytes + GUARD, dtype=torch.uint8, device=self.device)
        block[nbytes:].fill_(POISON)
        tensor = block[:nbytes].view(view.dtype).view(view.shape)
        tensor.copy_(view)
        self._bands[id(tensor)] = block[nbytes:]
        return tensor

    def _check_copies(self, label: str) -> None:
        """Where the worker runs on device copies of a host region, the judge cannot see them: the
        worker checks that forward left them as the judge staged them (a chunk at a time), and
        reports the first write past one's end (its guard band changed) once."""
        import torch

        from harness.regions import band_changes, past_end

        if not self._copies:
            return
        for position, (staged, tensor) in enumerate(zip(*self._last)):
            if not isinstance(tensor, torch.Tensor):
                continue
            if not same_bits(tensor, staged):
                raise WorkerFailure(Status.MUTATED_INPUT, f"forward changed input {position} in place ({label})")
            band = self._bands.get(id(tensor))
            if band is not None and not self._unsafe_reported and self.job.get("guard_bands", True):
                changed = band_changes(band)
                if changed:
                    self._unsafe_reported = True
                    self.channel.send({"type": "unsafe", "reason": past_end(position, changed, label)})

    def _step(self, step: str, index: int, outputs: list[Any], inputs: list[Any], *, want: tuple[str, int], names: Optional[list[str]] = None, status: str = "ok", reason: str = "", own_weights: bool = False) -> Any:
        """Put `outputs` in the mailbox, report the step, and wait for the parent's go-ahead; the
        inputs the judge staged for the next step come with it."""
        from harness.protocol import Output, Staged, Step, Want, encode
        from harness.records import from_dict
        from harness.regions import layout, write
        import torch

        if step in ("same_seed", "call"):
            self._check_copies(step if step == "same_seed" else f"call_{index}")
        tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
        specs, end = layout(tensors)
        fits = end <= self.mailbox.nbytes
        if fits:
            write(self.mailbox.tensor, [t.as_subclass(torch.Tensor) for t in tensors], specs)
            synchronize(self.device)
        described = []
        spec_of = iter(specs)
        for position, o in enumerate(outputs):
            name = names[position] if names else ""
            if isinstance(o, torch.Tensor):
                spec = next(spec_of)
                if not fits:
                    spec = dataclasses.replace(spec, offset=-1)
                described.append(Output(type(o).__name__, name, str(o.layout), o.device.type, _aliased_input(o, inputs), spec))
            else:
                described.append(Output(type(o).__name__, name))
        reply = self._exchange({"type": "step", "step": encode(Step(step, index, tuple(described), status, reason, Want(*want), own_weights))})
        return from_dict(Staged, reply["staged"]) if reply.get("staged") is not None else None

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send `message` on the channel and wait for the parent's answer (one JSON line)."""
        self.channel.send(message)
        line = self.acks.readline()
        if not line:
            raise WorkerFailure(Status.HARNESS_ERROR, f"the parent went away after a {message.get('type')} message")
        return json.loads(line)

    def _ask(self, kind: str) -> Any:
        """Ask for inputs without reporting outputs (a step with none)."""
        return self._step("stage", 0, [], [], want=(kind, 0))

    def _call(self, model: Any, args: list[Any], label: str) -> list[Any]:
        import threading

        import torch

        threads_before = set(threading.enumerate())
        try:
            out = model(*args)
            synchronize(self.device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.RUNTIME_ERROR) from None
        self.guard.check(f"forward ({label})")
        alive = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        if alive:
            self.channel.send({"type": "threads", "label": label, "names": alive[:5], "count": len(alive)})
        outputs = as_outputs(out)
        bad = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if bad:
            raise WorkerFailure(Status.RUNTIME_ERROR, f"forward returned {', '.join(bad)} where tensors were expected")
        return outputs

    def _compile(self, model: Any, mode: str, device: Any) -> Any:
        """torch.compile the (weight-loaded) model; the first call, which compiles, is timed here."""
        import torch

        self._load_reference_weights(model)
        self.phase("compile")
        started = time.perf_counter()
        try:
            runner = torch.compile(model, mode=mode)
            model.eval()
            with torch.no_grad():
                runner(*[a.clone() if isinstance(a, torch.Tensor) else a for a in self._set(self.session.first.sets[0])])
            synchronize(device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.BUILD_FAILED) from None
        self.channel.send({"type": "compiled", "seconds": round(time.perf_counter() - started, 3)})
        self.end_phase()
        return runner

    def _time(self, runner: Any, sets: list[list[Any]], device: Any) -> None:
        """Warm up and profile, then time the forward over the staged sets in the rounds the parent
        asks for (in turns with the reference in the judge), then report the last timed output."""
        from harness import protocol as P

        timer, ready, last = prepare_timer(runner, sets, device, self.job, profiled=self.role != "baseline")
        self.guard.check("timing")
        self.phase_seconds["prepare"] = round(time.perf_counter() - self._phase_started, 4)
        reply = self._exchange({"type": "ready", "ready": P.encode(ready)})
        while reply.get("round") is not None:
            ask = P.decode(reply["round"])
            stats = time_round(timer, ask)
            self.guard.check("timing")
            reply = self._exchange({"type": "round", "timed": P.encode(P.RoundTimed(ask.round, stats))})
        import torch

        output = last()
        if output is not None and all(isinstance(o, torch.Tensor) for o in output) and self.role != "baseline":
            self._step("timed", 0, output, sets[0], want=("none", 0))

    def _weight_pairs(self, model: Any, policy: str) -> Optional[list[tuple[str, str]]]:
        """How the reference's weights go into ModelNew (`weight_pairs`), or None when it keeps the
        weights it built under the shared seed: check.weights is seed (KernelBench's way), or they
        pair neither by name nor by position (then `weights_by_seed` says why; the verdict is flagged)."""
        if policy == "seed":
            return None
        reference = {w.name: w.tensor for w in self.session.weights}
        own = model.state_dict()
        pairs = weight_pairs(own, reference)
        if pairs is None:
            self.channel.send({"type": "weights_by_seed", "reason": weights_problems(own, reference)[:500]})
        return pairs

    def _load_reference_weights(self, model: Any, pairs: Optional[list[tuple[str, str]]] = None) -> None:
        """The reference's state_dict (in the inputs region) into `model`: by name when the names
        match; else, when ModelNew renamed them (gamma for bn.weight, a Sequential re-indexed), by
        registration order, where every parameter and buffer pairs with one of the same shape
        (num_batches_tracked aside). The pairs are reported (`weights_mapped`); later steps name
        buffers and gradients as the reference does. No such pairing (a compile baseline whose
        weights will not load): `weights mismatch`."""
        from harness.regions import view

        reference = {w.name: view(self.inputs.tensor, w.tensor) for w in self.session.weights}
        own = model.state_dict()
        pairs = weight_pairs(own, reference) if pairs is None else pairs
        if pairs is None:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, weights_problems(own, reference)[:500])
        if pairs:
            renamed = {mine: theirs for mine, theirs in pairs if mine != theirs}
            self.reference_names = lambda name: renamed.get(name, name)
            unpaired = {k: own[k] for k in own if _counter(k) and k not in dict(pairs)}  # counters that could not pair keep their own
            reference = {mine: reference[theirs] for mine, theirs in pairs} | unpaired
            self.channel.send({"type": "weights_mapped", "pairs": sorted(renamed.items())[:200]})
        try:
            model.load_state_dict(reference, strict=True)
        except BaseException as exc:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, one_line(exc)) from None


def _counter(name: str) -> bool:
    """BatchNorm's step counter: no weight, never part of a positional pairing."""
    return name.rsplit(".", 1)[-1] == "num_batches_tracked"


def weight_pairs(own: dict[str, Any], reference: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """[] when the names and shapes match (loaded by name); the pairs by registration order and
    shape when ModelNew renamed them (`positional_mapping`); None when neither."""
    if set(own) == set(reference) and all(tuple(own[k].shape) == tuple(reference[k].shape) for k in own):
        return []
    return positional_mapping(own, reference)


def paired_gradients(grads: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The gradients to compare for a model on its own same-seed weights: the inputs', and the
    parameters' whose name and shape are in `shapes` (the other side's); the rest do not pair."""
    return {k: v for k, v in grads.items() if not k.startswith("parameter ") or shapes.get(k) == tuple(v.shape)}


def positional_mapping(own: dict[str, Any], reference: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """(own name, reference name) pairs in registration order, when both hold as many tensors
    (num_batches_tracked aside) and each pair has one shape; else None."""
    mine = [k for k in own if not _counter(k)]
    theirs = [k for k in reference if not _counter(k)]
    if len(mine) != len(theirs) or any(own[a].shape != reference[b].shape for a, b in zip(mine, theirs)):
        return None
    counters = ([k for k in own if _counter(k)], [k for k in reference if _counter(k)])
    return list(zip(mine, theirs)) + (list(zip(*counters)) if len(counters[0]) == len(counters[1]) else [])


def weights_problems(own: dict[str, Any], reference: dict[str, Any]) -> str:
    problems = []
    missing = [k for k in own if k not in reference]
    unexpected = [k for k in reference if k not in own]
    mis_shaped = [f"{k} {tuple(own[k].shape)} vs {tuple(reference[k].shape)}" for k in own if k in reference and own[k].shape != reference[k].shape]
    if missing:
        problems.append(f"missing from the reference: {', '.join(missing)}")
    if unexpected:
        problems.append(f"not in ModelNew: {', '.join(unexpected)}")
    if mis_shaped:
        problems.append(f"shape differs: {', '.join(mis_shaped)}")
    return "; ".join(problems) + "; no pairing by registration order and shape either"


def prepare_timer(runner: Any, sets: list[list[Any]], device: Any, job: dict[str, Any], *, profiled: bool) -> tuple[Any, Any, Any]:
    """One side of a paired timing, ready for its rounds: warmed up (CUDA graphs captured when
    timing.mode is graph) and, on CUDA when `profiled`, one call profiled. Returns the timer, the
    `Ready` message, and a function giving the output of the latest timed call on sets[0]."""
    import torch

    from harness import protocol as P
    from harness.pairing import device_sync_reason
    from harness.timing import Timer

    cfg = types.SimpleNamespace(**job["timing"])
    runner.eval()
    first = sets[0]
    last_output: list[Any] = []

    def timed(*args: Any) -> Any:
        # Keeps the output of the latest timed call on the first input set, so the judge can
        # check that the calls being timed still compute the answer the checked calls did.
        out = runner(*args)
        if len(args) == len(first) and all(a is b for a, b in zip(args, first)):
            last_output[:] = [out]
        return out

    profile, profile_error = None, ""
    try:
        with torch.no_grad():
            timer = Timer(timed, sets, device, cfg)
            graph_error = timer.prepare(graph=cfg.mode == "graph")
            if device.type == "cuda" and profiled:
                from harness.profile import profile_call

                try:
                    profile = profile_call(runner, first, device, timer.flush)
                except Exception as exc:
                    torch.cuda.synchronize(device)  # a device fault is the model's; anything else is the profiler's
                    profile_error = one_line(exc)
            synchronize(device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    ready = P.Ready(graph_error=graph_error, needs_device=device_sync_reason(profile), profile=profile, profile_error=profile_error)
    return timer, ready, lambda: as_outputs(last_output[0]) if last_output else None


def time_round(timer: Any, ask: Any) -> Any:
    """One round of a paired timing, as the parent asked (`TimeRound`)."""
    import torch

    try:
        with torch.no_grad():
            stats = timer.round(ask.protocol.mode, ask.protocol.sync, ask.rounds, last=ask.round == ask.rounds - 1)
            synchronize(timer.device)
    except BaseException as exc:
        raise classify(exc, Status.RUNTIME_ERROR) from None
    return stats


def model_gradients(model: Any, args: list[Any], seed: int, guard: Optional["Guard"] = None) -> tuple[str, str, dict[str, Any]]:
    """Training parity: a train-mode forward on `args` (cloned), then a backward of a fixed random
    projection of the floating outputs. Returns (status, reason, {name: gradient}) for the
    floating inputs ("input i") and every parameter ("parameter NAME"); the module's state is then
    restored, so what runs after this sees the same model."""
    import torch

    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
    inputs = [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args]
    model.train()
    model.zero_grad(set_to_none=True)
    status, reason = "ok", ""
    try:
        with torch.enable_grad():
            torch.manual_seed(seed)  # both sides: a train-mode forward that draws (dropout) draws the same
            out = model(*inputs)
            outputs = [o for o in as_outputs(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]
            if not any(o.requires_grad for o in outputs):
                status, reason = "forward only", "its outputs carry no autograd graph (the kernel has no backward)"
            else:
                loss = sum((o.float() * projection(o, seed + k)).sum() for k, o in enumerate(outputs))
                loss.backward()
        synchronize(device)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        try:
            synchronize(device)
        except BaseException:
            raise classify(exc, Status.RUNTIME_ERROR) from None  # a device fault, not a missing backward
        status, reason = "forward only", f"backward raised {one_line(exc, 200)}"
    grads = {f"input {i}": a.grad.detach() for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.requires_grad and a.grad is not None}
    grads.update({f"parameter {name}": p.grad.detach() for name, p in model.named_parameters() if p.grad is not None})
    model.load_state_dict(snapshot)
    model.zero_grad(set_to_none=True)
    if guard is not None:
        guard.check("backward")
    return status, reason, grads


def projection(output: Any, seed: int) -> Any:
    """The secret random weights of one output in the gradient check (drawn on its device)."""
    import torch

    generator = torch.Generator(device=output.device).manual_seed(seed)
    return torch.randn(tuple(output.shape), generator=generator, device=output.device)


class Guard:
    """Identities of the functions the worker's measurements and reports rely on, taken before the
    model's module is imported; a model that replaces any of them is reported as tampering."""

    def __init__(self, worker: "Worker") -> None:
        import time as time_module

        import torch

        from harness import channel, timing

        self.targets: list[tuple[str, Any, str]] = [
            ("time", time_module, "perf_counter"),
            ("time", time_module, "perf_counter_ns"),
            ("time", time_module, "time"),
            ("torch", torch, "save"),
            ("torch", torch, "load"),
            ("torch", torch, "equal"),
            ("torch", torch, "allclose"),
            ("torch.cuda", torch.cuda, "synchronize"),
            ("torch.cuda", torch.cuda, "Event"),
            ("torch.cuda", torch.cuda, "current_stream"),
            ("torch.cuda.Event", torch.cuda.Event, "record"),
            ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"),
            ("torch.cuda.Event", torch.cuda.Event, "synchronize"),
            ("torch.Tensor", torch.Tensor, "clone"),
            ("torch.Tensor", torch.Tensor, "cpu"),
            ("torch.Tensor", torch.Tensor, "to"),
            ("harness.timing", timing, "time_forward"),
            ("harness.timing.Timer", timing.Timer, "round"),
            ("harness.timing.Timer", timing.Timer, "sample"),
            ("harness.channel.ChannelWriter", channel.ChannelWriter, "send"),
            ("Worker", type(worker), "_call"),
        ]
        self.original = [getattr(owner, name) for _, owner, name in self.targets]

    def check(self, when: str) -> None:
        changed = [f"{label}.{name}" for (label, owner, name), before in zip(self.targets, self.original) if getattr(owner, name) is not before]
        if changed:
            for (_, owner, name), before in zip(self.targets, self.original):
                setattr(owner, name, before)  # restore, so the report itself goes out unaltered
            raise WorkerFailure(Status.TAMPERED, f"the model replaced {', '.join(changed[:4])} (seen after {when})")


def as_outputs(out: Any) -> list[Any]:
    """A forward's result as a list of outputs (a tuple or list of them, or a single one)."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def other_sizes(module: types.ModuleType) -> dict[str, Any]:
    """Module constants for the generalisation trial: the problem's first HARNESS_EXTRA_SIZES entry
    (e.g. [{"batch_size": 7}]), else batch_size // 2 + 1 when batch_size is an integer above 1."""
    declared = getattr(module, "HARNESS_EXTRA_SIZES", None)
    if isinstance(declared, (list, tuple)) and declared and isinstance(declared[0], dict):
        return dict(declared[0])
    batch = getattr(module, "batch_size", None)
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 1:
        return {"batch_size": batch // 2 + 1}
    return {}


STRUCTURES = ("0/1 mask", "integer-valued", "rows on the simplex", "upper-triangular", "lower-triangular", "zero pattern", "symmetric", "sorted", "non-negative")


def structure(value: Any) -> tuple[str, ...]:
    """What the problem's get_inputs() guarantees about a floating input, read from one draw:
    the invariants of STRUCTURES that hold exactly (sums to 1 within 1e-3). A draw of randn or
    rand holds none but non-negativity (rand), so unconstrained inputs are left unconstrained."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() < 4:
        return ()
    square = value.dim() >= 2 and value.shape[-1] == value.shape[-2] and value.shape[-1] > 1
    v = _probe(value.detach())
    found: list[str] = []
    if bool(((v == 0) | (v == 1)).all()):
        return ("0/1 mask",)
    if bool((v == v.round()).all()):
        return ("integer-valued",)
    non_negative = bool((v >= 0).all())
    if non_negative and v.dim() >= 1 and v.shape[-1] > 1 and bool(((v.float().sum(-1) - 1).abs() < 1e-3).all()):
        found.append("rows on the simplex")
    if square and bool((torch.tril(v, -1) == 0).all()):
        found.append("upper-triangular")
    elif square and bool((torch.triu(v, 1) == 0).all()):
        found.append("lower-triangular")
    elif float((v == 0).float().mean()) >= 0.01:
        found.append("zero pattern")
    if square:
        block = v[..., : v.shape[-2]]  # the leading square block of a probe that holds only the first rows
        if bool((block == block.transpose(-1, -2)).all()):
            found.append("symmetric")
    if v.shape[-1] > 1 and bool((v.diff(dim=-1) >= 0).all()):
        found.append("sorted")
    if non_negative:
        found.append("non-negative")
    return tuple(found)


PROBE_ELEMENTS = 1 << 24  # elements `structure` reads of a large input: its leading rows or matrices


def _probe(value: Any) -> Any:
    """A view of the leading rows (or matrices) of `value`, at most PROBE_ELEMENTS elements: a
    GB-sized input is judged by its first part, with no copy of the whole."""
    if value.numel() <= PROBE_ELEMENTS:
        return value
    if value.dim() >= 3:
        matrices = value.flatten(0, -3)
        return matrices[: max(1, PROBE_ELEMENTS // matrices[0].numel())]
    if value.dim() == 2:
        return value[: max(1, PROBE_ELEMENTS // value.shape[1])]
    return value[:PROBE_ELEMENTS]


def redistribute(value: Any, distribution: str, seed: int, keep: tuple[str, ...] = ()) -> Any:
    """A floating input tensor drawn again from `distribution` (same shape, dtype and device), so
    a kernel cannot rely on the one distribution a problem's get_inputs happens to use:
    given (unchanged), normal (standard normal), signed (uniform in [-2, 2)), shifted (plus 3).
    `keep`: the input's structure (harness.worker.structure), which the redraw keeps: a mask or
    integer values are not redrawn; otherwise the fresh values are made non-negative (|x|, or
    uniform in [0, 4)), put on the simplex (softmax), given the zero pattern, symmetrised or sorted."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or distribution == "given" or "0/1 mask" in keep or "integer-valued" in keep:
        return value
    generator = torch.Generator(device=value.device).manual_seed(seed)
    if distribution == "normal" or (distribution == "shifted" and "rows on the simplex" in keep):
        fresh = torch.randn(value.shape, generator=generator, device=value.device)
    elif distribution == "signed":
        fresh = torch.rand(value.shape, generator=generator, device=value.device).mul_(4).sub_(0 if "non-negative" in keep else 2)
    elif distribution == "shifted":
        fresh = value.float() + 3
    else:
        raise ValueError(f"unknown input distribution {distribution!r}")
    if "non-negative" in keep:
        fresh = fresh.abs()
    if "rows on the simplex" in keep:
        fresh = torch.softmax(fresh.float(), dim=-1)
    if "symmetric" in keep:
        fresh = (fresh + fresh.transpose(-1, -2)) / 2
    if keep and {"upper-triangular", "lower-triangular", "zero pattern"} & set(keep):
        fresh = torch.where(value == 0, torch.zeros((), dtype=fresh.dtype, device=fresh.device), fresh)
    if "sorted" in keep:
        fresh = fresh.sort(dim=-1).values
    return fresh.to(dtype=value.dtype, device=value.device)


def randomize_state(model: Any, seed: int) -> None:
    """Move every floating parameter and buffer away from its default initialisation (a GroupNorm
    with weight 1 and bias 0 lets a kernel skip the affine step): signed normal values of the
    tensor's own magnitude; buffers that were non-negative (running variances) stay positive."""
    import torch

    generator = torch.Generator().manual_seed(seed ^ 0x5EED)
    with torch.no_grad():
        for kind, tensors in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
            for _, t in tensors:
                if not t.is_floating_point() or t.numel() == 0:
                    continue
                scale = float(t.detach().abs().float().mean()) or 1.0
                if kind == "buffer" and bool((t >= 0).all()):
                    fresh = torch.rand(t.shape, generator=generator) * scale + 0.5 * scale
                else:
                    fresh = torch.randn(t.shape, generator=generator) * scale
                t.copy_(fresh.to(t.dtype))


def _delta(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Calls into each extension function since `before` (functions built since count from zero)."""
    return {name: count - before.get(name, 0) for name, count in now.items()}


def _aliased_input(output: Any, inputs: list[Any]) -> int:
    """Index of the first input whose memory `output`'s memory overlaps, or -1. Spans, not
    storages: inputs are views into one shared region."""
    import torch

    start, end = _span(output)
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            other_start, other_end = _span(value)
            if end > start and other_end > other_start and start < other_end and other_start < end:
                return index
    return -1


def _span(tensor: Any) -> tuple[int, int]:
    """The bytes a tensor's elements lie in: [first, last + 1)."""
    if tensor.numel() == 0:
        return 0, 0
    low = high = 0
    for size, stride in zip(tensor.shape, tensor.stride()):
        extent = (size - 1) * stride
        if extent < 0:
            low += extent
        else:
            high += extent
    base, item = tensor.data_ptr(), tensor.element_size()
    return base + low * item, base + (high + 1) * item


def preload() -> None:
    """What every job needs, imported before the job is read: a prestarted worker waits with these
    loaded. Nothing here touches the GPU (no CUDA context before the job names the device)."""
    import torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    import harness.buildcache  # noqa: F401
    import harness.records  # noqa: F401
    import harness.timing  # noqa: F401


PREWARM = "HARNESS_PREWARM"  # "cuda": a prestarted worker of a CUDA lane readies the device while it waits


def prewarm_cuda() -> None:
    """The CUDA context and the profiler's CUPTI start-up (seconds, once per process), done while a
    prestarted worker waits for its job, so they leave the job's critical path. Harness code only:
    no model code has run, and every job still gets a process of its own. A failure is ignored:
    the job then sets the device up itself and reports any fault."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        if not torch.cuda.is_available():
            return
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        scratch = torch.zeros(1, device=device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            scratch.add_(1)
            torch.cuda.synchronize(device)
        del scratch
    except Exception:
        pass


def main() -> None:
    preload()
    if os.environ.get(PREWARM) == "cuda":
        prewarm_cuda()
    text = sys.stdin.buffer.readline()
    if not text.strip():  # the parent went away, or no longer needs this prestarted worker
        os._exit(0)
    job = json.loads(text)
    # The parent's go-ahead after each step arrives on stdin; the model's code gets /dev/null there.
    acks = os.fdopen(os.dup(0), "rb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.chdir(job.pop("cwd"))
    channel = ChannelWriter(job.pop("result_fd"), job.pop("key"))
    try:
        Worker(job, channel, acks).run()
    except WorkerFailure as failure:
        channel.send({"type": "error", "status": failure.status.value, "reason": failure.reason})
    except BaseException as exc:  # a bug in the harness, or a failure the phases did not classify
        traceback.print_exc()
        channel.send({"type": "error", "status": Status.HARNESS_ERROR.value, "reason": one_line(exc)})
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads or atexit hooks the model left behind must not keep the worker alive or change its exit.
    os._exit(0)


if __name__ == "__main__":
    main()
