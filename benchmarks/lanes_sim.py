"""The lanes' predicted rate, from the product's own scheduling code: K lanes on one GPU go through the
run's quiet host and its gate (harness.parent.quiet, `lane_work`, `step`, `hold`) while their phases
sleep for durations replayed from a kbcorpus state file (benchmarks/kbcorpus.py's state.jsonl, written by
benchmarks/verdict_rate_gpu.sh on a GPU machine).

    python3 benchmarks/lanes_sim.py STATE.jsonl [--lanes 1 2 4] [--builds 12] [--build-scale 1.0] [--memcheck-s S]
        [--judges-ahead N [--judge-ready-s 10]] [--memcheck-beside] [--in-order] [--warm 4]

What is replayed, per judged kernel of the state, in its order:
- its build ahead's wall seconds (`ahead.seconds`), in a pool of `--builds` slots that starts every build
  at once, in order, as the run's build pool does;
- its reference pass (`reference_wall_s`, once per problem and lane), with the GPU alone;
- its checks (`phase_s` less `time`), a shared grant, yielded at four step boundaries;
- its timing (`phase_s.time`), with the GPU alone;
- memcheck when it passed, on the shared grant: the seconds of its compute-sanitizer runs (`sanitizer`, which
  states since 2026-11-28 keep), else `--memcheck-s` (default 6); `--memcheck-s` given sets every kernel's.

With `--judges-ahead N`, a new problem's reference pass no longer replays the seconds its judge's start-up took
(`reference_phase_s`, "judge start-up") but waits for a judge started ahead: each lane keeps N started, the oldest
serves the next problem, and it waits until `--judge-ready-s` (default 10) after that judge's start. The lane's first
problem keeps its recorded start-up (its judge starts cold).

With `--memcheck-beside`, a kernel's memcheck no longer holds its lane: it runs beside the lane's next kernel (its
build wait, its checks), and the lane's next time alone (a reference pass, a timing) waits until it has ended, as the
gate makes a timing wait for shared work in flight; the run ends when the last memcheck has. (Another lane's time
alone does not wait for it here: with more than one lane, the prediction is a bound.)

A lane takes its next kernel as the product's lanes do (harness.parent.local.choose_job): one whose build has
ended before one whose build still runs, then one of a problem it has warm (its last `--warm` problems, the loop
profile's 4: no reference pass again). When no build has ended, it runs the reference pass of the kernel it would
choose and waits for whichever build ends first. `--in-order` replays the lanes before that choice: each kernel in
the state's order, waiting for its build.

It prints the predicted verdicts per hour and the share of the wall the GPU was held alone, per lane
count, so a GPU run of the same draw checks the prediction (docs/performance.md). `--build-scale`
asks what cheaper builds would give, and `--header-scale F --header-ready-s T` what builds that start once a
precompiled header is ready (T s into the run) would give. The gate's promises are asserted on every run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.parent import quiet  # noqa: E402
from harness.parent.local import choose_job  # noqa: E402
from harness.parent.gpugate import EXCLUSIVE, violations  # noqa: E402
from harness.parent.prebuild import parallelism_for  # noqa: E402
from harness.parent.quiet import QuietHost  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdict_rate import sanitizer_seconds  # noqa: E402

DRAIN_S = quiet.DRAIN_S  # seconds, on the device

DEFAULT_MEMCHECK_S = 6.0  # a memcheck run's seconds where the state kept none (one lane, H100, 2026-11-28)
SCALE = 0.01  # one second of the device is 10 ms here
STEPS = 4  # step boundaries in a candidate's checks (a worker's messages: trials, repeats, gradients, go-ahead)


@dataclass(frozen=True)
class Kernel:
    name: str
    problem: str
    build: float
    reference: float
    check: float
    time: float
    passed: bool
    memcheck: Optional[float] = None  # its compute-sanitizer runs' seconds, where the state kept them
    judge_startup: float = 0.0  # of `reference`: the seconds its pass waited for its judge to start
    reference_time: float = 0.0  # of `reference`: the judge's timing of the reference (its profile and rounds)


def replayed(path: Path) -> list[Kernel]:
    """The judged kernels of a kbcorpus state file, in its order."""
    kernels = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("status") in (None, "no record", "needs CUDA"):
            continue
        phases = dict(row.get("phase_s") or {})
        timed = float(phases.pop("time", 0.0) or 0.0)
        sanitized = sanitizer_seconds(row)  # none kept: the default's seconds
        kernels.append(
            Kernel(
                row["kernel"],
                row["problem"],
                float((row.get("ahead") or {}).get("seconds") or 0.0) + float(row.get("build_s") or 0.0),
                float(row.get("reference_wall_s") or 0.0),
                sum(float(v or 0.0) for v in phases.values()),
                timed,
                row.get("status") == "correct",
                sum(sanitized) if sanitized else None,
                float((row.get("reference_phase_s") or {}).get("judge start-up") or 0.0),
                float((row.get("reference_phase_s") or {}).get("judge time") or 0.0),
            )
        )
    if not kernels:
        raise SystemExit(f"no judged kernel in {path}")
    return kernels


@dataclass(frozen=True)
class Judges:
    """Judges started ahead: `ahead` per lane (0: replay the recorded start-up), each ready `ready_s` after its start."""

    ahead: int = 0
    ready_s: float = 10.0


@dataclass(frozen=True)
class Header:
    """The build pool's precompiled torch/extension.h: ready `ready_s` into the run (0: made by an earlier run); a
    build that starts once it is ready takes `scale` of its recorded seconds (1: no header)."""

    ready_s: float = 0.0
    scale: float = 1.0


class JudgeQueue:
    """One lane's judges started ahead, on the simulated clock: `reference_s` is a new problem's reference pass."""

    def __init__(self, judges: Judges) -> None:
        self.judges = judges
        self.started: list[float] = []  # start times (device seconds) of the judges waiting, oldest first
        self.first = True

    def reference_s(self, kernel: Kernel, now: float) -> float:
        if self.judges.ahead == 0:
            return kernel.reference
        seconds = kernel.reference
        if not self.first:  # the first problem's judge starts cold: its recorded start-up stands
            started = self.started.pop(0)
            seconds += max(0.0, self.judges.ready_s - (now - started)) - kernel.judge_startup
        self.first = False
        while len(self.started) < self.judges.ahead:
            self.started.append(now)
        return max(0.0, seconds)


@dataclass(frozen=True)
class Queued:
    """A kernel waiting for a lane, as harness.parent.local.choose_job sees a job."""

    kernel: Kernel
    queued_at: float = 0.0

    @property
    def key(self) -> str:
        return self.kernel.problem


def simulate(
    kernels: list[Kernel],
    lanes: int,
    builds: int,
    build_scale: float,
    memcheck_s: Optional[float],
    judges: Judges = Judges(),
    beside: bool = False,
    in_order: bool = False,
    warm: int = 4,
    header: Header = Header(),
) -> tuple[float, float, int]:
    """(verdicts per hour, share of the wall the GPU was held alone, most shared grants at once) for
    `lanes` lanes on one GPU. `memcheck_s`: every passed kernel's memcheck seconds; None: each kernel's own from
    the state, else DEFAULT_MEMCHECK_S. `judges`: judges started ahead (default: the recorded start-ups). `beside`:
    memcheck runs beside the lane's next kernel, and the lane's next time alone waits for it. `in_order`: each lane
    takes the oldest kernel and waits for its build; else the product's choice, with `warm` problems kept per lane.
    `header`: builds that start once the precompiled header is ready are that much cheaper."""
    quiet.DRAIN_S = DRAIN_S * SCALE  # the gate's drain after an exclusive grant, on the simulated clock
    host = QuietHost("off", lanes, lanes_per_gpu=lanes) if lanes > 1 else None
    pool = ThreadPoolExecutor(max_workers=builds)
    began = time.perf_counter()

    def build(kernel: Kernel) -> None:
        ready = (time.perf_counter() - began) / SCALE >= header.ready_s
        time.sleep(kernel.build * build_scale * (header.scale if ready else 1.0) * SCALE)

    built: dict[str, Future[None]] = {k.name: pool.submit(build, k) for k in kernels}
    waiting = [Queued(kernel) for kernel in kernels]
    held: dict[int, list[str]] = {i: [] for i in range(lanes)}  # each lane's warm problems, oldest first
    alone_s = [0.0]
    lock = threading.Lock()

    def take(index: int) -> tuple[Optional[Kernel], list[Kernel]]:
        """(the kernel the lane takes, []), or (None, the kernels it waits for: the one to prepare first) when none
        is built; (None, []) when none is left."""
        with lock:
            if not waiting:
                return None, []
            if in_order:
                chosen = waiting[0]
            else:
                elsewhere = {p for other, problems in held.items() if other != index for p in problems}
                now = (time.monotonic() - started) / SCALE
                if not any(built[q.kernel.name].done() for q in waiting):
                    first = choose_job(waiting, set(held[index]), elsewhere, now)  # type: ignore[arg-type]
                    return None, [first.kernel] + [q.kernel for q in waiting]
                chosen = choose_job(waiting, set(held[index]), elsewhere, now, lambda q: built[q.kernel.name].done())  # type: ignore[arg-type]
            waiting.remove(chosen)
            return chosen.kernel, []

    def alone(index: int):  # noqa: ANN202 - a context manager
        return host.hold(index) if host is not None else _Nothing()

    def work(index: int):  # noqa: ANN202
        return host.lane_work(index) if host is not None else _Nothing()

    def sleep_alone(index: int, seconds: float) -> None:
        with alone(index):
            started = time.monotonic()
            time.sleep(seconds * SCALE)
            with lock:
                alone_s[0] += time.monotonic() - started

    def lane(index: int) -> None:
        mine = held[index]
        ahead = JudgeQueue(judges)
        beside_done = threading.Event()  # the lane's memcheck running beside it, ended (none yet: ended)
        beside_done.set()

        def warm_up(kernel: Kernel) -> None:  # its problem's reference pass, unless the lane has it warm
            if kernel.problem not in mine:
                seconds = ahead.reference_s(kernel, (time.monotonic() - started) / SCALE)
                if beside:  # the judge's start, load, construct and checks beside the memcheck; its timing after
                    time.sleep(max(0.0, seconds - kernel.reference_time) * SCALE)
                    seconds = min(seconds, kernel.reference_time)
                beside_done.wait()
                sleep_alone(index, seconds)
            with lock:
                if kernel.problem in mine:
                    mine.remove(kernel.problem)
                mine.append(kernel.problem)
                del mine[: max(0, len(mine) - warm)]

        while True:
            kernel, unready = take(index)
            if kernel is None and unready:  # none built: the reference pass it would need, then the first build out
                with work(index):
                    warm_up(unready[0])
                wait([built[k.name] for k in unready[1:]], return_when=FIRST_COMPLETED)
                continue
            if kernel is None:
                beside_done.wait()
                return
            built[kernel.name].result()
            with work(index):
                warm_up(kernel)
                for _ in range(STEPS):
                    time.sleep(kernel.check / STEPS * SCALE)
                    if host is not None:
                        host.step(index)
                if kernel.passed:
                    beside_done.wait()
                    sleep_alone(index, kernel.time)
                    seconds = memcheck(kernel, memcheck_s) * SCALE
                    if beside:
                        beside_done = _running(seconds)
                    else:
                        time.sleep(seconds)

    started = time.monotonic()
    threads = [threading.Thread(target=lane, args=(i,)) for i in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    pool.shutdown()
    peak = 1
    if host is not None:
        gate = host.gate(0)
        assert gate is not None
        intervals = gate.intervals()
        found = violations(intervals, gate.slots, gate.memory)
        assert found == [], found
        shared = [i for i in intervals if i.kind != EXCLUSIVE]
        peak = max((sum(o.start <= i.start < o.end for o in shared) for i in shared), default=0)
        host.close()
    return len(kernels) / (wall / SCALE) * 3600, alone_s[0] / wall, peak


def _running(seconds: float) -> threading.Event:
    """An event set `seconds` from now, by a thread of its own: a memcheck run beside the lane."""
    ended = threading.Event()
    threading.Timer(seconds, ended.set).start()
    return ended


def memcheck(kernel: Kernel, given: Optional[float]) -> float:
    if given is not None:
        return given
    return kernel.memcheck if kernel.memcheck is not None else DEFAULT_MEMCHECK_S


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def memcheck_note(kernels: list[Kernel], given: Optional[float]) -> str:
    if given is not None:
        return f"{given:g} s each"
    kept = sorted(k.memcheck for k in kernels if k.passed and k.memcheck is not None)
    if not kept:
        return f"{DEFAULT_MEMCHECK_S:g} s each (the state keeps none)"
    return f"from the state, median {kept[len(kept) // 2]:.1f} s ({len(kept)} runs; {DEFAULT_MEMCHECK_S:g} s where none)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path)
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--builds", type=int, default=parallelism_for(16, 128 << 30)[0],
                        help="concurrent builds (default: the pool's default on 16 cores, 12)")
    parser.add_argument("--build-scale", type=float, default=1.0, help="builds this many times as long")
    parser.add_argument("--memcheck-s", type=float, default=None,
                        help="every correct candidate's memcheck seconds (default: each one's from the state, else 6)")
    parser.add_argument("--judges-ahead", type=int, default=0,
                        help="judges each lane keeps started ahead (default 0: replay each judge's recorded start-up)")
    parser.add_argument("--judge-ready-s", type=float, default=10.0, help="seconds a judge started ahead takes to ready")
    parser.add_argument("--memcheck-beside", action="store_true",
                        help="memcheck beside the lane's next kernel; the lane's next time alone waits for it")
    parser.add_argument("--in-order", action="store_true",
                        help="each lane takes the oldest kernel and waits for its build (the lanes before 2026-11-29)")
    parser.add_argument("--warm", type=int, default=4, help="problems each lane keeps warm (the loop profile's 4)")
    parser.add_argument("--header-scale", type=float, default=1.0,
                        help="builds that start once the precompiled header is ready take this share (1: no header)")
    parser.add_argument("--header-ready-s", type=float, default=0.0,
                        help="seconds into the run the header is ready (0: an earlier run made it)")
    args = parser.parse_args()
    header = Header(args.header_ready_s, args.header_scale)
    judges = Judges(args.judges_ahead, args.judge_ready_s)
    kernels = replayed(args.state)
    builds = sorted(k.build for k in kernels)
    print(
        f"{len(kernels)} judged kernels of {len({k.problem for k in kernels})} problems from {args.state}; builds "
        f"median {builds[len(builds) // 2]:.0f} s x {args.build_scale:g}, {args.builds} at once; "
        f"memcheck {memcheck_note(kernels, args.memcheck_s)}; judges "
        + (f"{judges.ahead} ahead, each ready {judges.ready_s:g} s after its start" if judges.ahead else "as recorded")
        + ("; memcheck beside the lane's next kernel" if args.memcheck_beside else "")
        + ("; kernels in order" if args.in_order else f"; built kernels first, {args.warm} problems warm per lane")
        + (
            f"; builds x {header.scale:g} once the header is ready ({header.ready_s:g} s in)"
            if header.scale != 1.0
            else ""
        )
    )
    print("| lanes | predicted verdicts per hour | GPU held alone |")
    print("|---:|---:|---:|")
    for lanes in args.lanes:
        rate, share, _ = simulate(
            kernels, lanes, args.builds, args.build_scale, args.memcheck_s, judges, args.memcheck_beside, args.in_order,
            args.warm, header,
        )
        print(f"| {lanes} | {rate:,.0f} | {share:.0%} |")


if __name__ == "__main__":
    main()
