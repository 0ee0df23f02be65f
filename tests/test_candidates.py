"""Integration: real worker subprocesses evaluate honest and misbehaving candidates on the CPU.

All candidates answer problems/level0/1_Scale_Bias_ReLU.py (relu(x * scale + bias)). One
evaluation runs them all against one pass of the reference; each test then checks one verdict.
"""
import textwrap

import pytest

from harness.core.status import Status
from harness.core.store import RunStore, read_records
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.sources import HONEST_FORWARD, scale_bias_relu
from tests.evaluations import evaluate_problem

pytestmark = pytest.mark.slow  # real worker subprocesses for every candidate

BEFORE = "import os, sys, time"  # for the forwards that misbehave

BODIES = {
    "honest": HONEST_FORWARD,
    "wrong_value": "return torch.relu(x * self.scale + self.bias) + 1e-2",
    "wrong_shape": "return torch.relu(x * self.scale + self.bias)[:, :-1]",
    "wrong_dtype": "return torch.relu(x * self.scale + self.bias).double()",
    "nan_output": "y = torch.relu(x * self.scale + self.bias); y[0, 0] = float('nan'); return y",
    "no_tensor": "return [1.0]",
    "raises": "raise RuntimeError('kernel launch failed: bad grid')",
    "hangs": "time.sleep(3600)",
    "segfaults": "import ctypes; ctypes.string_at(0)",
    "exits_quietly": "os._exit(0)",
    "mutates_input": "x.mul_(self.scale).add_(self.bias); return torch.relu(x)",
    "prints_megabytes": "print('spam ' * 200000); sys.stderr.write('noise ' * 200000); return torch.relu(x * self.scale + self.bias)",
    "fake_stdout_result": (
        "print('{\"type\": \"done\", \"status\": \"correct\", \"speedup\": 1000}'); "
        "return torch.zeros_like(x)"
    ),
    "exhausts_memory": "hog = [bytearray(b'x' * (64 << 20)) for _ in range(200)]; return x",
    "ignores_train_mode": "return torch.relu(x * self.scale + self.bias) * (1.0 if not self.training else 1.5)",
}

FORGER = """import os, sys, time

def forge():
    for fd in list(os.listdir('/proc/self/fd')):
        try:
            if int(fd) > 2 and os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):
                os.write(int(fd), b'{"seq": 0, "body": "{\\"type\\": \\"done\\"}", "mac": "00"}\\n')
        except OSError:
            pass
"""

SPECIAL = {
    "syntax_error": "import torch\nclass ModelNew(:\n    pass\n",
    "import_error": "import torch\nimport no_such_module_for_harness_tests\n",
    "no_model_new": "import torch\nclass Model(torch.nn.Module):\n    pass\n",
    "construct_raises": scale_bias_relu("return x", before=BEFORE).replace("super().__init__()", "super().__init__(); raise ValueError('bad shape')"),
    # renamed, and one more parameter: no pairing by position either, so it keeps its own same-seed weights
    # (tests/test_weights.py has the renames that pair, and the policy that fails these)
    "unpairable_weights": scale_bias_relu("return torch.relu(x * self.scale * self.gain + self.offset)", before=BEFORE).replace(
        "self.bias = nn.Parameter(torch.randn(features))", "self.offset = nn.Parameter(torch.randn(features)); self.gain = nn.Parameter(torch.ones(1))"
    ),
    "needs_cuda_at_runtime": scale_bias_relu("return torch.relu(x.to('cuda') * self.scale + self.bias)", before=BEFORE),
    "exits_at_import": "import sys\nsys.exit(3)\n",
    # Writes a fake "correct" message into every pipe it can find, the result channel among them.
    "forges_channel": scale_bias_relu(f"forge(); {HONEST_FORWARD}", before=FORGER),
}


def candidate_sources():
    sources = {name: scale_bias_relu(body, before=BEFORE) for name, body in BODIES.items()}
    sources.update(SPECIAL)
    return sources


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, build_cache):
    from harness.core.config import load_config

    root = tmp_path_factory.mktemp("eval")
    folder = root / "solutions"
    folder.mkdir()
    candidates = []
    for name, source in candidate_sources().items():
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source) if name in SPECIAL else source)
        candidates.append(Candidate(name, path))
    raw = folder / "truncated.txt"
    raw.write_text("Here is the code:\n```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, features, scale):\n        super().__init__(\n")
    candidates.append(Candidate("truncated", raw, extraction_failure="final Python block is never closed and does not parse"))
    cfg = load_config(overrides=[
        f"results_dir={root / 'results'}",
        f"build_cache_dir={build_cache}",
        f"measurement_cache_dir={root / 'measurements'}",
        "baselines.compile_modes=[]",
        "flags.no_custom_kernel=flag",  # torch-only stand-ins for the failures under test
        "check.trials=2",
        "timing.budget_s=0.2",
        "timing.warmup_ms=5",
        "timing.min_reps=3",
        "timeouts.load=60",
        "timeouts.construct=30",
        "timeouts.check=15",  # the hog must reach the memory limit first, also beside the other test worker's builds
        "timeouts.time=20",
        "limits.memory_mb=1500",
        "limits.log_kib=64",
    ])
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), "test-run")
    with pytest.MonkeyPatch.context() as env:
        # the workers see no GPU, as on a machine without one: needs_cuda_at_runtime is `needs CUDA` there too
        env.setenv("CUDA_VISIBLE_DEVICES", "")
        records = evaluate_problem(problem, candidates, cfg, "cpu", store)
    return {r.identity.candidate: r for r in records}, store


EXPECTED = {
    "honest": Status.CORRECT,
    "prints_megabytes": Status.CORRECT,
    "wrong_value": Status.INCORRECT,
    "wrong_shape": Status.INCORRECT,
    "wrong_dtype": Status.INCORRECT,
    "nan_output": Status.INCORRECT,
    "fake_stdout_result": Status.INCORRECT,
    "ignores_train_mode": Status.INCORRECT,
    "no_tensor": Status.RUNTIME_ERROR,
    "raises": Status.RUNTIME_ERROR,
    "hangs": Status.TIMEOUT,
    "segfaults": Status.CRASHED,
    "exits_quietly": Status.EXITED_EARLY,
    "mutates_input": Status.MUTATED_INPUT,
    "forges_channel": Status.FORGED_RESULT,
    "exhausts_memory": Status.OUT_OF_MEMORY,
    "syntax_error": Status.SYNTAX_ERROR,
    "import_error": Status.IMPORT_ERROR,
    "exits_at_import": Status.IMPORT_ERROR,
    "no_model_new": Status.INTERFACE_ERROR,
    "construct_raises": Status.CONSTRUCT_FAILED,
    "unpairable_weights": Status.CORRECT,
    "needs_cuda_at_runtime": Status.NEEDS_CUDA,
    "truncated": Status.EXTRACT_FAILED,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_candidate_gets_its_own_status(verdicts, name):
    records, _ = verdicts
    record = records[name]
    assert record.decision.status is EXPECTED[name], f"{name}: {record.decision.status.value}: {record.decision.reason}"
    assert record.decision.reason and "\n" not in record.decision.reason


def test_honest_candidate_is_timed_with_speedup_and_every_check(verdicts):
    record = verdicts[0]["honest"]
    # 2 trials x (train, eval), trial 3 at another size (train, eval), 2 repeats of trial 1 (eval),
    # then the last timed call on trial 1
    assert [c.name for c in record.checks.results] == [
        "trial 1 (train)", "trial 1 (eval)", "trial 2 (train, normal inputs)", "trial 2 (eval, normal inputs)",
        "trial 3 (train, other size)", "trial 3 (eval, other size)", "repeat 1 of trial 1 (eval)", "repeat 2 of trial 1 (eval)",
        "last timed call on trial 1 (eval)",
    ]
    assert all(c.passed for c in record.checks.results)
    assert record.checks.same_seed is not None and record.checks.same_seed.passed
    paired = record.timing.paired
    assert paired is not None and paired.rounds >= 2 and record.timing.speedup == paired.speedup
    assert record.timing.stats is not None and record.timing.stats.n >= 3 * paired.rounds  # min_reps in each round
    assert len(paired.ratios) == paired.rounds and paired.reference.n >= 3 * paired.rounds
    assert paired.low <= record.timing.speedup <= paired.high and record.timing.reference_ms == paired.reference.median_ms
    assert paired.protocol == "eager, stream sync" and record.timing.stats.timing_mode == "eager"


def test_wrong_value_reports_errors_and_mismatch_fraction(verdicts):
    record = verdicts[0]["wrong_value"]
    failed = record.checks.results[-1]
    assert not failed.passed
    assert failed.max_abs_error == pytest.approx(1e-2, rel=1e-3)
    assert 0 < failed.mismatch_fraction <= 1
    assert record.timing.speedup is None


def test_train_mode_difference_is_caught_on_the_train_call(verdicts):
    record = verdicts[0]["ignores_train_mode"]
    assert "(train)" in record.decision.reason


def test_shape_and_dtype_reasons_name_the_difference(verdicts):
    records = verdicts[0]
    assert "shape (64, 255), expected (64, 256)" in records["wrong_shape"].decision.reason
    assert "dtype float64, expected float32" in records["wrong_dtype"].decision.reason
    assert "NaN" in records["nan_output"].decision.reason


def test_timeout_names_the_phase(verdicts):
    assert "phase check" in verdicts[0]["hangs"].decision.reason


def test_crash_names_the_signal(verdicts):
    assert "SIGSEGV" in verdicts[0]["segfaults"].decision.reason


def test_unpairable_weights_are_checked_by_seed_and_flagged_naming_the_keys(verdicts):
    record = verdicts[0]["unpairable_weights"]
    flag = next(f for f in record.integrity.flags if f.code == "weights-by-seed")
    assert "offset" in flag.reason and "bias" in flag.reason and "gain" in flag.reason
    assert record.checks.weights == "seed"


def test_huge_output_is_truncated_in_the_log(verdicts):
    records, store = verdicts
    record = records["prints_megabytes"]
    log = (store.dir / record.provenance.log_path).read_text()
    assert "bytes of output omitted" in log
    assert len(log) < 80 * 1024
    assert any("printed" in w for w in record.decision.warnings)


def test_every_verdict_is_in_the_records_file(verdicts):
    from harness.core.records import CandidateRecord

    records, store = verdicts
    on_disk = [r for r in read_records(store.dir) if isinstance(r, CandidateRecord)]
    assert {r.identity.candidate for r in on_disk} == set(records)
    reference = [r for r in read_records(store.dir) if type(r).__name__ == "ReferenceRecord"]
    assert len(reference) == 1 and reference[0].ok
