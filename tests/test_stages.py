"""The GPU gate and the staged pipeline (harness.parent.gpugate, harness.parent.stages), on a simulated
device: exclusive work never overlaps other work, at most K shared at once, memory admission holds,
builds start as soon as a slot frees, and every candidate gets exactly one record."""

from __future__ import annotations

import random
import threading
import time

import pytest

from harness.parent.gpugate import EXCLUSIVE, GpuGate, Interval, MemoryRefused, violations
from harness.parent.stages import Durations, InFlight, Pipeline, StageCalls, simulated_calls

GIB = 1 << 30


def _until(condition, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the state waited for never came"
        time.sleep(0.001)


def test_exclusive_work_waits_for_shared_work_to_drain_and_no_shared_work_starts_while_it_waits():
    gate = GpuGate(slots=2, memory=8 * GIB)
    order: list[str] = []

    def early() -> None:
        with gate.shared(GIB, "early"):
            order.append("early in")
            _until(lambda: gate.queued() == (1, 1))  # the timer and "late" both wait: a free slot did not admit "late"
        order.append("early out")

    def timer() -> None:
        _until(lambda: "early in" in order)
        with gate.exclusive("timer"):
            order.append("timer in")
        order.append("timer out")

    def late() -> None:
        _until(lambda: gate.queued()[0] == 1)
        with gate.shared(GIB, "late"):
            order.append("late in")

    threads = [threading.Thread(target=f) for f in (early, timer, late)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert order.index("timer in") > order.index("early out")  # it waited for the shared work in flight
    assert order.index("late in") > order.index("timer out")  # queued behind the timer, though a slot was free
    assert violations(gate.intervals(), gate.slots, gate.memory) == []


def test_shared_work_that_needs_more_than_the_card_is_refused_at_once():
    gate = GpuGate(slots=2, memory=80 * GIB)
    with pytest.raises(MemoryRefused, match=r"l1_p34:check needs 90.0 GB, the card has 80.0"):
        with gate.shared(90 * GIB, "l1_p34:check"):
            pass


def test_the_invariant_check_finds_an_overlap_too_many_slots_and_too_much_memory():
    """The check the simulated runs rely on fails when it must."""
    bad = [
        Interval(EXCLUSIVE, 0.0, 1.0, 0, "timer"),
        Interval("shared", 0.5, 2.0, 5 * GIB, "a"),
        Interval("shared", 1.5, 2.5, 5 * GIB, "b"),
        Interval("shared", 1.6, 2.6, 0, "c"),
    ]
    found = violations(bad, slots=2, memory=8 * GIB)
    assert any("timer (exclusive) overlaps a" in f for f in found)
    assert any(f.startswith("3 shared") for f in found)
    assert any("bytes held" in f for f in found)
    assert violations(bad[2:3], slots=2, memory=8 * GIB) == []


def _draw(count: int, seed: int) -> dict[str, Durations]:
    """Stage durations (seconds, before scaling) like the H100's: builds of tens of seconds, checks of
    seconds, timing of about two; one in five fails its checks."""
    rng = random.Random(seed)
    return {
        f"k{i:02d}": Durations(
            build=rng.uniform(10, 60), check=rng.uniform(2, 12), time=rng.uniform(1, 3), sanitize=rng.uniform(2, 8),
            passes=rng.random() > 0.2,
        )
        for i in range(count)
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_on_the_simulated_device_the_pipeline_keeps_every_promise(seed):
    durations = _draw(24, seed)
    rng = random.Random(seed)
    works = [InFlight(name, rng.choice([GIB, 2 * GIB, 5 * GIB])) for name in durations]
    gate = GpuGate(slots=3, memory=8 * GIB)
    scale = 0.002  # 1 s of the device is 2 ms here
    build_log: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    calls = simulated_calls(durations, scale)

    def build(work: InFlight) -> None:
        started = time.monotonic()
        calls.build(work)
        with lock:
            build_log.append((work.name, started, time.monotonic()))

    recorded: list[str] = []
    outcomes = Pipeline(gate, build_slots=4).run(
        works, StageCalls(build, calls.check, calls.time, calls.sanitize), lambda outcome: recorded.append(outcome.name)
    )
    assert sorted(recorded) == sorted(durations)  # exactly one record each
    assert violations(gate.intervals(), gate.slots, gate.memory) == []
    for outcome in outcomes:
        assert outcome.failed_at == ""
        assert outcome.timed == durations[outcome.name].passes  # a candidate that failed its checks is never timed
        assert outcome.sanitized == durations[outcome.name].passes
    timed = [i.label for i in gate.intervals() if i.kind == EXCLUSIVE]
    assert sorted(timed) == sorted(f"{n}:time" for n, d in durations.items() if d.passes)
    # builds start in order, at most 4 at once, and each waiting build starts when a slot frees
    starts = sorted(build_log, key=lambda entry: entry[1])
    assert [name for name, _, _ in starts] == list(durations)
    ends = sorted(end for _, _, end in build_log)
    for index, (_, started, _) in enumerate(starts[4:]):
        assert started >= ends[index] - 0.001  # never a fifth at once
        # a build waiting behind the others starts when a slot frees: 0.5 s covers a loaded machine's thread
        # wake-up many times over, and a build held for another reason (a flow blocking its slot) waits longer
        assert started - ends[index] < 0.5, f"build {index + 4} waited {started - ends[index]:.3f} s for a free slot"


def test_a_stage_that_raises_is_that_candidates_one_record_and_the_others_go_on():
    durations = _draw(6, 3)
    calls = simulated_calls(durations, 0.001)

    def time_or_crash(work: InFlight) -> None:
        if work.name == "k02":
            raise RuntimeError("the timed worker died")
        calls.time(work)

    durations["k02"] = Durations(1, 1, 1, 1, passes=True)
    outcomes = {o.name: o for o in Pipeline(GpuGate(2, 8 * GIB), 2).run(
        [InFlight(name, GIB) for name in durations], StageCalls(calls.build, calls.check, time_or_crash, calls.sanitize)
    )}
    assert len(outcomes) == 6
    assert outcomes["k02"].failed_at == "time" and "timed worker died" in outcomes["k02"].reason
    assert all(o.failed_at == "" for name, o in outcomes.items() if name != "k02")


def test_a_candidate_whose_problem_cannot_fit_the_card_is_recorded_as_refused():
    durations = {"big": Durations(0.1, 1, 1, 1), "small": Durations(0.1, 1, 1, 1)}
    outcomes = Pipeline(GpuGate(2, 8 * GIB), 1).run(
        [InFlight("big", 30 * GIB), InFlight("small", GIB)], simulated_calls(durations, 0.001)
    )
    big, small = outcomes
    assert big.failed_at == "check" and "needs 30.0 GB, the card has 8.0" in big.reason
    assert small.timed
