"""A CUDA graph is timed only when it does the call's work: the checks' decisions, on the CPU.
(The captures themselves are GPU tests: tests/test_gpu.py.)"""

from __future__ import annotations

import torch

from harness.core.records import OUTSIDE_CAPTURE, CallProfile, KernelTime
from harness.device.graphs import disagreement, missing_from_graph, poison, tensors


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
