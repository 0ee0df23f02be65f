"""compute-sanitizer runs: the report is read into a verdict, the tool's time limit holds, and a
missing tool is a note, not a failure. (The real tool on a real kernel: tests/test_gpu_integrity.py.)"""
import dataclasses
import importlib.util
import json
import os
import stat
import time

from harness.core import protocol as P
from harness.core.records import SanitizerResult, to_dict
from harness.parent.sanitize import ERRORS_EXIT, find_tool, first_error, read_report, sanitize
from harness.parent.scratch import RunScratch

JOB = P.SanitizeJob("x.py", "problem.py", "", "ModelNew", {}, 3, "builds", False)

MEMCHECK_ERRORS = """\
========= COMPUTE-SANITIZER
[harness] phase load
========= Invalid __global__ write of size 4 bytes
=========     at relu_oob(float *, long)+0x70 in /tmp/build/cheat.cu:12
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f3a10000000 is out of bounds
=========     and is 16,777,217 bytes after the nearest allocation at 0x7f3a0f000000 of size 1,048,576 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2e5a3f] in libcuda.so.1
=========
========= ERROR SUMMARY: 1024 errors
"""
CLEAN = "========= COMPUTE-SANITIZER\n[sanitize] forward ran: 1 outputs\n========= ERROR SUMMARY: 0 errors\n"
RACES = "========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k()+0x10\n=========     and Read access at k()+0x20\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"


def test_the_first_error_and_its_kernel_make_the_reason():
    run = read_report("memcheck", ERRORS_EXIT, MEMCHECK_ERRORS, 12.5)
    assert run == SanitizerResult("memcheck", "errors", "Invalid __global__ write of size 4 bytes at relu_oob(float *, long)+0x70 in /tmp/build/cheat.cu:12", 12.5)
    assert first_error(RACES).startswith("Error: Race reported between Write access at k()+0x10")
    assert read_report("racecheck", 0, RACES).outcome == "errors"  # counted from the summary, whatever the exit code


def test_a_clean_run_needs_the_forward_to_have_completed():
    assert read_report("memcheck", 0, CLEAN).outcome == "clean"
    failed = read_report("memcheck", 1, "========= COMPUTE-SANITIZER\nTraceback (most recent call last):\nRuntimeError: CUDA error: unspecified launch failure\n")
    assert failed.outcome == "failed" and "unspecified launch failure" in failed.detail


def _fake_tool(tmp_path, body):
    path = tmp_path / "compute-sanitizer"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_findings_become_unsafe_memory_with_the_tools_first_error(tmp_path):
    tool = _fake_tool(tmp_path, f"cat <<'EOF'\n{MEMCHECK_ERRORS}EOF\nexit {ERRORS_EXIT}\n")
    runs, found = sanitize(tool, ("memcheck",), 30, JOB, {}, tmp_path)
    assert [r.outcome for r in runs] == ["errors"]
    assert [(code.value, why) for code, why in found] == [("unsafe-memory", "compute-sanitizer memcheck: " + runs[0].detail)]


def test_the_tool_runs_the_forward_from_the_worker_package(tmp_path):
    tool = _fake_tool(tmp_path, 'echo "$@" > "$0.args"\necho "========= ERROR SUMMARY: 0 errors"\n')
    runs, _ = sanitize(tool, ("memcheck",), 30, JOB, {}, tmp_path)
    args = (tmp_path / "compute-sanitizer.args").read_text().split()
    module = args[args.index("-m") + 1]
    assert module == "harness.worker.sanitized" and importlib.util.find_spec(module) is not None  # the candidate's code runs in the sandbox's package
    assert args[args.index("-m") + 2].endswith("sanitize-job.json") and runs[0].tool == "memcheck"


def test_a_tool_run_past_its_limit_is_killed_and_reported(tmp_path):
    tool = _fake_tool(tmp_path, "sleep 60\n")
    started = time.monotonic()
    runs, found = sanitize(tool, ("memcheck",), 1, JOB, {}, tmp_path)
    assert time.monotonic() - started < 20
    assert runs[0].outcome == "timeout" and found == []


def test_a_missing_tool_is_a_note_not_a_finding(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    if os.access("/usr/local/cuda/bin/compute-sanitizer", os.X_OK):
        return  # this machine has the tool where the search ends; the search itself is covered above
    assert find_tool("") is None
    runs, found = sanitize(None, ("memcheck", "racecheck"), 30, JOB, {}, tmp_path)
    assert [r.outcome for r in runs] == ["skipped", "skipped"] and found == []
    assert "not found" in runs[0].detail


def _stdin_tool(tmp_path):
    """A stand-in for compute-sanitizer: notes its arguments, and with the job "-" reads the job
    from stdin (as a prestarted run's child does) into job.json; then reports a clean run."""
    return _fake_tool(tmp_path, f"""echo "$@" >> {tmp_path}/args
for last; do :; done
if [ "$last" = "-" ]; then read job; echo "$job" > {tmp_path}/job.json; fi
printf '{CLEAN}'
""".replace("{CLEAN}", CLEAN.replace("\n", "\\n")))


def test_a_prestarted_run_gets_its_job_on_stdin_and_reports_as_a_fresh_one(tmp_path):
    import json

    from harness.parent.sanitize import Prestarted

    tool = _stdin_tool(tmp_path)
    spare = Prestarted.start(tool, "memcheck", {}, RunScratch.create(tmp_path))
    runs, found = sanitize(tool, ("memcheck",), 30, JOB, {}, tmp_path, spare)
    assert [r.outcome for r in runs] == ["clean"] and found == []
    assert json.loads((tmp_path / "job.json").read_text()) == to_dict(JOB)
    assert (tmp_path / "args").read_text().split()[-1] == "-"
    assert spare.proc.poll() is not None and not spare.scratch.exists()  # it served one job, and left nothing


def test_a_prestarted_run_that_died_waiting_gives_way_to_a_fresh_run(tmp_path):
    from harness.parent.sanitize import Prestarted

    tool = _stdin_tool(tmp_path)
    spare = Prestarted.start(tool, "memcheck", {}, RunScratch.create(tmp_path))
    spare.proc.kill()
    spare.proc.wait()
    runs, _ = sanitize(tool, ("memcheck",), 30, JOB, {}, tmp_path, spare)
    assert [r.outcome for r in runs] == ["clean"]
    assert (tmp_path / "args").read_text().splitlines()[-1].split()[-1].endswith("sanitize-job.json")


def test_a_lane_keeps_one_run_started_ahead_and_ends_it_when_it_closes(tmp_path, make_config):
    from harness.parent.sanitize import LaneSanitizer

    tool = _stdin_tool(tmp_path)
    cfg = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on")
    own = RunScratch.create(tmp_path)
    lane = LaneSanitizer(cfg, "cuda", {}, prestart=True, scratch=own)
    lane.prestart()
    spare = lane.slot.spare
    lane.prestart()  # one at a time
    assert spare is not None and lane.slot.spare is spare and spare.proc.poll() is None
    job = P.SanitizeJob(str(tmp_path / "x.py"), str(tmp_path / "problem.py"), "", "ModelNew", {}, 1, str(tmp_path), False)
    runs, _ = lane.run(job, "hash", "x")
    assert [r.outcome for r in runs] == ["clean"] and spare.proc.poll() is not None
    following = lane.slot.spare
    assert following is not None and following is not spare  # the next candidate's, started ahead
    lane.close()
    assert lane.slot.spare is None and following.proc.poll() is not None and not following.scratch.exists()
    without = LaneSanitizer(cfg, "cuda", {}, prestart=False, scratch=own)
    without.prestart()
    assert without.slot.spare is None


def test_the_run_started_after_one_problems_memcheck_serves_the_lanes_next_problem(tmp_path, make_config):
    # a lane's problems share its launcher's slot: the run that readies after problem A's candidate is the one
    # problem B's candidate gets, and A's end (its last candidate done) does not end it
    from harness.parent.sanitize import LaneSanitizer
    from harness.parent.spares import SpareSlot

    tool = _stdin_tool(tmp_path)
    cfg = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on")
    own, slot = RunScratch.create(tmp_path), SpareSlot()
    first = LaneSanitizer(cfg, "cuda", {"CUDA_VISIBLE_DEVICES": "0"}, prestart=True, scratch=own, spares=slot)
    job = P.SanitizeJob(str(tmp_path / "x.py"), str(tmp_path / "problem.py"), "", "ModelNew", {}, 1, str(tmp_path), False)
    first.run(job, "a", "a")
    ahead = slot.spare
    assert ahead is not None and ahead.proc.poll() is None
    first.close()
    assert slot.spare is ahead and ahead.proc.poll() is None  # kept for the lane's next problem
    second = LaneSanitizer(cfg, "cuda", {"CUDA_VISIBLE_DEVICES": "0"}, prestart=True, scratch=own, spares=slot)
    second.prestart()  # its candidate starts: the waiting run is the one it will use, no second start
    assert slot.spare is ahead
    runs, _ = second.run(dataclasses.replace(job, seed=2), "b", "b")
    assert [r.outcome for r in runs] == ["clean"] and ahead.proc.poll() is not None and not ahead.scratch.exists()
    assert json.loads((tmp_path / "job.json").read_text())["seed"] == 2  # B's job went to the run started after A's
    following = slot.spare
    assert following is not None and following is not ahead and following.proc.poll() is None
    deadline = time.monotonic() + 10
    while _started(tmp_path) != (1, 2) and time.monotonic() < deadline:  # each start notes itself when it runs
        time.sleep(0.05)
    assert _started(tmp_path) == (1, 2)  # A's run, then two started ahead: the one B used and the lane's next
    slot.discard()  # the lane ends
    assert slot.spare is None


def _started(tmp_path):
    """(fresh runs, runs started ahead) the stand-in tool has noted so far."""
    lines = [line.split() for line in (tmp_path / "args").read_text().splitlines()]
    ahead = sum(1 for line in lines if line and line[-1] == "-")
    return len(lines) - ahead, ahead


def test_a_run_started_ahead_for_another_lanes_environment_or_tool_is_not_used(tmp_path, make_config):
    from harness.parent.sanitize import LaneSanitizer
    from harness.parent.spares import SpareSlot

    tool = _stdin_tool(tmp_path)
    cfg = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on")
    own, slot = RunScratch.create(tmp_path), SpareSlot()
    LaneSanitizer(cfg, "cuda", {"CUDA_VISIBLE_DEVICES": "0"}, prestart=True, scratch=own, spares=slot).prestart()
    stale = slot.spare
    assert stale is not None
    other = LaneSanitizer(cfg, "cuda", {"CUDA_VISIBLE_DEVICES": "1"}, prestart=True, scratch=own, spares=slot)
    other.prestart()
    assert slot.spare is not stale and stale.proc.poll() is not None and not stale.scratch.exists()
    racecheck = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on", "sanitizer.tools=[racecheck]")
    fresh = slot.spare
    assert slot.take(("another-tool", "racecheck", ())) is None  # taken for another key: discarded, not handed over
    assert fresh is not None and fresh.proc.poll() is not None
    LaneSanitizer(racecheck, "cuda", {}, prestart=False, scratch=own, spares=slot).prestart()
    assert slot.spare is None  # without prestart nothing is started
    other.kill()  # a stopped run ends the lane's slot too


def test_a_lanes_launcher_ends_the_sanitizer_run_it_kept_when_it_closes_or_is_killed(tmp_path):
    from harness.parent.sanitize import Prestarted
    from harness.parent.supervise import Launcher

    tool = _stdin_tool(tmp_path)
    for end in ("close", "kill_all"):
        launcher = Launcher()
        launcher.sanitizer_spares.fill(("k",), lambda: Prestarted.start(tool, "memcheck", {}, RunScratch.create(tmp_path)))
        spare = launcher.sanitizer_spares.spare
        assert spare is not None and spare.proc.poll() is None
        getattr(launcher, end)()
        assert launcher.sanitizer_spares.spare is None and spare.proc.poll() is not None and not spare.scratch.exists()
        # a lane's memcheck that ends after its launcher closed (a stopped run) starts no run that nothing would end
        launcher.sanitizer_spares.fill(("k",), lambda: Prestarted.start(tool, "memcheck", {}, RunScratch.create(tmp_path)))
        assert launcher.sanitizer_spares.spare is None


def test_a_slow_call_cuts_the_batch_of_the_forward_under_the_tool_and_says_so():
    from harness.parent.sanitize import SLOWDOWN, bounded

    slow = bounded({"batch_size": 57}, 726.0, 20.0)  # l1_p34's call: about 218 s expected under memcheck
    assert slow.cut and slow.sizes == {"batch_size": int(57 * 20.0 / (SLOWDOWN * 0.726))}
    assert slow.note.startswith(f"at batch_size={slow.sizes['batch_size']}, cut from 57") and "max_forward_s=20" in slow.note
    assert bounded({"batch_size": 57, "dim": 3}, 1e5, 20.0).sizes == {"batch_size": 1, "dim": 3}  # never below one
    for fast in (bounded({"batch_size": 57}, 10.0, 20.0), bounded({"batch_size": 57}, 726.0, 0.0), bounded({"batch_size": 57}, 0.0, 20.0)):
        assert fast == bounded({"batch_size": 57}, 0.0, 0.0) and not fast.cut and fast.note == ""  # nothing expected slow, or never cut
    for uncuttable in ({}, {"batch_size": 1}, {"batch_size": True}, {"size": 4096}):
        kept = bounded(uncuttable, 726.0, 20.0)
        assert kept.sizes == uncuttable and not kept.cut and kept.note.startswith("not cut:")


def _sized_tool(tmp_path, fails_unless=""):
    """A stand-in for compute-sanitizer run on a job file: notes each job's sizes in sizes.jsonl, then reports a
    clean forward, or (with `fails_unless`) a forward that failed unless the job holds that text."""
    check = f'if ! grep -q \'{fails_unless}\' "$last"; then echo "RuntimeError: shape mismatch"; exit 1; fi\n' if fails_unless else ""
    clean = CLEAN.replace("\n", "\\n")
    return _fake_tool(tmp_path, f"""for last; do :; done
python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["sizes"]))' "$last" >> {tmp_path}/sizes.jsonl
{check}printf '{clean}'
""")


def _sizes_run(tmp_path):
    return [json.loads(line) for line in (tmp_path / "sizes.jsonl").read_text().splitlines()]


def test_a_lane_runs_a_slow_candidates_forward_at_the_cut_batch_and_notes_it(tmp_path, make_config):
    from harness.parent.sanitize import LaneSanitizer

    cfg = make_config(f"sanitizer.path={_sized_tool(tmp_path)}", "sanitizer.enabled=on", "sanitizer.max_forward_s=20")
    lane = LaneSanitizer(cfg, "cuda", {}, scratch=RunScratch.create(tmp_path))
    job = dataclasses.replace(JOB, sizes={"batch_size": 57})
    runs, found = lane.run(job, "slow", "slow", call_ms=726.0)
    assert [r.outcome for r in runs] == ["clean"] and found == [] and "cut from 57" in runs[0].detail
    fast, _ = lane.run(job, "fast", "fast", call_ms=1.0)
    assert [r.outcome for r in fast] == ["clean"] and "cut" not in fast[0].detail
    assert _sizes_run(tmp_path) == [{"batch_size": 5}, {"batch_size": 57}]  # 57 x 20 / (726 ms x 300), then as given


def test_a_cut_forward_that_fails_runs_again_at_the_trials_own_sizes(tmp_path, make_config):
    from harness.parent.sanitize import LaneSanitizer

    tool = _sized_tool(tmp_path, fails_unless='"batch_size": 57')  # a model that runs at its trial's batch only
    cfg = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on")
    lane = LaneSanitizer(cfg, "cuda", {}, scratch=RunScratch.create(tmp_path))
    runs, found = lane.run(dataclasses.replace(JOB, sizes={"batch_size": 57}), "h", "x", call_ms=726.0)
    assert [r.outcome for r in runs] == ["clean"] and found == []
    assert "failed (exit code 1: RuntimeError: shape mismatch); run again uncut" in runs[0].detail
    assert _sizes_run(tmp_path) == [{"batch_size": 5}, {"batch_size": 57}]


def test_errors_found_at_the_cut_batch_are_unsafe_memory(tmp_path, make_config):
    from harness.parent.sanitize import LaneSanitizer

    tool = _fake_tool(tmp_path, f"cat <<'EOF'\n{MEMCHECK_ERRORS}EOF\nexit {ERRORS_EXIT}\n")
    cfg = make_config(f"sanitizer.path={tool}", "sanitizer.enabled=on")
    lane = LaneSanitizer(cfg, "cuda", {}, scratch=RunScratch.create(tmp_path))
    runs, found = lane.run(dataclasses.replace(JOB, sizes={"batch_size": 57}), "h", "x", call_ms=726.0)
    assert [r.outcome for r in runs] == ["errors"] and "cut from 57" in runs[0].detail
    assert [code.value for code, _ in found] == ["unsafe-memory"]
