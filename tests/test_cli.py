"""The command line end to end on the CPU: usage errors, the five seed completions, leaderboards."""
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.commands import ingest, run
from harness.errors import ExitCode
from harness.status import Status
from harness.store import candidate_records, read_records

SEEDS = Path(__file__).parent / "data" / "seeds"
SEED_PROBLEMS = {
    "000_ede69be24d22c528": ("88_Gemm_GroupNorm_Swish_Multiply_Swish", Status.EXTRACT_FAILED),
    "001_c0eeb23014eea263": ("37_Matmul_Swish_Sum_GroupNorm", Status.NEEDS_CUDA),
    "002_aa254fe8bb8f0033": ("21_Conv2d_Add_Scale_Sigmoid_GroupNorm", Status.NEEDS_CUDA),
    "003_f5bdc30c544e9209": ("39_Gemm_Scale_BatchNorm", Status.EXTRACT_FAILED),
    "004_f8fff41f0c416267": ("70_Gemm_Sigmoid_Scaling_ResidualAdd", Status.NEEDS_CUDA),
}


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "say what to evaluate"),
        (["--problem", "no_such_problem"], "no problem named 'no_such_problem'"),
        (["--problem", "3"], "ambiguous"),
        (["--solution", "missing.py"], "not a Python file"),
        (["--all", "--set", "check.trails=2"], "unknown config key 'check.trails'"),
        (["ingest", "missing.txt", "--problem", "37"], "no such file"),
    ],
)
def test_usage_errors_exit_1_with_one_line(argv, message, capsys):
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_unknown_flag_exits_1(capsys):
    assert main(["--problem", "37", "--bogus"]) == ExitCode.USAGE


def test_five_seeds_ingest_and_each_gets_a_precise_verdict(make_config, tmp_path, capsys):
    cfg = make_config(f"solutions_dir={tmp_path / 'solutions'}")
    codes = [ingest.run(cfg, [SEEDS / f"{seed}.txt"], problem) for seed, (problem, _) in SEED_PROBLEMS.items()]
    out = capsys.readouterr().out
    assert codes.count(ExitCode.CANDIDATES_FAILED) == 2 and out.count("refused") == 2 and out.count("ingested") == 3
    for seed, (problem, _) in SEED_PROBLEMS.items():
        assert (tmp_path / "solutions" / problem / "raw" / f"{seed}.txt").read_text() == (SEEDS / f"{seed}.txt").read_text()

    targets = run.select_targets(cfg, problem=None, solution=None, everything=True)
    code = run.run(cfg, targets, run_id="seeds", quiet=True)
    records = {r.candidate: r for r in candidate_records(read_records(cfg.path(cfg.results_dir) / "seeds"))}
    for seed, (_, status) in SEED_PROBLEMS.items():
        assert records[seed].status is status, records[seed].reason
    assert "cut off" in records["000_ede69be24d22c528"].reason
    assert "never closed" in records["003_f5bdc30c544e9209"].reason
    assert code == ExitCode.CANDIDATES_FAILED  # extraction failures fail the run; needs-CUDA skips do not


@pytest.mark.slow
def test_run_writes_records_and_leaderboards_and_prints_json(make_config, tmp_path, capsys):
    cfg = make_config()
    targets = run.select_targets(cfg, problem="3_Linear", solution=None, everything=False)
    code = run.run(cfg, targets, run_id="json", quiet=True, json_output=True)
    assert code == ExitCode.OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["status"] for line in lines] == ["correct"]
    run_dir = cfg.path(cfg.results_dir) / "json"
    assert "functional" in (run_dir / "leaderboard.md").read_text()
    assert (run_dir / "leaderboard.csv").read_text().startswith("problem,rank,candidate,status")
    header = read_records(run_dir)[0]
    assert header.environment["torch"] and header.config["check"]["trials"] == 2
