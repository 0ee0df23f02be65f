"""benchmarks/host_cpu.py: the host's CPUs over a rate run, from /proc/stat, and the CPU-seconds each verdict cost."""

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# /proc/stat's shape: user nice system idle iowait irq softirq steal guest guest_nice, in ticks
STAT = """cpu  1000 200 300 5000 100 10 20 30 400 50
cpu0 500 100 150 2500 50 5 10 15 200 25
cpu1 500 100 150 2500 50 5 10 15 200 25
intr 12345 1 2 3
ctxt 999
"""


def _module():
    spec = importlib.util.spec_from_file_location("host_cpu", ROOT / "benchmarks" / "host_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_busy_time_counts_user_nice_system_and_interrupts_not_idle_iowait_or_guest_twice():
    host = _module()
    busy, total, cores = host.read_stat(STAT, ticks=100)
    assert busy == pytest.approx((1000 + 200 + 300 + 10 + 20) / 100)  # guest (400, 50) is inside user and nice
    assert total == pytest.approx((1000 + 200 + 300 + 5000 + 100 + 10 + 20 + 30) / 100)  # steal counts, not busy
    assert cores == 2
    with pytest.raises(ValueError, match="no cpu line"):
        host.read_stat("intr 1 2 3\n", ticks=100)


def test_the_summary_sums_each_calls_intervals_and_never_joins_two_calls(tmp_path):
    host = _module()
    samples = tmp_path / "cpu.csv"
    # call a: 10 s with 4 cores, 36 CPU-s busy of 40 (bound), then 10 s with 8 busy of 40; call b, an hour later:
    # 10 s, 20 busy of 40. The hour between the calls must not count (its counters moved by thousands)
    samples.write_text(
        "a,0,100,1000,4\n"
        "a,10,136,1040,4\n"
        "a,20,144,1080,4\n"
        "b,3620,9000,15000,4\n"
        "b,3630,9020,15040,4\n"
        "b,36"  # a line cut short by a stop: skipped
    )
    found = host.summarise(host.load(samples), verdicts=8)
    assert found["wall_s"] == 30 and found["cpu_s"] == 64 and found["cores"] == 4
    assert found["share"] == pytest.approx(64 / 120)
    assert found["busy_cores"] == pytest.approx(64 / 30)
    assert found["bound_s"] == 10  # only the first interval had at least 90% of the cores busy
    assert found["cpu_s_per_verdict"] == 8 and found["ceiling_per_hour"] == pytest.approx(4 * 3600 / 8)
    line = host.render(found)
    assert line.startswith("host CPUs: 2.1 of 4 busy on average (53%) over 30 s, 64 CPU-s in all")
    assert "8.0 CPU-s per verdict (8): 4 cores busy all the time would turn at most 1800 per hour" in line
    lonely = tmp_path / "one.csv"
    lonely.write_text("a,0,100,1000,4\n")  # one sample: no interval
    assert host.summarise(host.load(lonely))["share"] is None
    assert host.render(host.summarise(host.load(lonely))) == "host CPUs: no interval sampled"


def test_the_sampler_counts_a_busy_process_and_writes_a_last_line_when_stopped(tmp_path):
    samples = tmp_path / "cpu.csv"
    sampler = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "host_cpu.py"), "sample", str(samples),
                                "--every", "0.2"])
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    try:
        busy.wait(timeout=30)
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(timeout=10) == 0
    finally:
        for proc in (busy, sampler):
            if proc.poll() is None:
                proc.kill()
    stopped_at = time.time()
    lines = samples.read_text().splitlines()
    assert len(lines) >= 5 and len({line.split(",")[0] for line in lines}) == 1  # one call
    assert stopped_at - float(lines[-1].split(",")[1]) < 2  # the last line came with the stop, not an interval before
    host = _module()
    found = host.summarise(host.load(samples), verdicts=1)
    assert found["cpu_s"] >= 1.0  # the busy loop's 1.5 s of one core, at the least most of it
    done = subprocess.run([sys.executable, "benchmarks/host_cpu.py", "summary", str(samples), "--verdicts", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith("host CPUs: ") and "CPU-s per verdict (1)" in done.stdout


def test_bad_arguments_and_an_empty_or_missing_file_get_one_line_and_their_exit_codes(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "benchmarks/host_cpu.py", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=30)

    bad = run("sample", str(tmp_path / "x.csv"), "--every", "0")
    assert bad.returncode == 2 and "--every must be above 0" in bad.stderr
    missing = run("summary", str(tmp_path / "none.csv"))
    assert missing.returncode == 1 and "no samples file" in missing.stderr
    (tmp_path / "empty.csv").write_text("")
    empty = run("summary", str(tmp_path / "empty.csv"))
    assert empty.returncode == 1 and empty.stdout.strip() == "host CPUs: no interval sampled"
    negative = run("summary", str(tmp_path / "empty.csv"), "--verdicts", "-1")
    assert negative.returncode == 2 and "--verdicts must be 0 or more" in negative.stderr
