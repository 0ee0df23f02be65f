"""What the worker and the judge do with inputs and outputs: the structure a problem's inputs
guarantee, redraws that keep it, other sizes, weights moved off their defaults, outputs as a list,
bit-for-bit equality, and which input an output's memory aliases."""

from __future__ import annotations

import types
from typing import Any

import torch

from harness.core.config import Device, Distribution

CHUNK = 1 << 24  # elements compared at a time on a GPU (few launches per GB)
CPU_CHUNK = 1 << 20  # on the CPU: a chunk's temporaries stay in cache across the passes over it


def chunk(tensor: torch.Tensor) -> int:
    return CHUNK if tensor.device.type == Device.CUDA else CPU_CHUNK


def same_tensor_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality of two tensors of one shape and dtype (NaN payloads and the sign of
    zero included), on either device, a chunk at a time with no full temporary."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
    if bits is not None and a.dtype != torch.bool:
        flat_a, flat_b = flat_a.view(bits), flat_b.view(bits)
    step = chunk(a)
    return all(
        torch.equal(flat_a[s : s + step], flat_b[s : s + step].to(flat_a.device))
        for s in range(0, flat_a.numel(), step)
    )


def same_bits(a: Any, b: Any) -> bool:
    """Inputs left as they were: bit-for-bit equal tensors (or equal values)."""
    if not isinstance(a, torch.Tensor):
        return a == b
    return same_tensor_bits(a, b)


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


STRUCTURES = (
    "0/1 mask",
    "integer-valued",
    "rows on the simplex",
    "upper-triangular",
    "lower-triangular",
    "zero pattern",
    "symmetric",
    "sorted",
    "non-negative",
)


def structure(value: Any) -> tuple[str, ...]:
    """What the problem's get_inputs() guarantees about a floating input, read from one draw:
    the invariants of STRUCTURES that hold exactly (sums to 1 within 1e-3). A draw of randn or
    rand holds none but non-negativity (rand), so unconstrained inputs are left unconstrained."""
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
    `keep`: the input's structure (harness.device.inputs.structure), which the redraw keeps: a mask or
    integer values are not redrawn; otherwise the fresh values are made non-negative (|x|, or
    uniform in [0, 4)), put on the simplex (softmax), given the zero pattern, symmetrised or sorted."""
    if (
        not isinstance(value, torch.Tensor)
        or not value.is_floating_point()
        or distribution == Distribution.GIVEN
        or "0/1 mask" in keep
        or "integer-valued" in keep
    ):
        return value
    generator = torch.Generator(device=value.device).manual_seed(seed)
    if distribution == Distribution.NORMAL or (distribution == Distribution.SHIFTED and "rows on the simplex" in keep):
        fresh = torch.randn(value.shape, generator=generator, device=value.device)
    elif distribution == Distribution.SIGNED:
        fresh = (
            torch.rand(value.shape, generator=generator, device=value.device)
            .mul_(4)
            .sub_(0 if "non-negative" in keep else 2)
        )
    elif distribution == Distribution.SHIFTED:
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


def aliased_input(output: Any, inputs: list[Any]) -> int:
    """Index of the first input whose memory `output`'s memory overlaps, or -1. Spans, not
    storages: inputs are views into one shared region."""
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
