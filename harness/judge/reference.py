"""The problem's reference model in the judge (harness.judge.service): loaded from the problem's own code,
constructed under the run's secret seed, run once through the plan, then called step by step in
lock-step with compared workers.

`Reference` owns the problem's module and model, the weights the model starts from (the same-seed
ones and the redrawn ones the plan's calls run with), each trial's inputs made on the device from
the secret seeds, the reference's forward, its float64 twin (the yardstick of precision) and its
peak memory. The functions below measure tensors and device memory, for it and for the judge.
"""

from __future__ import annotations

import copy
import os
import resource
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Device, Distribution, ModuleMode
from harness.core.errors import one_line
from harness.core.status import Backward, Status
from harness.device.checks import model_gradients
from harness.device.failures import WorkerFailure, classify, load_module
from harness.device.inputs import (
    aliased_input,
    as_outputs,
    other_sizes,
    randomize_state,
    redistribute,
    structure,
)
from harness.device.regions import layout
from harness.device.setup import synchronize
from harness.judge.compare import output_rms
from harness.judge.degenerate import NoiseScan, OverflowScan


class Reference:
    """The problem's reference model on the judge's device, and the inputs it is called on."""

    def __init__(self, job: P.JudgeJob, device: torch.device) -> None:
        self.job = job
        self.device = device
        self.module: Any = None  # the problem's module
        self.model_class: Any = None
        self.model: Any = None
        self.init_args: list[Any] = []
        self.initial: dict[str, Any] = {}  # the state constructed under the construct seed
        self.randomized: dict[str, Any] = {}  # the state the plan's calls run with (redrawn when the job asks)
        # per input: what get_inputs() guarantees (worker.inputs.structure)
        self.structures: Optional[list[tuple[str, ...]]] = None
        self.other: dict[str, Any] = {}
        self.other_note = ""
        self.float64_note = ""
        # the outputs that are rounding noise on every planned call (the float64 twin's finding)
        self.noise = NoiseScan()
        self.same_seed_noise = NoiseScan()  # the same on the same-seed call (the initial weights)
        self.gradients_note = ""  # why the gradient check is skipped, when it is
        self.set_bytes = 0  # the largest input set of the plan
        self.forward_peak = 0  # the reference alone at its peak: what must fit beside a worker
        self.output_bytes = 0  # the last forward's outputs
        self.peak_floor = 0  # the peak before the float64 twin ran (its memory is not the reference's)
        self.overflow = OverflowScan()  # trials whose redraw overflows it: they draw as the problem does

    def import_problem(self) -> None:
        """Load the problem's module; it must define Model (an nn.Module), get_inputs and get_init_inputs."""
        self.module = load_module(Path(self.job.source), "__reference__", self.job.source_text)
        model_class = getattr(self.module, "Model", None)
        if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
            raise WorkerFailure(Status.INTERFACE_ERROR, "the module defines no nn.Module subclass named Model")
        for name in ("get_inputs", "get_init_inputs"):
            if not callable(getattr(self.module, name, None)):
                raise WorkerFailure(Status.INTERFACE_ERROR, f"the problem defines no {name}()")
        self.model_class = model_class

    def construct(self) -> None:
        """The model under the construct seed (its state kept as `initial`), the other size probed,
        then its weights redrawn when the job asks (kept as `randomized`)."""
        job = self.job
        if self.device.type == Device.CUDA:
            torch.cuda.reset_peak_memory_stats(self.device)
        try:
            self.init_args = list(self.module.get_init_inputs())
            torch.manual_seed(job.construct_seed)
            self.model = self.model_class(*self.init_args).to(self.device)
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        self.initial = snapshot(self.model)
        self.probe_other_size()
        if job.randomize_weights:
            randomize_state(self.model, job.construct_seed)
        self.randomized = snapshot(self.model)

    def run_plan(self) -> list[int]:
        """Every step of the plan once: the reference must run, and the mailbox must hold the
        largest step's outputs. Returns each step's output bytes; sets self.set_bytes (the largest
        input set: every trial, the other-size one too, has calls in the plan)."""
        job = self.job
        sizes = []
        self.set_bytes = 0
        try:
            with torch.no_grad():
                self.model.eval()
                self.load(self.initial)  # the same-seed call's state
                # also what the float64 twin's outputs will need
                sizes.append(output_bytes(self.forward(self.inputs(0))))
                scanned(self, self.same_seed_noise, self.inputs(0), probe=False)
                self.load(self.randomized)
                for index, call in enumerate(job.calls):
                    self.model.train(call.module_mode == ModuleMode.TRAIN)
                    args = self.inputs(call.input)
                    self.set_bytes = max(self.set_bytes, layout(tensors_of(args))[1])
                    sizes.append(output_bytes(planned(self, call, args, probe=index == job.precision_call)))
                sizes.append(output_bytes([b for _, b in self.model.named_buffers()]))
            self.forward_peak = self.peak()  # the reference alone: what must fit beside a worker
            if job.gradients:
                status, reason, grads = model_gradients(self.model, self.inputs(0), job.gradient_seed)
                sizes.append(output_bytes(list(grads.values())))
                del grads
                release(self.device)
                if status is not Backward.RAN:  # e.g. its backward does not fit: no verdict rather than a wrong one
                    self.gradients_note = (
                        f"the gradient check is skipped: the reference's own backward fails ({reason})"
                    )
        except WorkerFailure:
            raise
        except BaseException as exc:
            raise classify(exc, Status.RUNTIME_ERROR) from None
        return sizes

    def probe_other_size(self) -> None:
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
                self.model(*self.inputs(index))
            synchronize(self.device)
        except Exception as exc:
            synchronize(self.device)
            self.other_note = f"the reference fails at {self.other} ({one_line(exc)})"
            self.other = {}

    def float64(self, args: list[Any]) -> Optional[list[Any]]:
        """The reference's call in float64 (a copy of the model in its current state): the
        yardstick of precision. None when it would not fit beside what is held now."""
        if self.float64_note:
            return None
        need = 2 * (twin_bytes(self.model, args) + self.output_bytes)
        if need > free_memory(self.device):
            self.float64_note = f"the float64 twin needs about {need / 2**30:.1f} GiB, more than is free"
            return None
        return twin_call(self, args, lambda t: t.double() if t.is_floating_point() else t)

    def inputs(self, trial: int) -> list[Any]:
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
                raw = self.problem_inputs()
            args = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in raw]
            if self.structures is None:  # read once, from the first draw: the problem's guarantees
                self.structures = [structure(a) for a in args]
            keep = self.structures + [()] * (len(args) - len(self.structures))
            distribution = Distribution.GIVEN if trial in self.overflow.trials else job.distributions[trial]
            return [redistribute(a, distribution, seed + position, keep[position]) for position, a in enumerate(args)]
        except BaseException as exc:
            raise classify(exc, Status.CONSTRUCT_FAILED) from None
        finally:
            for name, value in saved.items():
                setattr(self.module, name, value)

    def problem_inputs(self) -> list[Any]:
        """What the problem's get_inputs() returns; its failure is named as such."""
        try:
            return list(self.module.get_inputs())
        except BaseException as exc:
            failure = classify(exc, Status.CONSTRUCT_FAILED)
            raise WorkerFailure(failure.status, failure.reason, "get_inputs failed") from None

    def forward(self, args: list[Any], aliases: bool = False) -> dict[str, Any]:
        """The reference's outputs on `args`, as the record compare_outputs reads."""
        try:
            out = as_outputs(self.model(*args))
            synchronize(self.device)
        except BaseException as exc:
            raise classify(exc, Status.RUNTIME_ERROR) from None
        self.output_bytes = nbytes(tensors_of(out))
        return {
            "types": [type(o).__name__ for o in out],
            "tensors": [o.detach().as_subclass(torch.Tensor) if isinstance(o, torch.Tensor) else o for o in out],
            "layouts": [str(o.layout) if isinstance(o, torch.Tensor) else "" for o in out],
            "devices": [o.device.type if isinstance(o, torch.Tensor) else "" for o in out],
            "aliases": [aliased_input(o, args) if isinstance(o, torch.Tensor) else -1 for o in out],
        }

    def load(self, state: dict[str, Any]) -> None:
        """Copy `state` (initial or randomized) into the model."""
        with torch.no_grad():
            own = self.model.state_dict()
            for key, value in state.items():
                own[key].copy_(value)

    def peak(self) -> int:
        """The peak memory so far: the device's allocator on a GPU, the process's on the CPU."""
        if self.device.type == Device.CUDA:
            return max(self.peak_floor, int(torch.cuda.max_memory_allocated(self.device)))
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def planned(reference: Reference, call: P.Call, args: list[Any], probe: bool) -> dict[str, Any]:
    """The reference's forward on one call of the plan, `scanned`; where the call's redraw overflows the reference
    (`OverflowScan`), again on the problem's own distribution, which its trial uses from then on."""
    levels = None if reference.noise.levels is None else dict(reference.noise.levels)
    out = scanned(reference, reference.noise, args, probe)
    if reference.overflow.observe(call, out["tensors"]):
        reference.noise.levels = levels  # the overflowing call is not one of the plan's
        out = scanned(reference, reference.noise, reference.inputs(call.input), probe=False)
    return out


def scanned(reference: Reference, scan: NoiseScan, args: list[Any], probe: bool) -> dict[str, Any]:
    """The reference's forward on `args`. Before it, while `scan` is open (or to `probe` whether the
    twin runs at all: why not, in float64_note), the float64 twin on the same state and inputs,
    whose outputs' sizes `scan` observes. The twin is optional (skipped where it would not fit):
    its memory is not the reference's."""
    exact: Optional[list[float]] = None
    if scan.open or probe:
        before = reference.peak()
        try:
            wide = reference.float64(args)
            exact = output_rms(wide) if wide is not None else None
            del wide
        except Exception as exc:
            reference.float64_note = f"the float64 twin cannot run: {one_line(exc)}"
        reference.peak_floor = before
        if reference.device.type == Device.CUDA:
            torch.cuda.reset_peak_memory_stats(reference.device)
    out = reference.forward(args)
    if scan.open:
        scan.observe(out["tensors"], exact)
    return out


def tf32(value: torch.Tensor) -> torch.Tensor:
    """A float32 tensor cut to TF32's 10-bit mantissa toward zero (the low 13 bits dropped), as tensor
    cores read a float32 operand; other dtypes unchanged. A conversion to nearest first (cvt.rna) gives
    less error, so this is the most error honest TF32 arithmetic has: on non-negative inputs the cut's
    bias adds up over a long inner dimension, to about 100 times rounding to nearest at 4096."""
    if value.dtype != torch.float32:
        return value
    return (value.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32).view(value.shape)


def in_tf32(reference: Reference, args: list[Any]) -> Optional[tuple[list[Any], int]]:
    """The reference's call in float32 on its inputs, weights and buffers cut to TF32 (a copy of
    the model in its current state), with TF32 on for its matrix multiplies and convolutions (a CUDA
    device's: every layer's operands are then TF32, as in a TF32 kernel, not only the first layer's),
    and the matrix-multiply and convolution FLOPs it ran: the error that TF32 gives this problem,
    against which a failed candidate's error is read (harness.core.integrity). None when it would not
    fit beside what is held now."""
    from torch.utils.flop_counter import FlopCounterMode

    if twin_bytes(reference.model, args) + reference.output_bytes > free_memory(reference.device):
        return None
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if reference.device.type == Device.CUDA:  # the CPU has no TF32 (its float32 precision is left alone)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        with FlopCounterMode(display=False) as counter:
            out = twin_call(reference, args, tf32)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    return out, int(counter.get_total_flops())


def twin_bytes(model: Any, args: list[Any]) -> int:
    """The bytes of `args`' tensors and of the model's state: what a twin of the call copies."""
    return nbytes(tensors_of(args)) + sum(p.numel() * p.element_size() for p in model.state_dict().values())


def twin_call(reference: Reference, args: list[Any], cast: Callable[[torch.Tensor], torch.Tensor]) -> list[Any]:
    """The reference's call on a copy of its model in its current state (mode included), with `cast` applied to
    the copy's parameters and buffers and to the input tensors: its float64 twin, its TF32 one."""
    twin = copy.deepcopy(reference.model)
    twin._apply(cast)  # as Module.double() and .to() do, for any cast
    twin.train(reference.model.training)
    cast_args = [cast(a) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        out = as_outputs(twin(*cast_args))
    synchronize(reference.device)
    del twin, cast_args
    return out


def structure_notes(structures: Optional[list[tuple[str, ...]]]) -> tuple[str, ...]:
    """Per structured input: what its redraws keep, and for a mask or integer values that the
    trials use get_inputs()'s own draws under their fresh seeds (no redraw)."""
    notes = []
    for position, found in enumerate(structures or []):
        if not found:
            continue
        kept = (
            "not redrawn: each trial uses get_inputs() under its own secret seed"
            if {"0/1 mask", "integer-valued"} & set(found)
            else "the normal, signed and shifted redraws keep it"
        )
        notes.append(f"input {position}: {', '.join(found)} ({kept})")
    return tuple(notes)


RELEASE_ABOVE = 256 << 20  # cached, unused device memory the judge keeps at most between steps


def release(device: torch.device) -> None:
    """Give cached device memory back, so that the worker beside the judge can have it (only when
    there is much of it: emptying the cache after every small step would cost its reallocation)."""
    if (
        device.type == Device.CUDA
        and torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) > RELEASE_ABOVE
    ):
        torch.cuda.empty_cache()


def snapshot(model: Any) -> dict[str, Any]:
    """A copy of the model's state."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def tensors_of(values: list[Any]) -> list[Any]:
    """The tensors among `values`."""
    return [v for v in values if isinstance(v, torch.Tensor)]


def nbytes(tensors: list[Any]) -> int:
    """The bytes of `tensors`' elements."""
    return sum(t.numel() * t.element_size() for t in tensors)


def output_bytes(outputs: Any) -> int:
    """What `outputs` (a list, or the record Reference.forward returns) take laid out in a region."""
    if isinstance(outputs, dict):
        outputs = outputs["tensors"]
    return layout(tensors_of(outputs))[1]


def meta_footprint(module: Any, model_class: Any) -> tuple[int, int, int]:
    """A lower bound of what the reference holds on its device at its first call, found without allocating
    anything: the bytes of (its parameters and buffers, one set of its inputs, its outputs), made from the
    problem's own get_init_inputs, Model and get_inputs on the meta device. A part that cannot be made there
    (an explicit device, an operator without a meta kernel) counts 0, so the bound only ever errs low."""
    found = [0, 0, 0]
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        try:
            model = model_class(*module.get_init_inputs())
            found[0] = nbytes([t for t in [*model.parameters(), *model.buffers()] if t.is_meta])
            inputs = list(module.get_inputs())
            found[1] = nbytes([t for t in tensors_of(inputs) if t.is_meta])
            with torch.no_grad():
                outputs = as_outputs(model(*inputs))
            found[2] = nbytes([t for t in tensors_of(outputs) if t.is_meta])
        except Exception:
            pass
    return found[0], found[1], found[2]


def unfit(footprint: tuple[int, int, int], total: int, fraction: float, device_type: str) -> str:
    """Why a reference of `footprint` (meta_footprint's weights, inputs and outputs) cannot serve on a device of
    `total` bytes where it may use `fraction` of them, or "" when it may."""
    weights, inputs, outputs = footprint
    needs, gib = weights + inputs + outputs, 2**30
    said = (
        f"at least {needs / gib:.1f} GiB before it runs (weights {weights / gib:.1f}, inputs {inputs / gib:.1f}, "
        f"outputs {outputs / gib:.1f}, sized without allocating)"
    )
    return over_share(needs, said, total, fraction, device_type)


def over_share(needs: int, said: str, total: int, fraction: float, device_type: str) -> str:
    """Why a reference that needs `needs` bytes (`said`: how much, and how it is known) leaves no room for a
    compared model beside it on a device of `total` bytes where it may use `fraction` of them, or "" when it does."""
    if needs <= fraction * total:
        return ""
    return (
        f"the reference needs {said}, over {fraction:.0%} of the {total / 2**30:.1f} GiB the {device_type} has; a "
        "compared model beside it would not fit"
    )


def device_memory(device: torch.device) -> int:
    """The device's total memory (the machine's, for the CPU)."""
    if device.type == Device.CUDA:
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def free_memory(device: torch.device) -> int:
    """The device's free memory (the machine's available memory, for the CPU)."""
    if device.type == Device.CUDA:
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62
