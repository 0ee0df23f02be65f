"""The command line end to end on the CPU: usage errors, the five seed completions, leaderboards."""
import json
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.commands import ingest, run
from harness.core.errors import ExitCode
from harness.core.status import Status
from harness.core.store import candidate_records, read_records
from tests.records import candidate_record

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
        (["--problem", "relu"], "no problem named 'relu'; close matches: 1_Scale_Bias_ReLU"),
        (["--solution", "missing.py"], "--solution missing.py: no such file"),
        (["--solution", "README.md"], "--solution README.md: not a Python file"),
        (["--all", "--set", "check.trails=2"], "unknown config key 'check.trails'"),
        (["ingest", "missing.txt", "--problem", "37"], "no such file"),
    ],
)
def test_usage_errors_exit_1_with_one_line(argv, message, capsys):
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_lint_looks_for_problems_in_the_problems_dir_it_is_given(tmp_path, capsys):
    assert main(["lint", "--problems-dir", str(tmp_path), "--out", str(tmp_path / "lint.md")]) == ExitCode.USAGE
    assert capsys.readouterr().err.strip() == f"error: no problems in {tmp_path}"
    assert main(["lint", "relu", "--problems-dir", str(tmp_path)]) == ExitCode.USAGE
    assert "no problem named 'relu'" in capsys.readouterr().err


def test_a_solution_outside_solutions_asks_for_its_problem(tmp_path, capsys):
    candidate = tmp_path / "elsewhere" / "mine.py"
    candidate.parent.mkdir()
    candidate.write_text("class ModelNew: pass\n")
    assert main(["--solution", str(candidate)]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "its folder 'elsewhere' names no problem" in err and "--problem NAME" in err and "\n" not in err


def test_several_problems_run_together_each_once(make_config):
    cfg = make_config()
    targets = run.select_targets(cfg, problem=["3_Linear", "1_Scale", "3_Linear_BatchNorm"], solution=None, everything=False)
    assert [p.name for p, _ in targets] == ["3_Linear_BatchNorm", "1_Scale_Bias_ReLU"]
    assert all(candidates for _, candidates in targets)


def test_unknown_flag_exits_1(capsys):
    assert main(["--problem", "37", "--bogus"]) == ExitCode.USAGE


def test_five_seeds_ingest_and_each_gets_a_precise_verdict(make_config, tmp_path, capsys):
    cfg = make_config(f"solutions_dir={tmp_path / 'solutions'}")
    codes = [ingest.run(cfg, [SEEDS / f"{seed}.txt"], problem) for seed, (problem, _) in SEED_PROBLEMS.items()]
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert codes.count(ExitCode.CANDIDATES_FAILED) == 2 and sum(line.startswith("refused ") for line in lines) == 2 and sum(line.startswith("ingested ") for line in lines) == 3
    for seed, (problem, status) in SEED_PROBLEMS.items():
        kept = tmp_path / "solutions" / problem / "raw" / ("refused/" if status is Status.EXTRACT_FAILED else "") / f"{seed}.txt"
        assert kept.read_text() == (SEEDS / f"{seed}.txt").read_text()

    targets = run.select_targets(cfg, problem=None, solution=None, everything=True)
    assert run.run(cfg, targets, run_id="ingested", quiet=True) == ExitCode.OK  # a refusal is not judged again by every later run
    judged = {r.identity.candidate for r in candidate_records(read_records(cfg.path(cfg.results_dir) / "ingested"))}
    assert judged == {seed for seed, (_, status) in SEED_PROBLEMS.items() if status is not Status.EXTRACT_FAILED}

    for seed, (problem, _) in SEED_PROBLEMS.items():  # raw text put straight into raw/ is judged, extraction failures too
        refused = tmp_path / "solutions" / problem / "raw" / "refused" / f"{seed}.txt"
        if refused.exists():
            refused.rename(refused.parent.parent / refused.name)
    targets = run.select_targets(cfg, problem=None, solution=None, everything=True)
    code = run.run(cfg, targets, run_id="seeds", quiet=True)
    records = {r.identity.candidate: r for r in candidate_records(read_records(cfg.path(cfg.results_dir) / "seeds"))}
    for seed, (_, status) in SEED_PROBLEMS.items():
        assert records[seed].decision.status is status, records[seed].decision.reason
    assert "cut off" in records["000_ede69be24d22c528"].decision.reason
    assert "never closed" in records["003_f5bdc30c544e9209"].decision.reason
    assert code == ExitCode.CANDIDATES_FAILED  # extraction failures fail the run; needs-CUDA skips do not


@pytest.mark.slow
def test_run_writes_records_and_leaderboards_and_prints_json(make_config, tmp_path, capsys):
    cfg = make_config()
    targets = run.select_targets(cfg, problem="3_Linear", solution=None, everything=False)
    code = run.run(cfg, targets, run_id="json", quiet=True, json_output=True)
    assert code == ExitCode.OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["decision"]["status"] for line in lines] == ["correct"]
    run_dir = cfg.path(cfg.results_dir) / "json"
    assert "functional" in (run_dir / "leaderboard.md").read_text()
    assert (run_dir / "leaderboard.csv").read_text().startswith("problem,rank,candidate,status")
    header = read_records(run_dir)[0]
    assert header.environment["torch"] and header.config["check"]["trials"] == 2


def _one_run(results: Path, run_id: str) -> None:
    """A run folder holding two records of one candidate (the later one is the one kept)."""
    from harness.core.store import RunStore

    store = RunStore(results, run_id)
    for reason in ("first try", "second try"):
        store.append(candidate_record(run_id=run_id, problem="p1", problem_hash="h", candidate="c1", candidate_path="c1.py",
                                     candidate_hash="x", device="cpu", status=Status.INCORRECT, reason=reason))


def test_baseline_save_looks_run_ids_up_in_the_configs_results_dir(tmp_path, capsys):
    _one_run(tmp_path / "elsewhere", "cli-config-run")
    out = tmp_path / "baseline.jsonl"
    argv = ["baseline", "save", "cli-config-run", "--out", str(out)]
    assert main(argv) == ExitCode.USAGE  # the default results folder has no such run
    assert "no run 'cli-config-run'" in capsys.readouterr().err
    config = tmp_path / "config.yaml"
    config.write_text(f"results_dir: {json.dumps(str(tmp_path / 'elsewhere'))}\n")
    assert main([*argv, "--config", str(config)]) == ExitCode.OK
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["decision"]["reason"]) for r in kept] == [("candidate", "second try")]
    out.unlink()
    assert main([*argv, "--set", f"results_dir={json.dumps(str(tmp_path / 'elsewhere'))}"]) == ExitCode.OK and out.is_file()
    assert main([*argv, "--config", str(tmp_path / "missing.yaml")]) == ExitCode.USAGE
    assert capsys.readouterr().err.strip().endswith(f"error: config file not found: {tmp_path / 'missing.yaml'}")


def test_ingest_set_chooses_where_candidates_go(tmp_path, capsys):
    seed = SEEDS / "001_c0eeb23014eea263.txt"
    solutions = tmp_path / "solutions"
    assert main(["ingest", str(seed), "--problem", "37", "--set", f"solutions_dir={json.dumps(str(solutions))}"]) == ExitCode.OK
    assert (solutions / "37_Matmul_Swish_Sum_GroupNorm" / "001_c0eeb23014eea263.py").is_file()
    assert "ingested" in capsys.readouterr().out
    assert main(["ingest", str(seed), "--problem", "37", "--set", "solutions_dir"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err == "error: --set expects key=value, got 'solutions_dir' (for example --set check.trials=3)"


@pytest.mark.parametrize("command", ["run", "ingest", "gate", "baseline", "leaderboard", "lint", "serve"])
def test_every_command_takes_config_and_set(command):
    from harness.__main__ import parser

    argv = {"run": ["run"], "ingest": ["ingest", "x.txt", "--problem", "p"], "gate": ["gate", "--baseline", "a", "--current", "b"],
            "baseline": ["baseline", "save", "r", "--out", "o"], "leaderboard": ["leaderboard", "r"], "lint": ["lint"], "serve": ["serve"]}[command]
    args = parser().parse_args([*argv, "--config", "c.yaml", "--set", "a=1", "--set", "b=2"])
    assert args.config == "c.yaml" and args.set == ["a=1", "b=2"]


def test_a_later_completion_that_extracts_replaces_a_refused_one(make_config, tmp_path, capsys):
    cfg = make_config(f"solutions_dir={tmp_path / 'solutions'}")
    raw = tmp_path / "solutions" / "88_Gemm_GroupNorm_Swish_Multiply_Swish" / "raw"
    assert ingest.run(cfg, [SEEDS / "000_ede69be24d22c528.txt"], "88", name="x") == ExitCode.CANDIDATES_FAILED
    assert (raw / "refused" / "x.txt").is_file() and not (raw / "x.txt").exists()
    assert ingest.run(cfg, [SEEDS / "004_f8fff41f0c416267.txt"], "88", name="x") == ExitCode.OK
    assert (raw / "x.txt").is_file() and not (raw / "refused" / "x.txt").exists()
    assert (raw.parent / "x.py").is_file()


def _ingest(tmp_path, *argv):
    solutions = tmp_path / "repo" / "solutions"
    return main(["ingest", *argv, "--problem", "1_Scale", "--set", f"solutions_dir={json.dumps(str(solutions))}"])


@pytest.mark.parametrize("name", ["../../evil", "ABSOLUTE", "a/b", "..", "_hidden", "x y", ""])
def test_ingest_refuses_a_name_that_is_not_a_candidate_name_and_writes_nothing(name, tmp_path, capsys):
    repo_root = Path(__file__).resolve().parent.parent
    name = str(tmp_path / "evil") if name == "ABSOLUTE" else name
    assert _ingest(tmp_path, str(SEEDS / "004_f8fff41f0c416267.txt"), "--name", name) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: candidate name ") and "\n" not in err
    assert list(tmp_path.rglob("*")) == [] and not (repo_root / "evil.py").exists()  # the solutions tree is in tmp_path


def test_ingest_refuses_a_file_whose_stem_is_not_a_candidate_name(tmp_path, capsys):
    completion = tmp_path / "in" / "my completion.txt"
    completion.parent.mkdir()
    completion.write_text((SEEDS / "004_f8fff41f0c416267.txt").read_text())
    assert _ingest(tmp_path, str(completion)) == ExitCode.USAGE
    assert "pick one with --name" in capsys.readouterr().err and not (tmp_path / "repo").exists()


def test_ingest_under_a_taken_name_needs_force_and_otherwise_keeps_the_old_files(tmp_path, capsys):
    folder = tmp_path / "repo" / "solutions" / "1_Scale_Bias_ReLU"
    assert _ingest(tmp_path, str(SEEDS / "004_f8fff41f0c416267.txt"), "--name", "mine") == ExitCode.OK
    old_code, old_raw = (folder / "mine.py").read_bytes(), (folder / "raw" / "mine.txt").read_bytes()
    same = _ingest(tmp_path, str(SEEDS / "004_f8fff41f0c416267.txt"), "--name", "mine")
    assert same == ExitCode.OK  # the same completion again changes nothing
    capsys.readouterr()
    for other in ("001_c0eeb23014eea263", "000_ede69be24d22c528"):  # other code; a refused completion
        assert _ingest(tmp_path, str(SEEDS / f"{other}.txt"), "--name", "mine") == ExitCode.USAGE
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and str(folder / "mine.py") in err and "--force" in err and "\n" not in err
        assert (folder / "mine.py").read_bytes() == old_code and (folder / "raw" / "mine.txt").read_bytes() == old_raw
        assert not (folder / "raw" / "refused").exists()
    assert _ingest(tmp_path, str(SEEDS / "001_c0eeb23014eea263.txt"), "--name", "mine", "--force") == ExitCode.OK
    assert (folder / "mine.py").read_bytes() != old_code
    assert (folder / "raw" / "mine.txt").read_text() == (SEEDS / "001_c0eeb23014eea263.txt").read_text()


def test_ingest_checks_every_file_before_writing_any(tmp_path, capsys):
    folder = tmp_path / "repo" / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    (folder / "001_c0eeb23014eea263.py").write_text("class ModelNew: pass\n")
    first, second = SEEDS / "004_f8fff41f0c416267.txt", SEEDS / "001_c0eeb23014eea263.txt"
    assert _ingest(tmp_path, str(first), str(second)) == ExitCode.USAGE
    assert sorted(p.name for p in folder.rglob("*")) == ["001_c0eeb23014eea263.py"]
    twin = tmp_path / "twin" / first.name
    twin.parent.mkdir()
    twin.write_text(second.read_text())
    assert _ingest(tmp_path, str(first), str(twin), "--force") == ExitCode.USAGE
    assert "several files would be ingested as '004_f8fff41f0c416267'" in capsys.readouterr().err
    assert sorted(p.name for p in folder.rglob("*")) == ["001_c0eeb23014eea263.py"]


def test_ingest_name_with_the_python_suffix_names_the_candidate_without_it(tmp_path, capsys):
    folder = tmp_path / "repo" / "solutions" / "1_Scale_Bias_ReLU"
    assert _ingest(tmp_path, str(SEEDS / "004_f8fff41f0c416267.txt"), "--name", "sample.py") == ExitCode.OK
    assert (folder / "sample.py").is_file() and not (folder / "sample.py.py").exists()


def test_version_read_by_head_ends_quietly():
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(f"{sys.executable} run.py --version | head -1", shell=True, capture_output=True, text=True, cwd=root, timeout=120)
    assert done.stdout.startswith("run.py ") and done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_every_commands_help_line_is_a_whole_sentence(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "a correct one is missing or a new one is not correct." in " ".join(out.split())
