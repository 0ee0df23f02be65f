"""The GPU benchmark scripts stopped from outside (an outer `timeout`, Ctrl-C: a signal to their process group): the
bounded Python step they run sits in a process group of its own (`timeout` makes one), so the scripts forward the
stop to it and wait (benchmarks/stoppable.sh). The step here is a stand-in for benchmarks/kbcorpus.py that writes a
state line when stopped, as kbcorpus.py does with the records its run finished."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = """#!/usr/bin/env bash
# python3 for the benchmark scripts: benchmarks/kbcorpus.py is a stand-in that runs until stopped; the rest is Python
if [ "${1:-}" = benchmarks/kbcorpus.py ]; then
  for a in "$@"; do [ "$a" = --report-only ] && exit 0; done
  prev=""; for a in "$@"; do [ "$prev" = --state ] && state=$a; prev=$a; done
  trap 'echo "{\\"profile\\": \\"loop\\", \\"kernel\\": \\"l1_p1/k\\", \\"status\\": \\"correct\\"}" >> "$state"; kill $nap; exit 130' TERM
  sleep 300 & nap=$!
  echo $$ > "$MARK"
  wait $nap
  exit 0
fi
if [ "${1:-}" = -c ] && [[ "${2:-}" == *"import torch"* ]]; then echo "torch (stand-in)"; exit 0; fi
exec PYTHON "$@"
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.parametrize("script", ["kbcorpus_gpu.sh", "verdict_rate_gpu.sh"])
def test_a_stopped_benchmark_call_stops_its_run_keeps_what_it_finished_and_leaves_nothing_running(tmp_path, script):
    bin_dir, scratch, out = tmp_path / "bin", tmp_path / "tmp", tmp_path / "out"
    for folder in (bin_dir, scratch, tmp_path / "corpus" / "solutions"):
        folder.mkdir(parents=True)
    python = bin_dir / "python3"
    python.write_text(STAND_IN.replace("PYTHON", sys.executable))
    python.chmod(0o755)
    mark = tmp_path / "stand-in.pid"
    state = out / "state.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "MARK": str(mark),
        "TMPDIR": str(scratch),
        "KBCORPUS": str(tmp_path / "corpus"),
        "OUT": str(out),
        "BUDGET": "100",
    }
    args = [str(state), "1/1"] if script == "kbcorpus_gpu.sh" else ["1/1"]
    call = subprocess.Popen(
        ["bash", str(ROOT / "benchmarks" / script), *args],
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stand_in = 0
    try:
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
            assert call.poll() is None, f"{script} ended before its step started"
            time.sleep(0.1)
        stand_in = int(mark.read_text())
        os.killpg(call.pid, signal.SIGTERM)  # what an outer `timeout` sends: the whole process group of the call
        call.wait(timeout=60)
        assert not _alive(stand_in), "the step ran on after its call ended"
        assert '"kernel": "l1_p1/k"' in state.read_text()  # what the step kept when stopped is in the call's state
        assert "exit 130" in (out / "log.txt").read_text()  # the step's own exit: stopped, not killed
        assert not list(scratch.glob("kbcorpus.*"))  # the call's scratch is removed
        if script == "verdict_rate_gpu.sh":  # the host's CPUs were sampled over the run, and the sampler is gone
            assert (out / "cpu.csv").read_text().strip()
            assert subprocess.run(["pgrep", "-f", f"host_cpu.py sample {out / 'cpu.csv'}"]).returncode == 1
    finally:
        if stand_in and _alive(stand_in):  # a failed check: end the stand-in and its sleep
            subprocess.run(["pkill", "-KILL", "-P", str(stand_in)], check=False)
            os.kill(stand_in, signal.SIGKILL)
        if call.poll() is None:
            os.killpg(call.pid, signal.SIGKILL)


def test_stoppable_forwards_a_stop_to_its_step_then_gives_the_script_its_own_traps_back(tmp_path):
    # a script with its own `exit 130` trap, a step under `timeout` (a process group of its own), and a check of
    # `stopped` after the step; the step writes what it finished when stopped
    kept, after = tmp_path / "kept", tmp_path / "after"
    script = tmp_path / "script.sh"
    script.write_text(
        f"""trap 'exit 130' INT TERM
. {ROOT / "benchmarks" / "stoppable.sh"}
stoppable timeout 60 bash -c 'trap "echo finished-part > {kept}; exit 3" TERM; echo $$ > {tmp_path / "pid"}; sleep 100 & wait'
echo "step $? stopped ${{stopped:-}} trap $(trap -p TERM)" > {after}
[ -n "${{stopped:-}}" ] && exit 130
exit 0
"""
    )
    call = subprocess.Popen(["bash", str(script)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.killpg(call.pid, signal.SIGTERM)
        assert call.wait(timeout=30) == 130
        assert kept.read_text().strip() == "finished-part"
        assert after.read_text().strip() == "step 3 stopped 1 trap trap -- 'exit 130' SIGTERM"
        assert not _alive(int((tmp_path / "pid").read_text()))
    finally:
        if call.poll() is None:
            os.killpg(call.pid, signal.SIGKILL)


def test_stoppable_returns_the_steps_own_status_when_the_step_ends_at_once_on_the_stop():
    # a stop interrupts bash's `wait` with 143; a step that ends at once may be gone before `stoppable` looks again,
    # and its own status (130 here) must still be what comes back: 30 stops in a row, every one 130
    script = f""". {ROOT / "benchmarks" / "stoppable.sh"}
for i in $(seq 30); do
  stopped=""
  ( sleep 0.05; kill -TERM $$ ) &
  stoppable bash -c 'sleep 100 & nap=$!; trap "kill $nap; exit 130" TERM; wait'
  echo -n "$? "
done
"""
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["130"] * 30


def test_wait_all_waits_out_every_background_job_through_a_stop(tmp_path):
    # a stop interrupts bash's `wait`: a script that collects its jobs' results after a stop must wait again, or it
    # collects before they have finished
    import signal
    import subprocess
    import time

    script = f""". {ROOT / "benchmarks" / "stoppable.sh"}
trap 'stopped=1' INT TERM
(sleep 1; echo a > {tmp_path / "a"}) &
(sleep 1.5; echo b > {tmp_path / "b"}) &
echo up > {tmp_path / "up"}
wait_all
echo "collected ${{stopped:-}} $(cat {tmp_path / "a"} {tmp_path / "b"} 2>/dev/null | tr -d '\\n')" > {tmp_path / "collected"}
"""
    run = subprocess.Popen(["bash", "-c", script])
    deadline = time.monotonic() + 20
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    assert (tmp_path / "collected").read_text().split() == ["collected", "1", "ab"]
