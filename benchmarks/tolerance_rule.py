"""Which comparison rule tells honest float32 arithmetic from changed mathematics or precision?

For honest candidates (the same mathematics in float32, in another summation order) and wrong
ones (tanh-GELU for exact GELU, bf16 or TF32 inputs, a dropped term), prints per case:
- max |c - r| / rms(r): the error against the reference output's magnitude (the norm-wise term);
- the share of elements outside the elementwise rule atol = rtol = 1e-4;
- whether each rule passes: elementwise alone, and elementwise + norm * rms(r) for several norms.
IEEE float32 rounds the same on a CPU and a GPU, so the orderings' errors carry over.

    python3 benchmarks/tolerance_rule.py [--out FILE.md]
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

NORMS = (1e-5, 3e-5, 1e-4, 3e-4)
ATOL = RTOL = 1e-4


def blocked(a: torch.Tensor, b: torch.Tensor, block: int) -> torch.Tensor:
    """a @ b accumulated in float32 over K in blocks, in order: another honest summation order."""
    out = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], block):
        out += a[:, k : k + block] @ b[k : k + block]
    return out


def tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32's 10 mantissa bits (towards zero), as a TF32 tensor core reads it."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def cases() -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    found = []
    for k in (4096, 16384):
        a, b = torch.randn(256, k), torch.randn(k, 256)
        r = a @ b
        found.append(("honest", f"matmul K={k}, blocks of 64", blocked(a, b, 64), r))
        found.append(("honest", f"matmul K={k}, blocks of 1024", blocked(a, b, 1024), r))
        found.append(("honest", f"matmul K={k}, exactly rounded", (a.double() @ b.double()).float(), r))
        found.append(("wrong", f"matmul K={k}, TF32 inputs", tf32(a) @ tf32(b), r))
        found.append(("wrong", f"matmul K={k}, bf16 inputs", (a.bfloat16().float() @ b.bfloat16().float()), r))
    a, x = torch.randn(64, 131072), torch.randn(131072, 1)
    r = a @ x
    found.append(("honest", "matvec K=131072, blocks of 256", blocked(a, x, 256), r))
    found.append(("honest", "matvec K=131072, exactly rounded", (a.double() @ x.double()).float(), r))
    found.append(("wrong", "matvec K=131072, TF32 inputs", tf32(a) @ tf32(x), r))
    x = torch.randn(1 << 20)
    exact = torch.nn.functional.gelu(x)
    found.append(("honest", "GELU, erf in float64", torch.nn.functional.gelu(x.double()).float(), exact))
    found.append(("wrong", "GELU, tanh approximation", torch.nn.functional.gelu(x, approximate="tanh"), exact))
    h = torch.randn(512, 512)
    bias = torch.randn(512) * 0.05
    found.append(("wrong", "linear + bias (0.05 scale), bias dropped", h, h + bias))
    w = torch.randn(512, 512) / math.sqrt(512)
    found.append(("wrong", "layer x W + 0.01 x, residual dropped", h @ w, h @ w + 0.01 * h))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    header = "| kind | case | max err / rms(r) | outside 1e-4 elementwise | elementwise | " + " | ".join(f"+{n:g}·rms" for n in NORMS) + " |"
    lines = [header, "|" + "---|" * (5 + len(NORMS))]
    for kind, name, c, r in cases():
        diff = (c - r).abs()
        rms = float(r.double().pow(2).mean().sqrt())
        bound = ATOL + RTOL * r.abs()
        outside = float((diff > bound).float().mean())
        verdicts = ["pass" if outside == 0 else "fail"] + ["pass" if bool((diff <= bound + n * rms).all()) else "fail" for n in NORMS]
        lines.append(f"| {kind} | {name} | {float(diff.max()) / rms:.2e} | {outside:.3%} | " + " | ".join(verdicts) + " |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
