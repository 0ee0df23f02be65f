"""benchmarks/host_probe.py: the host's CPU speed, one core alone and every core at once, for comparing rate runs."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # imported by name: its pool's workers find the work by it
    try:
        import host_probe
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return host_probe


def test_the_probe_reports_each_core_slower_when_more_processes_share_the_cores_than_there_are():
    probe = _module()
    alone = probe.probe(loops=300_000, cores=1, module="json")
    crowded = probe.probe(loops=300_000, cores=4 * probe.usable_cores(), module="json")
    assert alone["cores"] == 1 and alone["one_core_mloops_s"] > 0 and alone["import_s"] is not None
    # four processes per core each get at most about a quarter of one: well under what one gets alone
    assert crowded["each_at_once_mloops_s"] < 0.6 * crowded["one_core_mloops_s"], crowded
    assert crowded["slowest_at_once_mloops_s"] <= crowded["each_at_once_mloops_s"]


def test_the_probe_writes_its_line_and_its_numbers_and_refuses_a_bad_count(tmp_path):
    out = tmp_path / "host.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/host_probe.py", "--loops", "200000", "--cores", "2", "--module", "json",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("host: one core ") and "2 at once" in done.stdout and "import json" in done.stdout
    found = json.loads(out.read_text())
    assert found["cores"] == 2 and found["import_module"] == "json"
    refused = subprocess.run(
        [sys.executable, "benchmarks/host_probe.py", "--cores", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2 and "at least 1" in refused.stderr
