"""The cheat catalogs (benchmarks/cheats/) through run.py on a real GPU: every cheat gets the
verdict its file expects, none that must fail is ranked, the honest controls stay ranked, a
kernel that spins forever ends as `timeout` and the lane goes on."""
import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # CUDA builds and whole evaluations on the GPU

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cheats", ROOT / "benchmarks" / "cheats.py")
cheats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cheats)

# short timings, and a check limit the spinning kernel reaches quickly
OVERRIDES = ["timing.budget_s=1", "timing.rounds=2", "timing.max_rounds=2", "timing.null_candidate=off", "timeouts.check=30", "baselines.compile_modes=[]"]


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory):
    from harness.parent.sanitize import find_tool

    out = Path(os.environ["CHEATS_OUT"]) if os.environ.get("CHEATS_OUT") else tmp_path_factory.mktemp("cheats")  # CHEATS_OUT keeps the records
    found = {}
    for problem in ("linear_relu_256x1024", "1_Matmul_Square"):
        records, _ = cheats.run_catalog(problem, out, OVERRIDES + [f"build_cache_dir={out / 'builds'}"])
        found[problem] = ({r["identity"]["candidate"]: r for r in records}, cheats.expectations(cheats.CATALOG / problem))  # records in their parts
    return found, find_tool("") is not None


@pytest.mark.parametrize("problem", ["linear_relu_256x1024", "1_Matmul_Square"])
def test_every_cheat_gets_the_verdict_its_file_expects(catalogs, problem):
    (records, expected), sanitizer = catalogs[0][problem], catalogs[1]
    wrong = []
    for name, options in expected.items():
        record = records.get(name)
        if record is None:
            wrong.append(f"{name}: no record")
        elif name == "oob_writer" and not sanitizer:
            continue  # a write past its own output is found by compute-sanitizer only
        elif not cheats.matches(record, options):
            wrong.append(f"{name}: {record['decision']['status']}: {record['decision']['reason']} {[f['code'] for f in record['integrity'].get('flags', [])]}")
    assert wrong == []


def test_only_honest_or_flagged_candidates_are_ranked(catalogs):
    records, expected = catalogs[0]["linear_relu_256x1024"]
    ranked = {n for n, r in records.items() if r["decision"]["status"] == "correct"}
    assert {"honest_epilogue", "honest_fused_bias_relu"} <= ranked
    for name in ranked - {"honest_epilogue", "honest_fused_bias_relu"}:
        assert records[name]["integrity"]["flags"], f"{name} is ranked without a flag"


def test_a_kernel_spinning_forever_is_a_timeout_in_its_phase_and_the_lane_goes_on(catalogs):
    records, _ = catalogs[0]["linear_relu_256x1024"]
    spin = records["spins_forever"]
    assert spin["decision"]["status"] == "timeout" and "check" in spin["decision"]["reason"], spin["decision"]["reason"]
    assert spin["provenance"]["wall_seconds"] < 30 + 120  # the phase's limit, plus start-up and the kill
    # these verdicts need every checked call compared by the lane's judge
    judged = {"correct", "flagged", "no custom kernel", "unsafe memory"}
    after = [r for r in records.values() if r["provenance"]["finished_at"] > spin["provenance"]["finished_at"] and r["decision"]["status"] in judged]
    assert after, "no candidate was judged after the hang: the lane did not recover"
    assert {r["identity"]["lane"] for r in after} == {spin["identity"]["lane"]}


def test_a_persisting_l2_limit_is_reset_before_every_timed_call_and_flagged(catalogs):
    records, _ = catalogs[0]["linear_relu_256x1024"]
    record = records["sets_persisting_l2"]
    stats = record["timing"]["stats"]
    assert stats["l2_reset"] and stats["l2_persisting_found"] > 0
    assert any(f["code"] == "tamper-suspect" and "persisting-L2" in f["reason"] for f in record["integrity"]["flags"])
    honest = records["honest_epilogue"]["timing"]["stats"]
    assert honest["l2_reset"] and honest["l2_persisting_found"] == 0
