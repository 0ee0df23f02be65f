"""A CUDA graph is timed only when it does the call's work: the checks' decisions, on the CPU.
(The captures themselves are GPU tests: tests/test_gpu.py.)"""

from __future__ import annotations

import torch

from harness.core.records import OUTSIDE_CAPTURE, CallProfile, KernelTime
from harness.device.graphs import disagreement, missing_from_graph, poison, poisoned, replay_mismatch, tensors


def test_poisoned_outputs_hold_values_no_computation_leaves():
    floats, ints, flags = torch.zeros(4), torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.bool)
    poison([floats, ints, flags])
    assert torch.isnan(floats).all() and (ints == torch.iinfo(torch.int32).max).all() and flags.all()


def test_a_replay_that_wrote_nothing_or_only_the_allocation_disagrees_and_says_how():
    want = torch.randn(64)
    untouched = want.clone()
    poison([untouched])
    assert "64 of 64 output elements unwritten" in disagreement(untouched, want)
    assert "all zeros: only the output's allocation was replayed" in disagreement(torch.zeros(64), want)
    assert "differs" in disagreement(torch.zeros(3, dtype=torch.int64), torch.arange(3))


def test_a_replay_that_computed_the_call_agrees_within_rounding():
    want = torch.randn(1000, dtype=torch.float64).float()
    reordered = want * (1 + 1e-7 * torch.randn(1000))  # another summation order: float32 rounding
    assert disagreement(reordered, want) == "" and disagreement(torch.arange(3), torch.arange(3)) == ""
    assert "returns (2,)" in disagreement(torch.zeros(2), torch.zeros(3))


def test_outputs_are_found_in_tuples_lists_and_dicts():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    assert [t.item() for t in tensors((a, [b, {"c": c}], None, 3))] == [0.0, 1.0, 2.0]


def _profile(*kernels: tuple[str, int]) -> CallProfile:
    return CallProfile(kernel_ms=0.1, span_ms=0.1, launches=sum(n for _, n in kernels), streams=1, after_return=0, kernels=tuple(KernelTime(name, n, 0.01) for name, n in kernels))


def test_a_graph_missing_one_of_the_models_own_kernels_is_named():
    eager = _profile(("Memset (Device)", 1), ("fused_kernel(float const*, float*, int)", 1))
    replayed = _profile(("Memset (Device)", 1))  # the <<<>>> launch went to the legacy stream, outside the capture
    why = missing_from_graph(eager, replayed, {"fused_kernel"})
    assert why.startswith(OUTSIDE_CAPTURE) and "ran fused_kernel x1; its graph's replay ran 0 of them" in why
    assert missing_from_graph(eager, _profile(("fused_kernel(float const*, float*, int)", 1), ("Memset (Device)", 1)), {"fused_kernel"}) == ""
    assert missing_from_graph(None, replayed, {"fused_kernel"}) == "" and missing_from_graph(eager, None, {"fused_kernel"}) == ""


def test_library_kernels_that_another_algorithm_replaces_under_capture_are_not_compared():
    eager = _profile(("sgemm_largek_lds64", 1), ("splitKreduce_kernel", 1), ("my_bias_relu", 1))
    replayed = _profile(("sm90_xmma_gemm_f32f32", 1), ("my_bias_relu", 1))  # cuBLAS chose another GEMM while capturing
    assert missing_from_graph(eager, replayed, {"my_bias_relu"}) == ""
    assert missing_from_graph(eager, replayed, ()) == ""  # the problem's own Model declares no kernel: the replay check alone


class _CachedOutput:
    """A model that returns one tensor it keeps (a constant answer, computed once)."""

    def __init__(self) -> None:
        self.kept = torch.ones(8, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.kept


def test_the_replay_check_leaves_a_kept_output_as_it_found_it():
    # A graph of a call that launches nothing replays nothing: the check must say so, and the
    # poison it put into the static output (the model's own tensor) must not become the model's
    # next eager output (it did: NaN at the last timed call of a model that passes every check).
    model = _CachedOutput()
    x = torch.randn(8, 4)
    why = replay_mismatch(model, [[x]], [(lambda: None, model.kept)], torch.device("cpu"))
    assert "8 of 8 output elements unwritten" in why
    assert torch.equal(model(x), torch.ones(8, 1))


def test_the_replay_check_passes_a_replay_that_writes_its_outputs_and_keeps_their_values():
    x = torch.randn(8, 4)
    static = x.sum(dim=1, keepdim=True)

    def replay() -> None:
        static.copy_(x.sum(dim=1, keepdim=True))

    assert replay_mismatch(lambda a: a.sum(dim=1, keepdim=True), [[x]], [(replay, static)], torch.device("cpu")) == ""
    assert torch.allclose(static, x.sum(dim=1, keepdim=True))


def test_poisoned_outputs_get_their_values_back_even_when_the_block_raises():
    out = torch.arange(4.0)
    try:
        with poisoned([out]):
            assert torch.isnan(out).all()
            raise RuntimeError("replay failed")
    except RuntimeError:
        pass
    assert torch.equal(out, torch.arange(4.0))
