"""benchmarks/null_floor.py: the null candidates it stages, and the row it reads from a pass's records (the null
candidate's paired ratio and its hold, beside the reference's own null floor)."""
import importlib.util
import sys
from pathlib import Path

from harness.core.records import NullFloor, PairedSpeedup, TimingStats
from harness.core.status import Status
from harness.core.store import RunStore
from tests.records import candidate_record, reference_record

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("null_floor", ROOT / "benchmarks" / "null_floor.py")
null_floor = importlib.util.module_from_spec(_spec)
sys.modules["null_floor"] = null_floor
_spec.loader.exec_module(null_floor)


def _stats(ms, **protocol):
    return TimingStats.from_samples([ms] * 3, timer="cuda_events", warmup_calls=1, stopped_by="target_rse", **protocol)


def test_each_problem_gets_its_own_model_renamed_as_the_candidate(tmp_path):
    (path,) = null_floor.stage(["1_Scale_Bias_ReLU"], tmp_path)
    staged = (tmp_path / "1_Scale_Bias_ReLU" / "null.py").read_text()
    assert path.name == "1_Scale_Bias_ReLU.py" and "class ModelNew(" in staged and "class Model(" not in staged


def test_a_pass_reads_as_one_row_per_problem_with_its_hold_and_the_reference_floor(tmp_path):
    reference = _stats(0.0063)
    held = _stats(0.0064, timing_mode="graph", held_ms=2.07, host_waits=3)
    paired = PairedSpeedup(0.962, 0.960, 0.965, 8, "graph, stream sync", (0.96,) * 8, reference)
    floor = NullFloor("correct", "ok", PairedSpeedup(1.025, 1.02, 1.03, 8, "graph, stream sync", (1.025,) * 8, reference))
    store = RunStore(tmp_path, "run")
    store.append(reference_record(problem="p1", run_id="r", null_floor=floor, timing=reference))
    store.append(candidate_record(problem="p1", candidate="null", status=Status.CORRECT, timing=held, paired=paired, reference_ms=0.0063))
    (row,) = null_floor.rows(store.records_path, hold=True, load=16, repeat=2, code=0)
    assert row == {
        "problem": "p1", "hold": True, "load": 16, "repeat": 2, "exit": 0, "status": "correct", "ratio": 0.962,
        "low": 0.960, "high": 0.965, "mode": "graph", "held_ms": 2.07, "host_waits": 3, "floor": 1.025,
    }
    table = null_floor.table([row])
    assert "| p1 | on | 16 | 2 | 0.962x (correct) | [0.960, 0.965] | graph | 2.07 ms | 3 | 1.025x |" in table
    assert null_floor.rows(tmp_path / "missing.jsonl", True, 0, 1, 124) == []  # a pass that wrote nothing
