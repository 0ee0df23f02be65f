"""Paired timing: one protocol for both sides, the interleaving schedule, the paired speedup, the
parent's side of the rounds, and the null candidate's fairness floor."""
import subprocess
import sys
import time
import types

import pytest

from harness.core import protocol as P
from harness.parent.compared_pass import Pairing
from harness.core.pairing import COMPARED, REFERENCE, ProblemTiming, choose_protocol, device_sync_reason, paired_speedup, resolve_timing_mode, schedule
from harness.core.records import CallProfile, ReferenceRecord, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.parent.quiet import QuietHost
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem


def stats(samples):
    return TimingStats.from_samples(samples, timer="cuda_events", warmup_calls=1, stopped_by="target_rse")


ONE_STREAM = CallProfile(kernel_ms=1.0, span_ms=1.1, launches=3, streams=1, after_return=0)
SIDE_STREAMS = CallProfile(kernel_ms=1.0, span_ms=1.1, launches=30, streams=11, after_return=0)


# -- the schedule ------------------------------------------------------------------------------


def test_rounds_alternate_abba_and_each_side_gets_every_round():
    order = schedule(4)
    assert order == [(REFERENCE, 0), (COMPARED, 0), (COMPARED, 1), (REFERENCE, 1), (REFERENCE, 2), (COMPARED, 2), (COMPARED, 3), (REFERENCE, 3)]
    for side in (REFERENCE, COMPARED):
        assert [k for s, k in order if s == side] == [0, 1, 2, 3]


def test_more_rounds_continue_the_abba_order():
    assert schedule(2, start=4) == [(REFERENCE, 4), (COMPARED, 4), (COMPARED, 5), (REFERENCE, 5)]


def test_each_side_goes_first_in_half_of_the_rounds():
    order = schedule(8)
    firsts = [order[2 * k][0] for k in range(8)]
    assert firsts.count(REFERENCE) == firsts.count(COMPARED) == 4


# -- one protocol for both sides ---------------------------------------------------------------


def test_a_candidate_that_needs_device_sync_makes_the_reference_use_it_too():
    candidate = P.Ready(needs_device=device_sync_reason(SIDE_STREAMS))
    reference = P.Ready(needs_device=device_sync_reason(ONE_STREAM))
    chosen = choose_protocol("eager", "auto", reference, candidate)
    assert (chosen.timing_mode, chosen.sync) == ("eager", "device")
    assert "the candidate: its profiled call ran GPU work on 11 streams" in chosen.reason and "the reference:" not in chosen.reason


def test_a_reference_that_needs_device_sync_makes_the_candidate_use_it_too():
    chosen = choose_protocol("eager", "auto", P.Ready(needs_device=device_sync_reason(SIDE_STREAMS)), P.Ready())
    assert chosen.sync == "device" and "the reference: its profiled call ran GPU work on 11 streams" in chosen.reason


def test_single_stream_sides_keep_the_stream_sync_and_config_can_force_either():
    assert choose_protocol("eager", "auto", P.Ready(), P.Ready()) == P.TimingProtocol("eager", "stream", "")
    assert choose_protocol("eager", "stream", P.Ready(needs_device="x"), P.Ready(needs_device="y")).sync == "stream"
    assert choose_protocol("eager", "device", P.Ready(), P.Ready()).sync == "device"


def test_graph_mode_only_when_both_sides_were_captured():
    assert choose_protocol("graph", "auto", P.Ready(), P.Ready()).timing_mode == "graph"
    failed = choose_protocol("graph", "auto", P.Ready(), P.Ready(graph_error="RuntimeError: capture synchronises"))
    assert failed.timing_mode == "eager" and "graph capture failed, both sides timed eagerly" in failed.reason
    assert "the candidate: RuntimeError" in failed.reason
    assert choose_protocol("graph", "auto", P.Ready(graph_error="x"), P.Ready()).timing_mode == "eager"


def test_auto_mode_times_a_launch_bound_reference_in_graphs_for_both_sides():
    gappy = CallProfile(kernel_ms=0.02, span_ms=0.05, launches=4, streams=1, after_return=0)  # the GPU waits on the host
    mode, why = resolve_timing_mode("auto", gappy)
    assert mode == "graph" and "busy for 40% of its profiled call's 50 us span in 4 launches (launch-bound" in why
    assert resolve_timing_mode("eager", gappy) == ("eager", "")
    chosen = choose_protocol(mode, "auto", P.Ready(), P.Ready(), timing_mode_reason=why)
    assert chosen.timing_mode == "graph" and "CUDA graphs for both sides because the reference's kernels keep the GPU busy for 40%" in chosen.reason
    # a side that cannot be captured takes both back to eager, and says so
    assert choose_protocol(mode, "auto", P.Ready(), P.Ready(graph_error="x"), timing_mode_reason=why).timing_mode == "eager"


def test_graph_replays_and_eager_calls_of_a_reference_measured_not_launch_bound_are_held_and_nothing_else():
    """The hold keeps the host's launch latency out of a timed region: right where the host's launch is not what is
    timed, wrong for an eager call the host keeps waiting (its launches are what it costs) and useless under device sync."""
    busy = CallProfile(kernel_ms=0.03, span_ms=0.031, launches=2, streams=1, after_return=0)
    gappy = CallProfile(kernel_ms=0.02, span_ms=0.05, launches=4, streams=1, after_return=0)
    mode, measured = resolve_timing_mode("auto", busy)  # eager: the reference was measured not launch-bound
    assert choose_protocol("graph", "auto", P.Ready(), P.Ready(), hold=True).hold
    assert choose_protocol(mode, "auto", P.Ready(), P.Ready(profile=busy), timing_mode_reason=measured, hold=True).hold
    # timing.mode eager, or auto with no profile: no measurement chose eager, and host cost may be the call's
    assert not choose_protocol("eager", "auto", P.Ready(), P.Ready(profile=busy), hold=True).hold
    # a launch-bound candidate beside a GPU-bound reference pays for its launches: neither side is held
    assert not choose_protocol(mode, "auto", P.Ready(), P.Ready(profile=gappy), timing_mode_reason=measured, hold=True).hold
    assert not choose_protocol(mode, "auto", P.Ready(), P.Ready(), timing_mode_reason=measured, hold=True).hold  # not profiled
    assert not choose_protocol("graph", "auto", P.Ready(), P.Ready(), hold=False).hold  # timing.hold off
    assert not choose_protocol(mode, "auto", P.Ready(needs_device="x"), P.Ready(profile=busy), timing_mode_reason=measured, hold=True).hold  # device sync
    # a graph that could not be captured falls back to eager: a launch-bound call, so not held
    assert not choose_protocol("graph", "auto", P.Ready(), P.Ready(graph_error="x"), hold=True).hold


@pytest.mark.parametrize("profile", [
    CallProfile(kernel_ms=0.3, span_ms=0.3, launches=1, streams=1, after_return=0),  # one 0.3 ms GEMM: short, and not launch-bound
    CallProfile(kernel_ms=0.004, span_ms=0.004, launches=1, streams=1, after_return=0),  # one tiny kernel: queued behind the flush, no gap
    CallProfile(kernel_ms=5.0, span_ms=5.1, launches=4, streams=1, after_return=0),  # long kernels back to back
], ids=["short-gemm", "one-tiny-kernel", "busy-gpu"])
def test_auto_mode_times_eagerly_where_the_gpu_never_waits_for_the_host_and_says_what_it_measured(profile):
    mode, why = resolve_timing_mode("auto", profile)
    assert mode == "eager" and why.endswith("(not launch-bound)") and f"in {profile.launches} launches" in why
    assert resolve_timing_mode("auto", None) == ("eager", "") and resolve_timing_mode("graph", profile) == ("graph", "")


def test_a_failed_graph_check_times_both_sides_eagerly_and_says_why():
    missed = P.Ready(graph_error="launches outside the capturing stream: timed eagerly (its eager call ran k x1; its graph's replay ran 0 of them)")
    chosen = choose_protocol("graph", "auto", P.Ready(), missed, timing_mode_reason="launch-bound")
    assert (chosen.timing_mode, chosen.sync) == ("eager", "stream")  # the calling stream is the legacy default stream: <<<>>> launches are inside
    assert chosen.timing_mode_reason.startswith("launches outside the capturing stream: timed eagerly, both sides (the candidate: ")


def test_work_after_return_or_outliving_the_stream_needs_device_sync():
    assert device_sync_reason(None) == "" and device_sync_reason(ONE_STREAM) == ""
    late = CallProfile(kernel_ms=1.0, span_ms=1.0, launches=2, streams=1, after_return=2)
    assert "launched after forward returned" in device_sync_reason(late)


# -- the paired speedup ------------------------------------------------------------------------


EAGER = P.TimingProtocol("eager", "stream")


def test_identical_sides_read_exactly_one():
    rounds = [stats([1.0, 1.1, 0.9])] * 6
    result = paired_speedup(rounds, rounds, EAGER)
    assert result.speedup == 1.0 and result.low == 1.0 and result.high == 1.0 and result.rounds == 6


def test_drift_that_falls_on_both_sides_of_a_round_cancels():
    # clocks and host load drift round to round (x1 .. x1.6); the candidate is twice as fast throughout
    drift = [1.0, 1.3, 1.1, 1.6, 1.2, 1.45]
    reference = [stats([4.0 * d] * 5) for d in drift]
    candidate = [stats([2.0 * d] * 5) for d in drift]
    result = paired_speedup(reference, candidate, EAGER)
    assert result.speedup == pytest.approx(2.0) and result.low == pytest.approx(2.0) and result.high == pytest.approx(2.0)
    # an unpaired ratio of pooled medians would carry the drift's spread instead
    assert result.reference.n == 30 and result.protocol == "eager, stream sync"


def test_the_interval_widens_with_noisy_rounds_and_holds_the_speedup():
    reference = [stats([r] * 3) for r in (1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 1.0)]
    candidate = [stats([1.0] * 3)] * 8
    result = paired_speedup(reference, candidate, EAGER)
    assert result.low < result.speedup < result.high
    assert result.low >= 0.9 and result.high <= 1.3
    assert paired_speedup(reference, candidate, EAGER) == result  # the bootstrap is seeded: same rounds, same interval


def test_both_sides_lose_the_same_overhead():
    # identical 20 us calls; the reference's rounds happened to estimate a smaller empty region
    def side(overhead):
        return [TimingStats.from_samples([0.021] * 5, timer="cuda_events", warmup_calls=1, stopped_by="target_rse", overhead_ms=overhead, subtract=True)] * 4
    result = paired_speedup(side(0.0008), side(0.0012), EAGER)
    assert result.speedup == pytest.approx(1.0) and result.reference.overhead_ms == pytest.approx(0.001)
    # each side's own estimate would have read 0.0202 / 0.0198 = 1.02x for identical code


def test_uneven_rounds_are_refused():
    with pytest.raises(ValueError):
        paired_speedup([stats([1.0])] * 3, [stats([1.0])] * 2, EAGER)


# -- the parent's side of the rounds -----------------------------------------------------------


class FakeJudge:
    """Answers PrepareTiming and TimeRound like a judge, and records what it was asked when."""

    def __init__(self, ready=P.Ready(), quiet=None):
        self.ready = ready
        self.quiet = quiet
        self.asked = []

    def request(self, message, limit):
        if isinstance(message, P.PrepareTiming):
            self.asked.append(("prepare", None, None))
            return self.ready
        assert isinstance(message, P.TimeRound)
        self.asked.append(("round", message.round, message.protocol, self.quiet.held if self.quiet else None))
        return P.RoundTimed(message.round, stats([2.0] * 4))


TIMING = types.SimpleNamespace(rounds=4, max_rounds=4, interval=0.02, mode="eager", sync="auto", hold=True)


def _drive(pairing, worker_ready=P.Ready(), candidate_ms=1.0):
    """Play the worker: ready, then a round each time the parent asks for one."""
    reply = pairing.on_ready(worker_ready)
    played = []
    while reply["round"] is not None:
        ask = P.decode(reply["round"])
        played.append((ask.round, ask.protocol))
        reply = pairing.on_round(P.RoundTimed(ask.round, stats([candidate_ms] * 4)))
    return played


def test_the_parent_walks_the_schedule_and_both_sides_get_the_same_protocol():
    judge = FakeJudge()
    pairing = Pairing(judge, 7, TIMING, 30.0)
    played = _drive(pairing, P.Ready(needs_device="its profiled call ran GPU work on 3 streams"))
    assert [k for k, _ in played] == [0, 1, 2, 3]
    assert [a[1] for a in judge.asked if a[0] == "round"] == [0, 1, 2, 3]
    protocols = {p for _, p in played} | {a[2] for a in judge.asked if a[0] == "round"}
    assert len(protocols) == 1 and protocols.pop().sync == "device"
    timing, speedup = pairing.result()
    assert speedup.speedup == pytest.approx(2.0) and timing.n == 16 and timing.sync == "device"
    assert speedup.reference.median_ms == pytest.approx(2.0)


class NoisyJudge(FakeJudge):
    """A reference whose rounds swing by +-20%: the speedup's interval stays wide."""

    def request(self, message, limit):
        reply = super().request(message, limit)
        if isinstance(message, P.TimeRound):
            return P.RoundTimed(message.round, stats([2.0 * (1.2 if message.round % 3 else 0.8)] * 4))
        return reply


def test_noisy_rounds_get_more_rounds_two_at_a_time_up_to_the_limit():
    timing = types.SimpleNamespace(rounds=4, max_rounds=8, interval=0.02, mode="eager", sync="auto", hold=True)
    judge = NoisyJudge()
    pairing = Pairing(judge, 1, timing, 30.0)
    played = _drive(pairing)
    assert [k for k, _ in played] == list(range(8)) and [a[1] for a in judge.asked if a[0] == "round"] == list(range(8))
    assert pairing.result()[1].rounds == 8


def test_steady_rounds_stop_at_the_configured_count():
    timing = types.SimpleNamespace(rounds=4, max_rounds=16, interval=0.02, mode="eager", sync="auto", hold=True)
    pairing = Pairing(FakeJudge(), 1, timing, 30.0)
    assert len(_drive(pairing)) == 4 and pairing.result()[1].rounds == 4


def _drive_timed(pairing, times):
    """Play a worker whose rounds read times[protocol.timing_mode, protocol.sync] ms."""
    reply = pairing.on_ready(P.Ready())
    played = []
    while reply["round"] is not None:
        ask = P.decode(reply["round"])
        played.append((ask.round, ask.protocol.timing_mode, ask.protocol.sync))
        reply = pairing.on_round(P.RoundTimed(ask.round, stats([times[ask.protocol.timing_mode, ask.protocol.sync]] * 4)))
    return played


GRAPH_TIMING = types.SimpleNamespace(rounds=2, max_rounds=2, interval=0.02, mode="graph", sync="auto", hold=True)


def test_a_time_below_the_bytes_floor_is_re_timed_once_eagerly_on_both_sides():
    judge = FakeJudge()
    pairing = Pairing(judge, 1, GRAPH_TIMING, 30.0, problem_timing=ProblemTiming("graph", "launch-bound", floor_ms=0.5))
    played = _drive_timed(pairing, {("graph", "stream"): 0.001, ("eager", "stream"): 1.0})  # an empty replay, then the real call
    assert played == [(0, "graph", "stream"), (1, "graph", "stream"), (0, "eager", "stream"), (1, "eager", "stream")]
    assert [(a[1], a[2].timing_mode, a[2].sync) for a in judge.asked if a[0] == "round"] == [(0, "graph", "stream"), (1, "graph", "stream"), (0, "eager", "stream"), (1, "eager", "stream")]
    timing, speedup = pairing.result()
    assert timing.median_ms == pytest.approx(1.0) and speedup.speedup == pytest.approx(2.0) and speedup.protocol == "eager, stream sync"
    assert timing.fallback.startswith("re-timed eagerly: under graph, stream sync its median 0.001 ms was below the bytes floor 0.5 ms")


def test_an_eager_time_below_the_bytes_floor_is_re_timed_with_device_sync():
    eager = types.SimpleNamespace(rounds=2, max_rounds=2, interval=0.02, mode="eager", sync="auto", hold=True)
    pairing = Pairing(FakeJudge(), 1, eager, 30.0, problem_timing=ProblemTiming("eager", floor_ms=0.5))
    played = _drive_timed(pairing, {("eager", "stream"): 0.001, ("eager", "device"): 1.0})  # work that escaped the calling stream
    assert [p[1:] for p in played] == [("eager", "stream")] * 2 + [("eager", "device")] * 2
    assert pairing.result()[0].fallback.startswith("re-timed eagerly with device sync: under eager, stream sync")


@pytest.mark.parametrize("plan, times, rounds", [
    (ProblemTiming("graph", floor_ms=0.5), {("graph", "stream"): 1.0}, 2),  # above the floor: timed once
    (ProblemTiming("graph", floor_ms=0.0), {("graph", "stream"): 0.001}, 2),  # no floor known: nothing to compare
    (ProblemTiming("graph", floor_ms=0.5), {("graph", "stream"): 0.001, ("eager", "stream"): 0.001}, 4),  # still below: re-timed once, not again
], ids=["above-the-floor", "no-floor", "still-below"])
def test_the_floor_re_time_happens_at_most_once_and_only_below_the_floor(plan, times, rounds):
    pairing = Pairing(FakeJudge(), 1, GRAPH_TIMING, 30.0, problem_timing=plan)
    assert len(_drive_timed(pairing, times)) == rounds and pairing.result() is not None


def test_a_round_reported_out_of_turn_is_refused():
    pairing = Pairing(FakeJudge(), 1, TIMING, 30.0)
    reply = pairing.on_ready(P.Ready())
    ask = P.decode(reply["round"])
    with pytest.raises(ValueError, match="out of turn"):
        pairing.on_round(P.RoundTimed(ask.round + 1, stats([1.0])))


def test_a_worker_that_stops_early_gives_no_speedup():
    pairing = Pairing(FakeJudge(), 1, TIMING, 30.0)
    reply = pairing.on_ready(P.Ready())
    pairing.on_round(P.RoundTimed(P.decode(reply["round"]).round, stats([1.0])))
    pairing.close()
    assert pairing.result() is None


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stopped(pid, want=True):
    """Whether the process is (or, with want=False, is no longer) stopped, within a second: signals arrive asynchronously."""
    for _ in range(100):
        if (_state(pid) == "T") == want:
            return True
        time.sleep(0.01)
    return False


def test_builds_are_paused_while_rounds_run_and_resumed_after():
    build = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    quiet = QuietHost("pause", 1)
    try:
        quiet.register_background(build)
        judge = FakeJudge(quiet=quiet)
        pairing = Pairing(judge, 1, TIMING, 30.0, quiet=quiet)
        reply = pairing.on_ready(P.Ready())
        assert quiet.held and _stopped(build.pid)  # stopped while the worker times its round
        while reply["round"] is not None:
            ask = P.decode(reply["round"])
            reply = pairing.on_round(P.RoundTimed(ask.round, stats([1.0])))
        assert all(a[3] for a in judge.asked if a[0] == "round")  # and while the judge timed each of its rounds
        assert not quiet.held and _stopped(build.pid, want=False)
    finally:
        quiet.close()
        build.kill()
        build.wait()


def test_a_worker_that_ends_mid_rounds_releases_the_host():
    quiet = QuietHost("pause", 1)
    pairing = Pairing(FakeJudge(), 1, TIMING, 30.0, quiet=quiet)
    pairing.on_ready(P.Ready())
    assert quiet.held
    pairing.close()
    assert not quiet.held
    quiet.close()


# -- the null candidate (real workers on the CPU) ----------------------------------------------


@pytest.mark.slow
def test_the_null_candidate_is_checked_timed_and_recorded_as_the_floor(make_config):
    cfg = make_config("timing.null_candidate=on")
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    candidate = Candidate("cpp_fused", cfg.path(cfg.solutions_dir) / problem.name / "cpp_fused.py")
    store = RunStore(cfg.path(cfg.results_dir), "null")
    (record,) = evaluate_problem(problem, [candidate], cfg, "cpu", store)
    (reference,) = [r for r in read_records(store.records_path) if isinstance(r, ReferenceRecord)]
    floor = reference.timing.null_floor
    assert floor is not None and floor.status == Status.CORRECT.value, floor
    assert floor.paired is not None and 4 <= floor.paired.rounds <= 6 and floor.speedup == floor.paired.speedup
    assert reference.timing.stats == floor.paired.reference  # the reference's own timing: its rounds with the null
    assert record.decision.status is Status.CORRECT and record.timing.paired is not None
    assert record.timing.paired.reference != floor.paired.reference  # each candidate has rounds of its own
    assert store.log_path(problem.name, "_null").exists()


@pytest.mark.slow
def test_the_null_candidate_is_off_by_default_on_the_cpu(make_config):
    cfg = make_config()
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    candidate = Candidate("cpp_fused", cfg.path(cfg.solutions_dir) / problem.name / "cpp_fused.py")
    store = RunStore(cfg.path(cfg.results_dir), "no-null")
    evaluate_problem(problem, [candidate], cfg, "cpu", store)
    (reference,) = [r for r in read_records(store.records_path) if isinstance(r, ReferenceRecord)]
    assert reference.timing.null_floor is None and reference.timing.stats is None
