"""The lanes' simulator (benchmarks/lanes_sim.py) replays a state file through the product's own lane gate."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import lanes_sim  # noqa: E402


def state(tmp_path, rows):
    path = tmp_path / "state.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def row(kernel, problem, status="correct", build=2.0, time_s=1.0):
    return {
        "kernel": kernel,
        "problem": problem,
        "status": status,
        "ahead": {"seconds": build},
        "build_s": 0,
        "reference_wall_s": 1.0,
        "phase_s": {"check": 0.5, "load": 0.1, "time": time_s if status == "correct" else 0.0},
    }


def test_only_judged_kernels_are_replayed_with_their_phases(tmp_path):
    path = state(
        tmp_path,
        [
            row("a/1", "a"),
            row("a/2", "a", status="incorrect"),
            {"kernel": "b/1", "problem": "b", "status": "no record"},
        ],
    )
    kernels = lanes_sim.replayed(path)
    assert [k.name for k in kernels] == ["a/1", "a/2"]
    assert kernels[0].check == 0.6 and kernels[0].time == 1.0 and kernels[0].passed
    assert not kernels[1].passed


def test_more_lanes_overlap_checks_and_memcheck_and_keep_the_gates_promises(tmp_path):
    rows = [row(f"p{i % 3}/{i}", f"p{i % 3}", build=1.0, time_s=0.5) for i in range(12)]
    kernels = lanes_sim.replayed(state(tmp_path, rows))
    # simulate() asserts the gate's promises on every run
    rate, alone, peak = lanes_sim.simulate(kernels, 4, builds=8, build_scale=1.0, memcheck_s=4.0)
    assert peak >= 2  # memcheck and checks of several lanes overlapped; only timings took turns
    assert rate > 0 and 0 < alone < 1


def test_each_kernels_memcheck_seconds_come_from_the_state_unless_one_figure_is_given(tmp_path):
    kept = {**row("a/1", "a"), "sanitizer": [["memcheck", "clean", "0 errors", 3.5], ["racecheck", "clean", "", 1.0]]}
    old = row("a/2", "a")  # a state line from before the seconds were kept
    kernels = lanes_sim.replayed(state(tmp_path, [kept, old]))
    assert [k.memcheck for k in kernels] == [4.5, None]
    assert [lanes_sim.memcheck(k, None) for k in kernels] == [4.5, lanes_sim.DEFAULT_MEMCHECK_S]
    assert [lanes_sim.memcheck(k, 2.0) for k in kernels] == [2.0, 2.0]


def test_a_state_whose_memcheck_runs_are_shorter_predicts_a_faster_lane(tmp_path):
    rows = [row(f"p{i % 3}/{i}", f"p{i % 3}", build=0.5, time_s=0.5) for i in range(8)]
    slow = lanes_sim.replayed(state(tmp_path, [{**r, "sanitizer": [["memcheck", "clean", "", 8.0]]} for r in rows]))
    fast = lanes_sim.replayed(state(tmp_path, [{**r, "sanitizer": [["memcheck", "clean", "", 1.0]]} for r in rows]))
    slow_rate, _, _ = lanes_sim.simulate(slow, 1, builds=8, build_scale=1.0, memcheck_s=None)
    fast_rate, _, _ = lanes_sim.simulate(fast, 1, builds=8, build_scale=1.0, memcheck_s=None)
    assert fast_rate > 1.5 * slow_rate


def test_a_judge_started_ahead_is_waited_for_only_until_it_is_ready(tmp_path):
    waited = {**row("a/1", "a"), "reference_wall_s": 5.0, "reference_phase_s": {"judge start-up": 4.0}}
    (kernel,) = lanes_sim.replayed(state(tmp_path, [waited]))
    assert kernel.judge_startup == 4.0
    recorded = lanes_sim.JudgeQueue(lanes_sim.Judges())
    assert [recorded.reference_s(kernel, t) for t in (0.0, 3.0)] == [5.0, 5.0]  # no judges modelled: as recorded
    two = lanes_sim.JudgeQueue(lanes_sim.Judges(ahead=2, ready_s=10.0))
    assert two.reference_s(kernel, 0.0) == 5.0  # the lane's first judge starts cold: its recorded start-up stands
    assert two.reference_s(kernel, 4.0) == 1.0 + 6.0  # started at 0, ready at 10: 6 s of waiting, not 4 recorded
    assert two.reference_s(kernel, 12.0) == 1.0  # the other started at 0 too: ready by 12
    assert two.reference_s(kernel, 13.0) == 1.0 + 1.0  # the one started at 4 is ready at 14: 1 s of waiting
    one = lanes_sim.JudgeQueue(lanes_sim.Judges(ahead=1, ready_s=10.0))
    assert [one.reference_s(kernel, t) for t in (0.0, 4.0, 12.0)] == [5.0, 7.0, 3.0]  # one ahead: started at 4, ready at 14


def test_two_judges_ahead_predict_a_faster_lane_when_problems_come_faster_than_one_readies(tmp_path):
    rows = [{**row(f"p{i}/1", f"p{i}", build=0.1), "reference_wall_s": 4.0, "reference_phase_s": {"judge start-up": 3.0}}
            for i in range(8)]
    kernels = lanes_sim.replayed(state(tmp_path, rows))
    one, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, 0.5, lanes_sim.Judges(ahead=1, ready_s=8.0))
    two, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, 0.5, lanes_sim.Judges(ahead=2, ready_s=8.0))
    assert two > 1.2 * one


def test_memcheck_beside_the_next_kernel_hides_behind_its_checks_and_never_beside_a_timing(tmp_path):
    # one problem, 10 kernels: checks 2 s, timing 0.5 s, memcheck 1.5 s. In line, 4 s a kernel; beside the next
    # kernel's checks, 2.5 s (and the last memcheck at the end: 1.49x in all); the timing still waits for it, so never
    # faster than with no memcheck at all
    rows = [{**row(f"a/{i}", "a", build=0.0, time_s=0.5), "phase_s": {"check": 2.0, "time": 0.5},
             "sanitizer": [["memcheck", "clean", "", 1.5]]} for i in range(10)]
    kernels = lanes_sim.replayed(state(tmp_path, rows))
    inline, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, None)
    beside, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, None, beside=True)
    without, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, 0.0)
    assert beside > 1.2 * inline  # 1.36 to 1.39 read on a loaded 2-core machine (threads' own overheads)
    assert beside <= 1.05 * without
    # a memcheck longer than the next kernel's checks holds that kernel's timing until it ends
    slow = lanes_sim.replayed(state(tmp_path, [{**r, "sanitizer": [["memcheck", "clean", "", 6.0]]} for r in rows]))
    slow_beside, _, _ = lanes_sim.simulate(slow, 1, 8, 1.0, None, beside=True)
    assert slow_beside < 0.7 * beside


def test_the_staged_pipeline_replays_a_state_with_each_problems_reference_pass_once(tmp_path):
    import pipeline_sim

    rows = [
        {**row("a/1", "a"), "sanitizer": [["memcheck", "clean", "", 3.0]]},
        row("a/2", "a", status="incorrect"),
        {**row("b/1", "b", time_s=2.0), "sanitizer": [["memcheck", "clean", "", 1.5]]},
    ]
    durations = pipeline_sim.from_state(state(tmp_path, rows), None)
    first, failed, other = durations.values()
    assert first.time == 2.0 and first.sanitize == 3.0 and first.check == 0.6 and first.passes  # its timing + a's reference
    assert failed.time == 0.0 and failed.sanitize == 0.0 and not failed.passes  # a's reference already paid
    assert other.time == 3.0 and other.sanitize == 1.5  # b's reference with b's first kernel
    assert len(pipeline_sim.from_state(state(tmp_path, rows), 7)) == 7  # cycled to a count
    rate, exclusive = pipeline_sim.one_gpu(None, 16, 3, 7, [], state(tmp_path, rows))
    assert rate > 0 and 0 < exclusive < 1


def test_a_lane_that_takes_built_kernels_first_is_not_held_by_one_slow_build(tmp_path):
    # 6 kernels of 6 problems, 1 s each on the lane; the second's build takes 8 s, the rest 0.5 s. In order, the lane
    # waits about 7 s for it; taking the built ones first, it judges the other four meanwhile
    rows = [row(f"p{i}/1", f"p{i}", build=8.0 if i == 1 else 0.5, time_s=0.5) for i in range(6)]
    kernels = lanes_sim.replayed(state(tmp_path, rows))
    in_order, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, 0.0, in_order=True)
    built_first, _, _ = lanes_sim.simulate(kernels, 1, 8, 1.0, 0.0)
    assert built_first > 1.1 * in_order


def test_builds_that_start_once_the_header_is_ready_are_cheaper_and_earlier_ones_are_not(tmp_path):
    rows = [row(f"p{i % 4}/{i}", f"p{i % 4}", build=20.0, time_s=0.5) for i in range(8)]
    kernels = lanes_sim.replayed(state(tmp_path, rows))
    plain, _, _ = lanes_sim.simulate(kernels, 1, builds=2, build_scale=1.0, memcheck_s=1.0)
    made_before, _, _ = lanes_sim.simulate(
        kernels, 1, builds=2, build_scale=1.0, memcheck_s=1.0, header=lanes_sim.Header(0.0, 0.5)
    )
    never_ready, _, _ = lanes_sim.simulate(
        kernels, 1, builds=2, build_scale=1.0, memcheck_s=1.0, header=lanes_sim.Header(1e9, 0.5)
    )
    assert made_before > 1.4 * plain  # the builds bind here: half as long, nearly twice the rate
    assert abs(never_ready - plain) < 0.15 * plain  # a header that comes too late changes nothing
