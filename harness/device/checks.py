"""Training parity and weight pairing, shared by the worker and the judge: the gradients of a
fixed random projection of a model's outputs, and how one model's state_dict pairs with another's."""

from __future__ import annotations

from typing import Any, Optional

import torch

from harness.core.errors import one_line
from harness.core.status import Backward, Status
from harness.device.failures import classify
from harness.device.guard import Guard
from harness.device.inputs import as_outputs
from harness.device.setup import synchronize


def model_gradients(
    model: Any, args: list[Any], seed: int, guard: Optional[Guard] = None
) -> tuple[Backward, str, dict[str, Any]]:
    """Training parity: a train-mode forward on `args` (cloned), then a backward of a fixed random
    projection of the floating outputs. Returns (status, reason, {name: gradient}) for the
    floating inputs ("input i") and every parameter ("parameter NAME"); the module's state is then
    restored, so what runs after this sees the same model."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
    inputs = [
        a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args
    ]
    model.train()
    model.zero_grad(set_to_none=True)
    status, reason = Backward.RAN, ""
    try:
        with torch.enable_grad():
            torch.manual_seed(seed)  # both sides: a train-mode forward that draws (dropout) draws the same
            out = model(*inputs)
            outputs = [o for o in as_outputs(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]
            if not any(o.requires_grad for o in outputs):
                status, reason = (
                    Backward.FORWARD_ONLY,
                    "its outputs carry no autograd graph (the kernel has no backward)",
                )
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
        status, reason = Backward.FORWARD_ONLY, f"backward raised {one_line(exc, 200)}"
    grads = {
        f"input {i}": a.grad.detach()
        for i, a in enumerate(inputs)
        if isinstance(a, torch.Tensor) and a.requires_grad and a.grad is not None
    }
    grads.update({f"parameter {name}": p.grad.detach() for name, p in model.named_parameters() if p.grad is not None})
    model.load_state_dict(snapshot)
    model.zero_grad(set_to_none=True)
    if guard is not None:
        guard.check("backward")
    return status, reason, grads


def projection(output: Any, seed: int) -> Any:
    """The secret random weights of one output in the gradient check (drawn on its device)."""
    generator = torch.Generator(device=output.device).manual_seed(seed)
    return torch.randn(tuple(output.shape), generator=generator, device=output.device)


def step_counter(name: str) -> bool:
    """BatchNorm's step counter: no weight, never part of a positional pairing."""
    return name.rsplit(".", 1)[-1] == "num_batches_tracked"


def weight_pairs(own: dict[str, Any], reference: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """[] when the names and shapes match (loaded by name); else the pairs by registration order
    and shape (`positional_mapping`), else by unique shape (`shape_mapping`); None when none holds."""
    if set(own) == set(reference) and all(tuple(own[k].shape) == tuple(reference[k].shape) for k in own):
        return []
    pairs = positional_mapping(own, reference)
    return pairs if pairs is not None else shape_mapping(own, reference)


def pairing(own: dict[str, Any], reference: dict[str, Any]) -> str:
    """How `weight_pairs` paired them: name, position or shape ("" when they do not pair)."""
    return paired_by(own, reference, weight_pairs(own, reference))


def paired_by(own: dict[str, Any], reference: dict[str, Any], pairs: Optional[list[tuple[str, str]]]) -> str:
    """How `pairs`, what `weight_pairs` gave for these weights, were made: name, position or shape."""
    if pairs is None:
        return ""
    return "name" if not pairs else "position" if positional_mapping(own, reference) is not None else "shape"


def shape_mapping(own: dict[str, Any], reference: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """(own name, reference name) pairs when the registration orders differ but the tensors still
    pair one to one: those of the same name and shape by name, each of the rest with the one
    tensor of its shape on the other side (num_batches_tracked aside, paired among themselves as
    by position). None when a shape left over is not unique on both sides, or one is left alone."""
    mine = [k for k in own if not step_counter(k)]
    theirs = [k for k in reference if not step_counter(k)]
    pairs = [
        (k, k)
        for k in mine
        if k in reference and not step_counter(k) and tuple(own[k].shape) == tuple(reference[k].shape)
    ]
    named = {k for k, _ in pairs}
    rest_mine = [k for k in mine if k not in named]
    rest_theirs = [k for k in theirs if k not in named]
    if len(rest_mine) != len(rest_theirs):
        return None
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for k in rest_theirs:
        by_shape.setdefault(tuple(reference[k].shape), []).append(k)
    for k in rest_mine:
        shape = tuple(own[k].shape)
        matches = by_shape.get(shape, [])
        if len(matches) != 1 or sum(tuple(own[m].shape) == shape for m in rest_mine) != 1:
            return None
        pairs.append((k, matches[0]))
    counters = ([k for k in own if step_counter(k)], [k for k in reference if step_counter(k)])
    return pairs + (list(zip(*counters)) if len(counters[0]) == len(counters[1]) else [])


def paired_gradients(grads: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The gradients to compare for a model on its own same-seed weights: the inputs', and the
    parameters' whose name and shape are in `shapes` (the other side's); the rest do not pair."""
    return {k: v for k, v in grads.items() if not k.startswith("parameter ") or shapes.get(k) == tuple(v.shape)}


def positional_mapping(own: dict[str, Any], reference: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """(own name, reference name) pairs in registration order, when both hold as many tensors
    (num_batches_tracked aside) and each pair has one shape; else None."""
    mine = [k for k in own if not step_counter(k)]
    theirs = [k for k in reference if not step_counter(k)]
    if len(mine) != len(theirs) or any(own[a].shape != reference[b].shape for a, b in zip(mine, theirs)):
        return None
    counters = ([k for k in own if step_counter(k)], [k for k in reference if step_counter(k)])
    return list(zip(mine, theirs)) + (list(zip(*counters)) if len(counters[0]) == len(counters[1]) else [])


def weights_problems(own: dict[str, Any], reference: dict[str, Any]) -> str:
    problems = []
    missing = [k for k in own if k not in reference]
    unexpected = [k for k in reference if k not in own]
    mis_shaped = [
        f"{k} {tuple(own[k].shape)} vs {tuple(reference[k].shape)}"
        for k in own
        if k in reference and own[k].shape != reference[k].shape
    ]
    if missing:
        problems.append(f"missing from the reference: {', '.join(missing)}")
    if unexpected:
        problems.append(f"not in ModelNew: {', '.join(unexpected)}")
    if mis_shaped:
        problems.append(f"shape differs: {', '.join(mis_shaped)}")
    return "; ".join(problems) + "; no pairing by registration order and shape, or by unique shape, either"
