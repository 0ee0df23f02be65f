"""The quiet host: background work stopped while a lane times, and CPUs split between lanes and builds."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness.parent import quiet
from harness.parent.prebuild import BuildAhead
from harness.parent.quiet import QuietHost
from harness.parent.resources import RunResources, quiet_mode
from harness.parent.supervise import Launcher

SLEEP = "import time; time.sleep(60)"
# a parent and a child of its own in one process group; the child's pid on the first line
WITH_CHILD = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"
THREADS = "import threading, time; [threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(3)]; print('ready', flush=True); time.sleep(60)"


def state(pid):
    """Field 3 of /proc/<pid>/stat: 'T' when stopped; None when gone."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


def eventually(check, seconds=15.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def stopped(pid):
    return eventually(lambda: state(pid) == "T")


def running(pid):
    return eventually(lambda: state(pid) not in ("T", None))


@pytest.fixture
def spawn():
    """Start `python -c CODE` as the leader of its own process group; every group ends with the test."""
    started = []

    def start(code, **kwargs):
        proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def hosts():
    """Make a host for the test; it is closed after."""
    made = []

    def make(mode, lanes=1, **kwargs):
        made.append(QuietHost(mode, lanes, **kwargs))
        return made[-1]

    yield make
    for host in reversed(made):
        host.close()


def test_a_hold_stops_registered_background_groups_and_release_resumes_them(spawn):
    host = QuietHost("pause")
    proc = spawn(WITH_CHILD, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    host.register_background(proc)
    assert running(proc.pid) and running(child)
    with host.hold():
        assert host.held and host.holders == 1
        assert stopped(proc.pid) and stopped(child)  # the whole group, compilers included
    assert not host.held
    assert running(proc.pid) and running(child)
    assert host.paused_seconds > 0


def test_nested_holds_from_two_threads_resume_only_when_both_leave(spawn):
    host = QuietHost("both", cpus=[0])  # too few CPUs to pin: pausing alone
    proc = spawn(SLEEP)
    host.register_background(proc)
    first_in, second_in, first_leave, first_out, second_leave = (threading.Event() for _ in range(5))

    def lane(entered, leave, out=None):
        with host.hold():
            entered.set()
            leave.wait(30)
        if out is not None:
            out.set()

    threads = [threading.Thread(target=lane, args=(first_in, first_leave, first_out)), threading.Thread(target=lane, args=(second_in, second_leave))]
    for thread in threads:
        thread.start()
    try:
        assert first_in.wait(10) and second_in.wait(10)
        assert host.holders == 2 and stopped(proc.pid)
        first_leave.set()
        assert first_out.wait(10)
        assert host.holders == 1
        time.sleep(0.2)
        assert state(proc.pid) == "T"  # the other lane still times
    finally:
        first_leave.set()
        second_leave.set()
        for thread in threads:
            thread.join(10)
    assert host.holders == 0 and running(proc.pid)


def test_a_process_registered_during_a_hold_is_stopped_at_once(spawn):
    host = QuietHost("pause")
    with host.hold():
        proc = spawn(SLEEP)
        host.register_background(proc)
        assert stopped(proc.pid)
    assert running(proc.pid)


def test_unregistering_a_stopped_process_resumes_it(spawn):
    host = QuietHost("pause")
    proc = spawn(SLEEP)
    host.register_background(proc)
    with host.hold():
        assert stopped(proc.pid)
        host.unregister(proc)
        assert running(proc.pid)  # no longer background: it runs though the lane still holds
        assert proc.pid not in host.background_pids


def test_closing_the_host_resumes_what_a_hold_stopped(spawn):
    host = QuietHost("pause")
    proc = spawn(SLEEP)
    host.register_background(proc)
    with host.hold():
        assert stopped(proc.pid)
        host.close()  # a run that ends (Ctrl-C, SIGTERM) while a lane still holds
        assert running(proc.pid)
        later = spawn(SLEEP)
        host.register_background(later)
        with host.hold():
            time.sleep(0.2)
            assert state(later.pid) != "T"
    assert not host.held


def test_a_taken_prestarted_worker_runs_even_if_a_hold_stopped_it_while_spare(hosts):
    host = hosts("pause")
    launcher = Launcher(prestart=True, quiet=host)
    taken = []
    try:
        taken.append(launcher.take())
        spare = launcher._spare.proc
        assert spare.pid in host.background_pids
        with host.hold():
            assert stopped(spare.pid)
            taken.append(launcher.take())
            assert taken[-1].proc is spare
            assert running(spare.pid)  # handed a job: a timing process now
            assert spare.pid not in host.background_pids and host.timing_pids[spare.pid] == 0
            assert stopped(launcher._spare.proc.pid)  # the next spare waits while the lane times
        assert running(launcher._spare.proc.pid)
    finally:
        for started in taken:
            started.proc.kill()
            started.proc.wait()
            launcher.release(started.proc)
        launcher.close()
    assert not host.background_pids and not host.timing_pids


def test_pin_sets_the_affinity_of_every_thread(spawn):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs")
    proc = spawn(THREADS, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    tids = quiet.task_ids(proc.pid)
    assert len(tids) >= 4
    assert quiet.pin(proc.pid, [cpus[-1]])
    assert {tid: os.sched_getaffinity(tid) for tid in tids} == {tid: {cpus[-1]} for tid in tids}


def test_background_and_timing_processes_get_their_own_cpus(spawn, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs")
    monkeypatch.setattr(quiet, "MIN_BACKGROUND_CPUS", 1)  # a split that fits a small machine: one CPU each
    host = QuietHost("pin", cpus_per_lane=1)
    assert host.pinning and host.lane_cpus(0) == (cpus[-1],) and host.background_cpus == tuple(cpus[:-1])
    build = spawn(THREADS, stdout=subprocess.PIPE, text=True)
    judge = spawn(THREADS, stdout=subprocess.PIPE, text=True)
    for proc in (build, judge):
        assert proc.stdout.readline().strip() == "ready"
    host.register_background(build)
    host.register_timing(judge, lane_index=0)
    assert all(os.sched_getaffinity(tid) == set(cpus[:-1]) for tid in quiet.task_ids(build.pid))
    assert all(os.sched_getaffinity(tid) == {cpus[-1]} for tid in quiet.task_ids(judge.pid))
    host.register_timing(build, lane_index=0)  # a spare handed out moves to the lane's CPUs
    assert all(os.sched_getaffinity(tid) == {cpus[-1]} for tid in quiet.task_ids(build.pid))
    with host.hold():
        time.sleep(0.2)
        assert state(build.pid) != "T" and state(judge.pid) != "T"  # pin alone never stops anything


def test_cpus_are_split_with_two_per_lane_from_the_end_and_the_rest_for_builds():
    host = QuietHost("both", lanes=2, cpus=range(16))
    assert host.lane_cpus(0) == (14, 15) and host.lane_cpus(1) == (12, 13)
    assert host.lane_cpus(2) is None
    assert host.background_cpus == tuple(range(12))
    assert host.pin_note == ""
    assert host.describe() == "pause+pin: lanes on CPUs 12-15, builds on 0-11"
    assert QuietHost("pin", cpus=[0, 2, 4, 5, 6, 7]).describe() == "pin: lanes on CPUs 6-7, builds on 0,2,4-5"


def test_too_few_cpus_skip_pinning_with_a_one_line_note():
    host = QuietHost("both", lanes=2, cpus=range(5))
    assert not host.pinning and host.lane_cpus(0) is None and host.background_cpus is None
    assert host.pin_note == "pinning skipped: 5 CPUs available, 2 lanes need 6 (2 per lane, 2 for builds)"
    assert host.describe() == f"pause; {host.pin_note}"
    assert QuietHost("pause", lanes=2, cpus=range(5)).pin_note == ""  # pinning was not asked for


def test_off_touches_nothing(spawn):
    host = QuietHost("off")
    proc = spawn(SLEEP)
    before = os.sched_getaffinity(proc.pid)
    host.register_background(proc)
    host.register_timing(proc)
    with host.hold():
        time.sleep(0.2)
        assert state(proc.pid) != "T"
    assert os.sched_getaffinity(proc.pid) == before
    assert not host.background_pids and host.paused_seconds == 0
    assert host.describe() == "off"
    assert QuietHost().quiet_mode == "off" and Launcher().quiet.quiet_mode == "off"  # what code given no host uses


def test_processes_that_exited_are_dropped_without_errors(spawn):
    host = QuietHost("pause")
    gone, alive = spawn(SLEEP), spawn(SLEEP)
    host.register_background(gone)
    host.register_background(alive)
    with host.hold():
        assert stopped(gone.pid)
        os.killpg(gone.pid, signal.SIGKILL)
        gone.wait()
    assert running(alive.pid)
    assert gone.pid not in host.background_pids
    host.unregister(gone)
    reaped = spawn("pass")
    reaped.wait()
    host.register_background(reaped.pid)  # a bare pid of a process already reaped
    with host.hold():
        pass
    host.unregister(reaped.pid)
    assert host.background_pids == {alive.pid}


@pytest.mark.slow
def test_build_processes_are_background_while_they_run(hosts, tmp_path):
    host = hosts("pause")
    candidate = tmp_path / "plain.py"
    candidate.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    builds = BuildAhead(tmp_path / "cache", "cpu", builds=1, jobs_per_build=1, timeout=300, quiet=host)
    try:
        with host.hold():
            builds.submit(candidate)
            assert eventually(lambda: len(host.background_pids) == 1)
            (pid,) = host.background_pids
            assert stopped(pid)  # submitted while a lane times: it waits
            assert not builds.futures[candidate].done()
        outcome = builds.wait(candidate)
    finally:
        builds.close()
    assert outcome.outcome == "nothing", outcome  # finished: torch only, nothing to build
    assert not host.background_pids
    assert state(pid) is None  # ended and reaped


def test_the_run_resumes_everything_however_it_ends(make_config, spawn, isolated_tmp):
    cfg = make_config("timing.quiet=pause")
    proc = spawn(SLEEP)
    holding, release = threading.Event(), threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with RunResources.open(cfg, "cpu") as resources:
            host = resources.quiet
            assert host.quiet_mode == "pause"

            def lane():
                with host.hold():
                    holding.set()
                    release.wait(30)

            host.register_background(proc)
            thread = threading.Thread(target=lane, daemon=True)
            thread.start()
            assert holding.wait(10) and stopped(proc.pid)
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) while a lane still times
    assert running(proc.pid)
    with host.hold():  # a closed host stops nothing more
        time.sleep(0.2)
        assert state(proc.pid) != "T"
    release.set()
    thread.join(10)


def test_a_cpu_run_pauses_but_never_pins_and_ray_lanes_leave_the_host_off(make_config):
    assert quiet_mode(make_config("timing.quiet=both"), "cpu") == "pause"
    assert quiet_mode(make_config("timing.quiet=pin"), "cuda") == "pin"
    assert quiet_mode(make_config("timing.quiet=both"), "cuda") == "both"
    assert quiet_mode(make_config("timing.quiet=both", "executor=ray"), "cuda") == "off"


# -- lanes sharing a GPU (workers.lanes_per_gpu): its gate, no signals ------------------------------------

GIB = 1 << 30


def in_thread(target):
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_lane_timing_on_a_shared_gpu_signals_no_process_of_the_other_lanes(spawn, hosts):
    host = hosts("off", lanes=4, lanes_per_gpu=2)  # lanes 0, 1 on GPU 0; lanes 2, 3 on GPU 1; no CPU quieting asked
    peer, same, other_gpu = spawn(SLEEP), spawn(SLEEP), spawn(SLEEP)
    host.register_timing(same, 0)
    host.register_timing(peer, 1)
    host.register_timing(other_gpu, 2)
    with host.hold(0):
        time.sleep(0.1)
        assert all(running(p.pid) for p in (peer, same, other_gpu))  # checks on the GPU go on; they are gated, not stopped


def test_a_second_lane_waits_for_its_turn_on_a_shared_gpu(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2)
    order = []
    first_in, first_leave = threading.Event(), threading.Event()

    def first():
        with host.hold(0):
            order.append("0 in")
            first_in.set()
            first_leave.wait(10)
            order.append("0 out")

    def second():
        first_in.wait(10)
        with host.hold(1):
            order.append("1 in")

    threads = [in_thread(first), in_thread(second)]
    first_in.wait(10)
    time.sleep(0.2)
    assert order == ["0 in"]  # lane 1 has not got the GPU while lane 0 times
    first_leave.set()
    for thread in threads:
        thread.join(10)
    assert order == ["0 in", "0 out", "1 in"]


def test_a_timing_waits_for_the_other_lanes_work_to_reach_a_step_boundary_and_the_step_waits_for_the_timing(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2)
    order = []
    checking, timing_asked = threading.Event(), threading.Event()

    def checker():  # lane 1: a candidate's checks, one step after another
        with host.lane_work(1):
            order.append("1 checks")
            checking.set()
            timing_asked.wait(10)
            time.sleep(0.2)  # a checked call still running when the timing is asked for
            order.append("1 step ends")
            host.step(1)  # its worker waits for the answer: the timing goes first
            order.append("1 checks again")

    def timer():  # lane 0: the go-ahead into timing
        checking.wait(10)
        timing_asked.set()
        with host.hold(0):
            order.append("0 times")
            time.sleep(0.2)
            order.append("0 done")

    threads = [in_thread(checker), in_thread(timer)]
    for thread in threads:
        thread.join(10)
    assert order == ["1 checks", "1 step ends", "0 times", "0 done", "1 checks again"]
    gate = host.gate(0)
    assert gate is host.gate(1) and gate is not host.gate(2)  # one gate per GPU
    assert quiet_gate_violations(host, 0) == []


def quiet_gate_violations(host, lane):
    from harness.parent.gpugate import violations

    gate = host.gate(lane)
    return violations(gate.intervals(), gate.slots, gate.memory)


def test_a_lanes_nested_holds_keep_the_gpu_until_the_outermost_ends(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2)
    got = threading.Event()
    with host.hold(0):
        with host.hold(0):  # a pairing's hold inside the pass's hold of the whole timing phase
            pass
        in_thread(lambda: (host.hold(1).__enter__(), got.set()))
        assert not got.wait(0.3)  # the outer hold still has the GPU
    assert got.wait(10)


def test_a_lane_timing_inside_its_own_work_gives_its_shared_grant_up_and_takes_it_again(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2)
    with host.lane_work(0):
        with host.hold(0):  # the go-ahead into timing from inside the candidate's work: no deadlock on itself
            pass
        assert host.gate(0).queued() == (0, 0)
    kinds = [i.kind for i in host.gate(0).intervals()]
    assert kinds == ["shared", "exclusive", "shared"]


def test_lanes_whose_work_fits_their_share_of_the_card_check_at_once(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2, card_memory=10 * GIB)
    host.lane_memory(0, 5 * GIB)
    host.lane_memory(1, 5 * GIB)
    inside = threading.Event()
    with host.lane_work(0):
        in_thread(lambda: host.lane_work(1).__enter__() and None or inside.set())
        assert inside.wait(10)  # 5 + 5 GiB fit the card's 10
    assert all(i.kind == "shared" for i in host.gate(0).intervals())


def test_a_lane_whose_work_needs_more_than_its_share_of_the_card_works_with_the_gpu_to_itself(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2, card_memory=10 * GIB)
    host.lane_memory(0, 6 * GIB)  # over its share (5 GiB): the other lanes' judges keep their tensors between grants
    inside = threading.Event()
    with host.lane_work(0):
        in_thread(lambda: host.lane_work(1).__enter__() and None or inside.set())
        assert not inside.wait(0.3)  # lane 1's checks wait while lane 0's run
        with host.hold(0):  # its timing: it has the GPU already, no wait on itself
            pass
        host.step(0)
        assert not inside.is_set()
    assert inside.wait(10)
    kinds = [i.kind for i in host.gate(0).intervals()]
    assert kinds[0] == "exclusive" and quiet_gate_violations(host, 0) == []


def test_a_lane_that_needs_more_than_the_card_is_admitted_and_works_alone(hosts):
    host = hosts("off", lanes=2, lanes_per_gpu=2, card_memory=10 * GIB)
    host.lane_memory(0, 30 * GIB)  # never refused by the gate: the judge says whether the problem fits the card
    with host.lane_work(0):
        pass
    assert [i.kind for i in host.gate(0).intervals()] == ["exclusive"]


def test_a_prestarted_memcheck_run_is_pinned_as_background_but_never_stopped(spawn, hosts):
    host = hosts("pause")
    tool, build = spawn(SLEEP), spawn(SLEEP)
    host.register_background(tool, stoppable=False)
    host.register_background(build)
    with host.hold(0):
        assert stopped(build.pid)
        time.sleep(0.1)
        assert running(tool.pid)  # compute-sanitizer stopped and continued did not finish


def test_many_lanes_checking_and_timing_at_once_keep_the_gates_promises(hosts):
    host = hosts("off", lanes=4, lanes_per_gpu=4, card_memory=16 * GIB)

    def lane(index):
        host.lane_memory(index, (index + 2) * GIB)  # lane 3's 5 GiB is over its share of 4: it works alone
        for _ in range(8):
            with host.lane_work(index):
                for _ in range(3):
                    time.sleep(0.003)
                    host.step(index)
                with host.hold(index):
                    time.sleep(0.002)

    threads = [in_thread(lambda i=i: lane(i)) for i in range(4)]
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert quiet_gate_violations(host, 0) == []
    labels = [i.label for i in host.gate(0).intervals() if i.kind == "exclusive"]
    assert sorted(label for label in labels if "too big" not in label) == sorted(f"lane {i}" for i in range(3) for _ in range(8))
    assert labels.count("lane 3 (too big to share)") >= 8  # its timings inside its exclusive work


def test_lanes_sharing_a_gpu_pause_nothing_whatever_the_quiet_mode(spawn, hosts):
    host = hosts("both", lanes=2, lanes_per_gpu=2)
    build = spawn(SLEEP)
    host.register_background(build)
    with host.hold(0):
        time.sleep(0.1)
        assert running(build.pid)  # the gate keeps timings apart; builds are pinned at most


def test_a_lanes_limits_stand_still_only_while_it_waits_at_its_gate(hosts):
    host = hosts("pause", lanes=2, lanes_per_gpu=2)
    mine, other = host.lane_clock(0), host.lane_clock(1)
    before_mine, before_other = mine(), other()
    with host.hold(0):
        waiting = in_thread(lambda: host.lane_work(1).__enter__())  # lane 1 wants to check meanwhile: it waits
        time.sleep(0.3)
    waiting.join(10)
    assert mine() - before_mine >= 0.3  # its own turn counts: a call that hangs while timed still runs out of time
    assert other() - before_other < 0.2  # lane 1 waited at the gate meanwhile: its limits did not run


def test_a_single_lanes_limits_run_through_its_own_holds(hosts):
    host = hosts("pause")
    clock = host.lane_clock(0)
    before = clock()
    with host.hold(0):
        time.sleep(0.2)
    assert clock() - before >= 0.2


def test_lanes_sharing_a_gpu_are_described_in_the_run_header():
    assert "2 lanes per GPU" in QuietHost("off", lanes=2, lanes_per_gpu=2).describe()
    assert "per GPU" not in QuietHost("off").describe()
    assert QuietHost("off").gate(0) is None  # a lane alone on its GPU needs no gate
