"""The worker subprocess: runs one model (the problem's reference or one candidate) and reports.

Started by `harness.supervise` as `python -m harness.worker`; it imports torch, then reads its job
as JSON on stdin (so a worker can be started ahead of its job).
It never decides a verdict: it loads the module (building inline extensions through the
content-addressed cache), constructs the model, runs the forward calls the parent planned on the
inputs it was given, writes the outputs to files, times the forward, and reports each step on the
authenticated result channel. Anything it prints goes to a log, never into the results.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

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
    return WorkerFailure(default, one_line(exc))


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
    import torch

    if not isinstance(a, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return torch.equal(a, b)


class Worker:
    def __init__(self, job: dict[str, Any], channel: ChannelWriter) -> None:
        self.job = job
        self.channel = channel
        self.role: str = job["role"]
        self.exchange = Path(job["exchange"])
        self.outputs = Path(job["outputs"])
        self.phase_seconds: dict[str, float] = {}
        self.other_size: dict[str, Any] = {}

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

        job = self.job
        self.phase("load")
        torch.backends.cuda.matmul.allow_tf32 = bool(job["allow_tf32"])
        torch.backends.cudnn.allow_tf32 = bool(job["allow_tf32"])
        device = torch.device("cuda", 0) if job["device"] == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise WorkerFailure(Status.NEEDS_CUDA, "the run asked for CUDA and the worker sees no CUDA device")
            torch.cuda.set_device(device)
            major, minor = torch.cuda.get_device_capability(device)
            arch = f"{major}.{minor}"
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch  # build for this GPU only: faster, and part of the key
            device_name = torch.cuda.get_device_name(device)
        else:
            arch = "cpu"
            from harness.environment import cpu_name

            device_name = cpu_name()
            if job["cpu_threads"]:
                torch.set_num_threads(job["cpu_threads"])

        from harness.buildcache import BuildCache

        cache = BuildCache(
            Path(job["build_cache"]), arch,
            around_build=self._around_build,
            on_event=lambda event: self.channel.send({"type": "builds", "builds": [event]}),
        )
        cache.install()
        self.guard = Guard(self)
        module = load_module(Path(job["source"]), f"__{self.role}__")
        self.guard.check("import")
        model_class = getattr(module, job["class_name"], None)
        if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
            raise WorkerFailure(Status.INTERFACE_ERROR, f"the module defines no nn.Module subclass named {job['class_name']}")
        self.end_phase()

        self.phase("construct")
        if self.role == "reference":
            init_args, arg_sets = self._write_reference_inputs(module)
        else:
            init_args = torch.load(self.exchange / "init_args.pt", weights_only=False)
            arg_sets = [torch.load(self.exchange / f"inputs_{i}.pt", weights_only=False) for i in range(job["n_inputs"])]
        try:
            torch.manual_seed(job["construct_seed"])
            model = model_class(*init_args)
            model = model.to(device)
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        self.guard.check("construction")
        if self.role == "reference" and job.get("other_size_trial") is not None:
            self._probe_other_size(module, model, arg_sets, device)
        self.end_phase()

        runner = model
        if job.get("compile_mode"):
            runner = self._compile(model, job["compile_mode"], arg_sets[0], device)

        self.phase("check")
        with torch.no_grad():
            if self.role != "baseline":
                model.eval()
                self._call(model, arg_sets[job["same_seed_input"]], device, "same_seed")
                if self.role == "reference":
                    if job.get("randomize_weights"):
                        randomize_state(model, job["construct_seed"])
                    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, self.exchange / "state_dict.pt")
                else:
                    self._load_reference_weights(model)
            reused: list[Any] = []
            for index, call in enumerate(job["calls"]):
                model.train(call["mode"] == "train")
                # Every call after the first gets its inputs written into the tensors of the call
                # before (same objects, same addresses, new values): an answer memoised by input
                # identity or address comes back stale and fails the comparison.
                reused = _refill(reused, arg_sets[call["input"]], device)
                self._call(runner, reused, device, f"call_{index}", fresh_inputs=False)
                if self.role == "reference" and index == job.get("precision_call"):
                    self._call_float64(model, reused, f"call_{index}.f64")
                self.channel.send({"type": "call", "index": index})
            torch.save({k: v.detach().cpu() for k, v in model.named_buffers()}, self.outputs / "buffers.pt")
        if job.get("gradients") and self.role != "baseline":
            self._gradients(model, arg_sets[job["same_seed_input"]], device, job["gradient_seed"])
        self.end_phase()

        if job.get("timing") is not None or job.get("speed_of_light") is not None:
            self.phase("time")
            if job.get("timing") is not None:
                timed_sets = arg_sets[: job.get("timed_inputs") or len(arg_sets)]  # never the other-size trial
                self._time(runner, [[_to(a, device) for a in args] for args in timed_sets], device)
            if job.get("speed_of_light") is not None:
                self._speed_of_light(model, [_to(a, device) for a in arg_sets[0]], device)
            self.end_phase()

        self.channel.send({"type": "done", "device_name": device_name, "phase_seconds": self.phase_seconds})

    def _compile(self, model: Any, mode: str, args: list[Any], device: Any) -> Any:
        """torch.compile the (weight-loaded) model; the first call, which compiles, is timed here."""
        import torch

        self._load_reference_weights(model)
        self.phase("compile")
        started = time.perf_counter()
        try:
            runner = torch.compile(model, mode=mode)
            model.eval()
            with torch.no_grad():
                runner(*[_to(a, device) for a in args])
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.BUILD_FAILED) from None
        self.channel.send({"type": "compiled", "seconds": round(time.perf_counter() - started, 3)})
        self.end_phase()
        return runner

    def _time(self, runner: Any, on_device: list[list[Any]], device: Any) -> None:
        """Time the forward; on CUDA profile one call, and re-time with a device-wide synchronise
        when that call ran work on other streams or after it returned (timing.sync auto)."""
        import dataclasses

        import torch

        from harness.records import to_dict
        from harness.timing import flush_buffer, time_forward

        job = self.job
        cfg = types.SimpleNamespace(**job["timing"])
        sync = job["sync"]
        runner.eval()
        profile, profile_error = None, ""
        first = on_device[0]
        last_output: list[Any] = []

        def timed(*args: Any) -> Any:
            # Keeps the output of the latest timed call on the first input set, so the parent can
            # check that the calls being timed still compute the answer the checked calls did.
            out = runner(*args)
            if len(args) == len(first) and all(a is b for a, b in zip(args, first)):
                last_output[:] = [out]
            return out

        try:
            with torch.no_grad():
                stats = time_forward(timed, on_device, device, cfg, sync="device" if sync == "device" else "stream")
                self.phase_seconds["timer"] = round(time.perf_counter() - self._phase_started, 4)
                if device.type == "cuda" and self.role != "baseline":
                    from harness.profile import profile_call

                    profiling = time.perf_counter()
                    try:
                        profile = profile_call(runner, on_device[0], device, flush_buffer(device) if cfg.flush_l2 else None)
                    except Exception as exc:
                        torch.cuda.synchronize(device)  # a device fault is the model's; anything else is the profiler's
                        profile_error = one_line(exc)
                    self.phase_seconds["profile"] = round(time.perf_counter() - profiling, 4)
                    if profile is not None and sync == "auto" and (profile.streams > 1 or profile.after_return or profile.busy_after_return):
                        why = []
                        if profile.streams > 1:
                            why.append(f"the profiled call ran GPU work on {profile.streams} streams")
                        if profile.after_return:
                            why.append(f"{profile.after_return} GPU activities were launched after forward returned")
                        stats = time_forward(timed, on_device, device, cfg, sync="device")
                        stats = dataclasses.replace(stats, sync_reason="; ".join(why))
        except BaseException as exc:
            raise classify(exc, Status.RUNTIME_ERROR) from None
        self.guard.check("timing")
        if last_output:
            out = last_output[0]
            outputs = as_outputs(out)
            if all(isinstance(o, torch.Tensor) for o in outputs):
                torch.save(_output_record(outputs, first), self.outputs / "timed.pt")
        self.channel.send({"type": "timing", "stats": to_dict(stats), "profile": to_dict(profile), "profile_error": profile_error})

    def _speed_of_light(self, model: Any, args: list[Any], device: Any) -> None:
        """FLOPs and bytes of one forward, against this device's measured peaks (reference only)."""
        import torch

        from harness.records import to_dict
        from harness.roofline import count_work, device_peaks, floor

        try:
            model.eval()
            work = count_work(model, args)
            peaks = device_peaks(device, work.dtype, Path(self.job["speed_of_light"]["cache_dir"]))
            self.channel.send({"type": "speed_of_light", "sol": to_dict(floor(work, peaks))})
        except Exception as exc:  # the floor is extra information; its failure is reported, not fatal
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.channel.send({"type": "speed_of_light", "error": one_line(exc)})

    def _gradients(self, model: Any, args: list[Any], device: Any, seed: int) -> None:
        """Training parity: a train-mode forward on trial 1's inputs, then a backward of a fixed
        random projection of the floating outputs. The gradients of the floating inputs and of every
        parameter (by name) go to grads.pt; the module's state is then restored, so the checks and
        timings after this see the same model."""
        import torch

        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        inputs = [_to(a, device).detach().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else _to(a, device) for a in args]
        model.train()
        model.zero_grad(set_to_none=True)
        status, reason = "ok", ""
        try:
            with torch.enable_grad():
                out = model(*inputs)
                outputs = [o for o in as_outputs(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]
                if not any(o.requires_grad for o in outputs):
                    status, reason = "forward only", "its outputs carry no autograd graph (the kernel has no backward)"
                else:
                    generator = torch.Generator().manual_seed(seed)
                    loss = sum((o.float() * torch.randn(tuple(o.shape), generator=generator).to(o.device)).sum() for o in outputs)
                    loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            if device.type == "cuda":
                try:
                    torch.cuda.synchronize(device)
                except BaseException:
                    raise classify(exc, Status.RUNTIME_ERROR) from None  # a device fault, not a missing backward
            status, reason = "forward only", f"backward raised {one_line(exc, 200)}"
        grads = {f"input {i}": a.grad.detach().cpu() for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.requires_grad and a.grad is not None}
        grads.update({f"parameter {name}": p.grad.detach().cpu() for name, p in model.named_parameters() if p.grad is not None})
        torch.save({"status": status, "reason": reason, "tensors": grads}, self.outputs / "grads.pt")
        model.load_state_dict(snapshot)
        model.zero_grad(set_to_none=True)
        self.guard.check("backward")

    def _write_reference_inputs(self, module: types.ModuleType) -> tuple[list[Any], list[list[Any]]]:
        """Make the init args and input sets from the problem's seeds, save them for candidates, return them."""
        import torch

        for name in ("get_inputs", "get_init_inputs"):
            if not callable(getattr(module, name, None)):
                raise WorkerFailure(Status.INTERFACE_ERROR, f"the problem defines no {name}()")
        try:
            init_args = list(module.get_init_inputs())
            torch.save(init_args, self.exchange / "init_args.pt")
            arg_sets = []
            distributions = self.job.get("input_distributions") or ["given"] * len(self.job["input_seeds"])
            other = self.job.get("other_size_trial")
            for index, (seed, distribution) in enumerate(zip(self.job["input_seeds"], distributions)):
                sizes = other_sizes(module) if index == other else {}
                arg_sets.append(self._inputs(module, seed, distribution, sizes))
                torch.save(arg_sets[-1], self.exchange / f"inputs_{index}.pt")
                if index == other:
                    self.other_size = sizes
            return init_args, arg_sets
        except WorkerFailure:
            raise
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None

    def _call_float64(self, model: Any, args: list[Any], label: str) -> None:
        """The same call on a float64 copy of the model and inputs: the yardstick for precision.
        A model that cannot run in float64 is reported and skipped, never failed."""
        import copy

        import torch

        try:
            twin = copy.deepcopy(model).double()
            twin.train(model.training)
            wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            with torch.no_grad():
                out = twin(*wide)
            outputs = as_outputs(out)
            torch.save(_output_record(outputs, wide), self.outputs / f"{label}.pt")
            del twin, out, outputs
        except Exception as exc:
            self.channel.send({"type": "float64_skipped", "reason": one_line(exc)})

    def _inputs(self, module: types.ModuleType, seed: int, distribution: str, sizes: dict[str, Any]) -> list[Any]:
        """get_inputs() after manual_seed(seed), with module constants overridden by `sizes`."""
        import torch

        saved = {name: getattr(module, name) for name in sizes}
        try:
            for name, value in sizes.items():
                setattr(module, name, value)
            torch.manual_seed(seed)
            return [redistribute(a, distribution, seed + position) for position, a in enumerate(module.get_inputs())]
        finally:
            for name, value in saved.items():
                setattr(module, name, value)

    def _probe_other_size(self, module: types.ModuleType, model: Any, arg_sets: list[list[Any]], device: Any) -> None:
        """The reference must run at the other size; if it cannot, that trial falls back to the
        problem's own size (and the parent is told), rather than failing the reference."""
        import torch

        index = self.job["other_size_trial"]
        note = ""
        if not self.other_size:
            note = "the problem declares no HARNESS_EXTRA_SIZES and has no integer batch_size above 1"
        else:
            training = model.training
            try:
                model.eval()
                with torch.no_grad():
                    model(*[_to(a, device) for a in arg_sets[index]])
            except Exception as exc:
                note = f"the reference fails at {self.other_size} ({one_line(exc)})"
            finally:
                model.train(training)
        if note:
            seed = self.job["input_seeds"][index]
            arg_sets[index] = self._inputs(module, seed, self.job["input_distributions"][index], {})
            torch.save(arg_sets[index], self.exchange / f"inputs_{index}.pt")
        self.channel.send({"type": "other_size", "sizes": {} if note else self.other_size, "note": note})

    def _load_reference_weights(self, model: Any) -> None:
        import torch

        reference = torch.load(self.exchange / "state_dict.pt", weights_only=True)
        own = model.state_dict()
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
        if problems:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, "; ".join(problems)[:500])
        try:
            model.load_state_dict(reference, strict=True)
        except BaseException as exc:
            raise WorkerFailure(Status.WEIGHTS_MISMATCH, one_line(exc)) from None

    def _call(self, model: Any, args: list[Any], device: Any, label: str, fresh_inputs: bool = True) -> None:
        import threading

        import torch

        on_device = [_to(a, device) for a in args] if fresh_inputs else list(args)
        pristine = [a.clone() if isinstance(a, torch.Tensor) else a for a in on_device]
        threads_before = set(threading.enumerate())
        try:
            out = model(*on_device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify(exc, Status.RUNTIME_ERROR) from None
        self.guard.check(f"forward ({label})")
        alive = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        if alive:
            self.channel.send({"type": "threads", "label": label, "names": alive[:5], "count": len(alive)})
        for position, (before, after) in enumerate(zip(pristine, on_device)):
            if not same_bits(before, after):
                raise WorkerFailure(Status.MUTATED_INPUT, f"forward changed input {position} in place ({label})")
        outputs = as_outputs(out)
        bad = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if bad:
            raise WorkerFailure(Status.RUNTIME_ERROR, f"forward returned {', '.join(bad)} where tensors were expected")
        torch.save(_output_record(outputs, on_device), self.outputs / f"{label}.pt")


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


def redistribute(value: Any, distribution: str, seed: int) -> Any:
    """A floating input tensor drawn again from `distribution` (same shape, dtype and device), so
    a kernel cannot rely on the one distribution a problem's get_inputs happens to use:
    given (unchanged), normal (standard normal), signed (uniform in [-2, 2)), shifted (plus 3)."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or distribution == "given":
        return value
    generator = torch.Generator().manual_seed(seed)
    if distribution == "normal":
        fresh = torch.randn(value.shape, generator=generator)
    elif distribution == "signed":
        fresh = torch.rand(value.shape, generator=generator) * 4 - 2
    elif distribution == "shifted":
        return value + 3
    else:
        raise ValueError(f"unknown input distribution {distribution!r}")
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


def _refill(previous: list[Any], args: list[Any], device: Any) -> list[Any]:
    """The input set `args` on `device`, written into `previous`'s tensors where shapes allow."""
    import torch

    out = []
    for index, value in enumerate(args):
        old = previous[index] if index < len(previous) else None
        if isinstance(value, torch.Tensor) and isinstance(old, torch.Tensor) and old.shape == value.shape and old.dtype == value.dtype:
            old.copy_(value)
            out.append(old)
        else:
            out.append(_to(value, device))
    return out


def _output_record(outputs: list[Any], inputs: list[Any]) -> dict[str, Any]:
    """What the parent compares: each output's type and values (on the CPU), layout, device, and
    which input (if any) it shares memory with."""
    import torch

    return {
        "types": [type(o).__name__ for o in outputs],
        "tensors": [o.detach().as_subclass(torch.Tensor).cpu() for o in outputs],
        "layouts": [str(o.layout) for o in outputs],
        "devices": [o.device.type for o in outputs],
        "aliases": [_aliased_input(o, inputs) for o in outputs],
    }


def _aliased_input(output: Any, inputs: list[Any]) -> int:
    """Index of the first input whose storage `output` shares, or -1."""
    import torch

    storage = output.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            other = value.untyped_storage()
            if size and other.nbytes() and start < other.data_ptr() + other.nbytes() and other.data_ptr() < start + size:
                return index
    return -1


def _to(value: Any, device: Any) -> Any:
    import torch

    return value.to(device).clone() if isinstance(value, torch.Tensor) else value


def preload() -> None:
    """What every job needs, imported before the job is read: a prestarted worker waits with these
    loaded. Nothing here touches the GPU (no CUDA context before the job names the device)."""
    import torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    import harness.buildcache  # noqa: F401
    import harness.records  # noqa: F401
    import harness.timing  # noqa: F401


def main() -> None:
    preload()
    text = sys.stdin.read()
    if not text.strip():  # the parent went away, or no longer needs this prestarted worker
        os._exit(0)
    job = json.loads(text)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.chdir(job.pop("cwd"))
    channel = ChannelWriter(job.pop("result_fd"), job.pop("key"))
    try:
        Worker(job, channel).run()
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
