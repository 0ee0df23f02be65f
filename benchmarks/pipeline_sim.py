"""The staged pipeline's predicted rate on a simulated device (harness.parent.stages): verdicts per
GPU-hour and the share of the wall the GPU is held exclusively, for 1 GPU with 16 cores and 4 GPUs
with 64 cores.

Each candidate's stage durations are drawn around the per-verdict costs measured on an H100 for 33
fresh held-out kernels (main ad42b26, 2026-11-26): about 45 CPU-seconds of builds and processes,
9 slot-seconds of shared GPU work (checks, memcheck, late JIT) and 1.65 s of exclusive GPU time
(the paired rounds, the profiled call, the reference's timing share); one in five fails its checks
and is neither timed nor sanitized. As many builds run at once as the build pool's default
(harness.parent.prebuild.parallelism_for), each keeping 1.25 cores busy, as measured on an H200 host;
the memcheck share is a third of the shared work. The real scheduler runs
against sleeps scaled by SCALE.

    python3 benchmarks/pipeline_sim.py [--candidates N] [--slots K] [--seed S]
    python3 benchmarks/pipeline_sim.py --records RUN/records.jsonl ... [--slots K]
    python3 benchmarks/pipeline_sim.py --state STATE.jsonl [--slots K] [--candidates N]

With --records, the durations are replayed from real candidate records instead (records of schema 7:
the build ahead's seconds, the worker's phase seconds, the sanitizer's seconds), cycled to N
candidates per GPU; each candidate's shared stages hold 2 GB.

With --state, they are replayed from a kbcorpus state file, the same durations benchmarks/lanes_sim.py
replays through today's lane (which runs memcheck in line): each judged kernel once, in its order (or
cycled to --candidates N). A problem's reference pass is added to its first kernel's exclusive time, and
a kernel's memcheck seconds are its own from the state (6 s where none were kept). So the two
simulators on one state say what the staged pipeline would gain over the lane on that draw.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.parent.gpugate import EXCLUSIVE, GpuGate, violations  # noqa: E402
from harness.parent.prebuild import parallelism_for  # noqa: E402
from harness.parent.stages import Durations, InFlight, Pipeline, simulated_calls  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lanes_sim  # noqa: E402  (its reading of a kbcorpus state, and each kernel's memcheck seconds)

SCALE = 0.002  # one second of the device is 2 ms here
BUILD_CPU_S, SHARED_S, EXCLUSIVE_S = 45.0, 9.0, 1.65
BUILD_CORES = 1.25  # cores a cold build keeps busy, whatever its MAX_JOBS: nvcc's steps are serial (H200, 2026-11-29)
GIB = 1 << 30
DEFAULT_CANDIDATES = 200  # per GPU, drawn or cycled from records


def draw(count: int, rng: random.Random) -> dict[str, Durations]:
    """Durations around the measured means (a spread of about a factor of two either way)."""

    def around(mean: float) -> float:
        return mean * rng.lognormvariate(0, 0.5) / 1.13  # the lognormal's mean is e^(0.5²/2) = 1.13

    return {
        f"k{i:03d}": Durations(
            build=around(BUILD_CPU_S) / BUILD_CORES,
            check=around(SHARED_S * 2 / 3),
            time=around(EXCLUSIVE_S),
            sanitize=around(SHARED_S / 3),
            passes=rng.random() > 0.2,
        )
        for i in range(count)
    }


def replayed(paths: list[Path], count: int) -> dict[str, Durations]:
    """Stage durations read from candidate records, cycled to `count` candidates; a build's seconds
    are its measured wall, kept as they are."""
    from harness.core.records import CandidateRecord
    from harness.core.store import read_records

    found = []
    for path in paths:
        for record in read_records(path):
            if not isinstance(record, CandidateRecord):
                continue
            phases = dict(record.provenance.phase_seconds)
            timed = phases.pop("time", 0.0)
            found.append(
                Durations(
                    build=record.provenance.ahead.seconds
                    + sum(b.seconds for b in record.provenance.builds if not b.cached),
                    check=sum(phases.values()),
                    time=timed,
                    sanitize=sum(s.seconds for s in record.integrity.sanitizer),
                    passes=timed > 0,
                )
            )
    if not found:
        raise SystemExit("no candidate records in " + ", ".join(map(str, paths)))
    return {f"k{i:03d}": found[i % len(found)] for i in range(count)}


def from_state(path: Path, count: Optional[int]) -> dict[str, Durations]:
    """Stage durations of a kbcorpus state's judged kernels (benchmarks/lanes_sim.py's reading of it),
    each once in its order, or cycled to `count`; a problem's reference pass is exclusive time of its
    first kernel."""
    kernels = lanes_sim.replayed(path)
    found, seen = [], set()
    for kernel in kernels:
        reference = 0.0 if kernel.problem in seen else kernel.reference
        seen.add(kernel.problem)
        found.append(
            Durations(
                build=kernel.build,
                check=kernel.check,
                time=(kernel.time if kernel.passed else 0.0) + reference,
                sanitize=lanes_sim.memcheck(kernel, None) if kernel.passed else 0.0,
                passes=kernel.passed,
            )
        )
    total = count or len(found)
    return {f"k{i:03d}": found[i % len(found)] for i in range(total)}


def one_gpu(
    count: Optional[int], cores: int, slots: int, seed: int, records: list[Path], state: Optional[Path] = None
) -> tuple[float, float]:
    """(verdicts per hour, exclusive share of the wall) of one GPU's pipeline with `cores` cores."""
    builds, _ = parallelism_for(cores, 8 * cores * GIB)  # the build pool's default on that many cores
    if state is not None:
        durations = from_state(state, count)
    elif records:
        durations = replayed(records, count or DEFAULT_CANDIDATES)
    else:
        durations = draw(count or DEFAULT_CANDIDATES, random.Random(seed))
    count = len(durations)
    gate = GpuGate(slots, 80 * GIB)
    rng = random.Random(seed + 1)
    works = [InFlight(name, rng.choice([1, 2, 4, 8]) * GIB) for name in durations]
    started = time.monotonic()
    Pipeline(gate, builds).run(works, simulated_calls(durations, SCALE))
    wall = (time.monotonic() - started) / SCALE
    intervals = gate.intervals()
    assert violations(intervals, slots, gate.memory) == []
    exclusive = sum(i.end - i.start for i in intervals if i.kind == EXCLUSIVE) / SCALE
    return count / wall * 3600, exclusive / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=None,
                        help=f"per GPU (default {DEFAULT_CANDIDATES}; with --state, each judged kernel once)")
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--records", type=Path, nargs="*", default=[])
    parser.add_argument("--state", type=Path, default=None,
                        help="a kbcorpus state file (benchmarks/lanes_sim.py's input)")
    args = parser.parse_args()
    if args.state is not None:
        source = f"replayed from the state {args.state}"
    elif args.records:
        source = f"replayed from {len(args.records)} records file(s)"
    else:
        source = f"around {BUILD_CPU_S:g} CPU-s, {SHARED_S:g} shared s, {EXCLUSIVE_S:g} exclusive s per verdict"
    many = args.candidates or ("each judged kernel once" if args.state is not None else DEFAULT_CANDIDATES)
    print(f"candidates per GPU: {many}; {args.slots} shared slots, 80 GB; durations {source}")
    print("| machine | verdicts per hour | per GPU-hour | exclusive share |")
    print("|---|---:|---:|---:|")
    for gpus, cores in ((1, 16), (4, 64)):
        rate, share = one_gpu(args.candidates, cores // gpus, args.slots, args.seed, args.records, args.state)
        print(f"| {gpus} GPU, {cores} cores | {rate * gpus:,.0f} | {rate:,.0f} | {share:.0%} |")


if __name__ == "__main__":
    main()
