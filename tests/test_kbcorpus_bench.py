"""benchmarks/kbcorpus.py without a GPU: the selection (seeded, stratified by level, parts by problem), the
state file and resuming from it, reading a run folder's records (fabricated), and the report's verdicts."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.records import CheckResult, Flag, PairedSpeedup, Stricter, TimingStats
from harness.core.schema import decode_line, encode_line
from harness.core.status import Status
from tests.records import candidate_record

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("kbcorpus", ROOT / "benchmarks" / "kbcorpus.py")
kbc = importlib.util.module_from_spec(_spec)
sys.modules["kbcorpus"] = kbc
_spec.loader.exec_module(kbc)

SIZES = {1: {1: 3, 2: 1, 3: 2, 4: 4, 5: 1, 6: 2}, 2: {7: 2, 9: 1, 10: 3}, 3: {1: 1, 4: 2}}  # level -> problem -> kernels


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A corpus laid out as ../shared/kbcorpus is: problems/kb_l<L>/, solutions/l<L>_p<N>/, kb_verdicts.json."""
    root = tmp_path / "corpus"
    verdicts = {}
    for level, problems in SIZES.items():
        for number, count in problems.items():
            (root / "problems" / f"kb_l{level}").mkdir(parents=True, exist_ok=True)
            (root / "problems" / f"kb_l{level}" / f"l{level}_p{number}.py").write_text("# a problem\n")
            folder = root / "solutions" / f"l{level}_p{number}"
            folder.mkdir(parents=True)
            for i in range(count):
                (folder / f"model{i}_{i:06x}.py").write_text(f"# kernel {i}\n")
                verdicts[f"l{level}_p{number}/model{i}_{i:06x}"] = {"kernelbench": "correct", "torch_speedup_l40s": 1.0 + i}
    (root / "kb_verdicts.json").write_text(json.dumps(verdicts))
    return root


def test_corpus_kernels_are_named_and_ordered_as_the_verdicts_file(corpus: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)
    assert len(kernels) == sum(sum(p.values()) for p in SIZES.values())
    assert [k.id for k in kernels][:3] == ["l1_p1/model0_000000", "l1_p1/model1_000001", "l1_p1/model2_000002"]
    assert [(k.level, k.number) for k in kernels] == sorted((k.level, k.number) for k in kernels)  # l1_p10 would sort after l1_p9
    first = kernels[0]
    assert (first.problem, first.problem_key, first.kernelbench, first.kb_speedup) == ("l1_p1", "kb_l1/l1_p1", "correct", 1.0)
    assert kbc.parse_problem("kb_l2/l2_p10") == (2, 10)
    with pytest.raises(ValueError):
        kbc.parse_problem("19_ReLU")


def test_a_corpus_from_other_sources_is_compared_with_the_verdicts_they_published(corpus: Path) -> None:
    # ../shared/kbcorpus2's layout: no kb_verdicts.json, an index.json with each source's published verdict
    (corpus / "kb_verdicts.json").unlink()
    published = {
        "l1_p1/model0_000000": {"correct": True, "category": "correct"},  # CUDA-L1: only what it judged correct
        "l1_p1/model1_000001": {"correctness": True, "category": "correct"},  # a KernelBench eval's run
        "l1_p1/model2_000002": {"correctness": False, "category": "mismatch"},
        "l1_p2/model0_000000": {"runnable": False, "category": "failed"},
        "l1_p3/model0_000000": None,  # a fork's run that published nothing
    }
    index = [{"problem": k.split("/")[0], "solution": f"solutions/{k}.py", "published_verdict": v} for k, v in published.items()]
    (corpus / "index.json").write_text(json.dumps(index))
    verdicts = {k.id: k.kernelbench for k in kbc.corpus_kernels(corpus)}
    assert [verdicts[k] for k in published] == ["correct", "correct", "incorrect", "incorrect", "?"]
    assert verdicts["l1_p4/model0_000000"] == "?"  # not in the index at all
    line = {"profile": "default", "kernel": "l1_p1/model2_000002", "status": "correct", "flags": []}
    assert kbc.disagreement(line, verdicts["l1_p1/model2_000002"]) == "looser: correct here"


def test_a_seeded_draw_is_stratified_by_level_and_repeatable(corpus: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)
    drawn = kbc.select(kernels, fraction=0.5, seed=3)
    assert drawn == kbc.select(kernels, fraction=0.5, seed=3)  # the same arguments, the same kernels
    assert {k.id for k in drawn} <= {k.id for k in kernels}
    for level in SIZES:
        pool = [k for k in kernels if k.level == level]
        assert sum(k.level == level for k in drawn) == max(1, round(0.5 * len(pool)))  # every level represented, in proportion
    assert any(kbc.select(kernels, fraction=0.5, seed=s) != drawn for s in range(4, 10))  # the seed matters
    tiny = kbc.select(kernels, fraction=0.01, seed=0)
    assert sorted({k.level for k in tiny}) == [1, 2, 3]  # at least one per level
    assert kbc.select(kernels) == kernels
    with pytest.raises(SystemExit):
        kbc.select(kernels, fraction=0.0)


def test_problems_narrow_the_selection(corpus: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)
    chosen = kbc.select(kernels, problems=["l1_p4", "kb_l3/l3_p4"])
    assert {k.problem for k in chosen} == {"l1_p4", "l3_p4"} and len(chosen) == 6
    with pytest.raises(SystemExit):
        kbc.select(kernels, problems=["l1_p99"])


def test_parts_split_by_problem_cover_the_selection_once_and_balance(corpus: Path) -> None:
    selection = kbc.select(kbc.corpus_kernels(corpus), fraction=0.8, seed=1)
    parts = kbc.split_parts(selection, 3)
    assert parts == kbc.split_parts(selection, 3)
    assert sorted(k.id for part in parts for k in part) == sorted(k.id for k in selection)
    owners = {}
    for index, part in enumerate(parts):
        for kernel in part:
            assert owners.setdefault(kernel.problem, index) == index  # a problem's kernels stay together
    weights = [sum(kbc.LEVEL_COST[k.level] for k in part) for part in parts]
    heaviest_problem = max(sum(kbc.LEVEL_COST[k.level] for k in selection if k.problem == p) for p in owners)
    assert max(weights) - min(weights) <= heaviest_problem
    assert kbc.parse_part("2/5") == (2, 5)
    for bad in ("0/3", "4/3", "x", "1/"):
        with pytest.raises(SystemExit):
            kbc.parse_part(bad)


def record(problem: str, candidate: str, status: str, **fields) -> dict:
    """A candidate record as a line of records.jsonl holds it (in its parts), from its fields by their
    version 4 names (tests/records.py)."""
    base = {"run_id": "r", "problem": problem, "candidate": candidate, "status": Status(status), "reason": "why " * 80, "device": "cuda", "gradients": "forward only",
            "wall_seconds": 3.5, "finished_at": "2026-11-25T00:00:00", "log_path": f"logs/{problem}/{candidate}.log"}
    return json.loads(encode_line(candidate_record(**{**base, **fields})))


def write_run(folder: Path, records: list[dict], half_line: bool = True) -> None:
    folder.mkdir(parents=True)
    lines = [json.dumps({"kind": "run", "run_id": folder.name})] + [json.dumps(r) for r in records]
    text = "\n".join(lines) + "\n" + ('{"kind": "candidate", "problem": "l1_p1", "cand' if half_line else "")
    (folder / "records.jsonl").write_text(text)


def test_a_run_folder_becomes_state_lines_and_missing_kernels_no_record(corpus: Path, tmp_path: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)[:3]  # l1_p1's three
    folder = tmp_path / "runs" / "kb-default-part1of2"
    reference = TimingStats.from_samples([1.0, 1.0, 1.0], timer="cuda_events", warmup_calls=1, stopped_by="target_rse", timing_mode="graph")
    timed = record(
        "l1_p1",
        "model0_000000",
        "correct",
        speedup=2.5,
        reference_ms=1.0,
        paired=PairedSpeedup(speedup=2.5, low=2.4, high=2.6, rounds=3, protocol="graph, stream sync", ratios=(2.4, 2.5, 2.6), reference=reference),
        timing=TimingStats.from_samples([0.4, 0.4, 0.4], timer="cuda_events", warmup_calls=1, stopped_by="target_rse", timing_mode="graph"),
        flags=(Flag("implausible-time", "flag", "below the floor"),),
        checks=(CheckResult("trial 1", True, "ok", max_abs_error=1e-6), CheckResult("trial 2", True, "ok", max_abs_error=3e-6)),
    )
    wrong = record("l1_p1", "model1_000001", "incorrect", stricter=Stricter("tolerance", "max abs error 4.7e-4"))
    references = {"kind": "reference", "problem": "l1_p1", "device_name": "NVIDIA H100 80GB HBM3", "timing_mode": "graph", "timing_mode_reason": "GPU busy 12%"}
    write_run(folder, [timed, wrong, references])
    (folder / "logs" / "l1_p1").mkdir(parents=True)
    (folder / "logs" / "l1_p1" / "model1_000001.log").write_text("building\nTraceback\nAssertionError: off by one\n")
    lines = kbc.harvest(folder, "default", kernels, "run.py was stopped at its limit")
    by_kernel = {line["kernel"]: line for line in lines}
    ok = by_kernel["l1_p1/model0_000000"]
    assert ok["status"] == "correct" and ok["speedup"] == 2.5 and ok["interval"] == [2.4, 2.6]
    assert (ok["candidate_ms"], ok["reference_ms"], ok["protocol"], ok["timing_mode"], ok["timing_fallback"]) == (0.4, 1.0, "graph, stream sync", "graph", "")
    assert ok["flags"] == [{"code": "implausible-time", "policy": "flag", "reason": "below the floor"}]
    assert ok["max_abs_error"] == 3e-6 and ok["device_name"] == "NVIDIA H100 80GB HBM3" and ok["problem"] == "kb_l1/l1_p1"
    assert (ok["problem_timing_mode"], ok["problem_timing_mode_reason"]) == ("graph", "GPU busy 12%")
    assert ok["run_id"] == "kb-default-part1of2" and "log_tail" not in ok
    bad = by_kernel["l1_p1/model1_000001"]
    assert bad["stricter"] == {"code": "tolerance", "detail": "max abs error 4.7e-4"} and len(bad["reason"]) == 200
    assert "AssertionError: off by one" in bad["log_tail"]
    assert by_kernel["l1_p1/model2_000002"]["status"] == "no record"
    assert by_kernel["l1_p1/model2_000002"]["reason"] == "run.py was stopped at its limit"
    assert len(kbc.harvest(folder, "default", kernels, None)) == 2  # interrupted: the rest get no line


def test_a_run_folder_of_an_earlier_schema_version_gives_the_state_lines_of_today(tmp_path: Path) -> None:
    old = (ROOT / "tests" / "data" / "records" / "schema-4.jsonl").read_text()  # flat candidate records
    (tmp_path / "v4").mkdir()
    (tmp_path / "v4" / "records.jsonl").write_text(old)
    (tmp_path / "v5").mkdir()
    (tmp_path / "v5" / "records.jsonl").write_text("".join(encode_line(decode_line(text)) + "\n" for text in old.splitlines()))
    kernels = [kbc.Kernel(id=f"p/{name}", problem="p", level=1, number=1, path=tmp_path / f"{name}.py") for name in ("c", "c_wrong")]
    lines = {version: kbc.harvest(tmp_path / version, "default", kernels, None) for version in ("v4", "v5")}
    for line in lines["v4"] + lines["v5"]:
        assert line.pop("run_id") in ("v4", "v5")  # the run folder's name
    assert lines["v4"] == lines["v5"]
    ok, wrong = lines["v4"]
    assert (ok["status"], ok["speedup"], ok["interval"], ok["reference_ms"], ok["protocol"]) == ("correct", 2.0, [1.9, 2.1], 1.0, "eager, stream sync")
    assert (ok["device"], ok["device_name"], ok["max_abs_error"], ok["finished_at"]) == ("cuda", "NVIDIA H100 80GB HBM3", 1e-6, "2026-11-23T23:00:01+00:00")
    assert ok["flags"] == [{"code": "own-share-low", "policy": "flag", "reason": "its own kernels ran 41% of the profiled GPU time"}]
    assert (wrong["status"], wrong["stricter"]["code"], wrong["speedup"]) == ("incorrect", "tolerance", None)


def test_why_a_kernel_has_no_record() -> None:
    stopped = kbc.Finished(exit=None, wall_s=541.0, stdout="", stderr="", timed_out=True, limit=540.0)
    assert "540 s, --timeout-s" in kbc.missing_reason(stopped, 540.0)
    cut = kbc.Finished(exit=None, wall_s=200.0, stdout="", stderr="", timed_out=True, limit=200.0)
    assert "budget" in kbc.missing_reason(cut, 540.0)
    ended = kbc.Finished(exit=1, wall_s=2.0, stdout="", stderr="error: no problem named 'x'\n", timed_out=False, limit=540.0)
    assert kbc.missing_reason(ended, 540.0) == "no record; run.py exit 1: error: no problem named 'x'"


def test_the_state_resumes_skipping_what_it_has(corpus: Path, tmp_path: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)[:4]
    state_path = tmp_path / "state.jsonl"
    kbc.append_lines(state_path, [kbc.no_record_line("default", kernels[0], "stopped"), kbc.state_line("default", kernels[1], record("l1_p1", "model1_000001", "correct"))])
    kbc.append_lines(state_path, [kbc.state_line("default", kernels[2], record("l1_p1", "model2_000002", "needs CUDA"))])
    with open(state_path, "a") as f:
        f.write('{"profile": "default", "kernel": "l1_p2/mo')  # a killed writer's half line
    kbc.append_lines(state_path, [kbc.state_line("kernelbench", kernels[0], record("l1_p1", "model0_000000", "harness error"))])
    assert state_path.read_text().count("\n") == 4 and '"l1_p2/mo' not in state_path.read_text()  # the half line was cut
    state = kbc.read_state(state_path)
    assert [k.id for k in kbc.pending(kernels, state, "default")] == [kernels[2].id, kernels[3].id]  # needs CUDA runs again
    assert [k.id for k in kbc.pending(kernels, state, "default", ["no record"])] == [kernels[0].id, kernels[2].id, kernels[3].id]
    assert [k.id for k in kbc.pending(kernels, state, "kernelbench")] == [k.id for k in kernels[1:]]
    assert [k.id for k in kbc.pending(kernels, state, "kernelbench", ["harness error"])] == [k.id for k in kernels]
    kbc.append_lines(state_path, [kbc.state_line("default", kernels[0], record("l1_p1", "model0_000000", "correct"))])
    assert kbc.read_state(state_path)[("default", kernels[0].id)]["status"] == "correct"  # the last line of a pair wins


def test_leftover_run_folders_are_read_into_the_state(corpus: Path, tmp_path: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)[:3]
    args = kbc.parse_args(["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--part", "1/2"])
    write_run(args.out / "runs" / "kb-default-part1of2", [record("l1_p1", "model0_000000", "correct"), record("l1_p1", "model1_000001", "incorrect")])
    kbc.append_lines(args.state, [kbc.state_line("default", kernels[1], record("l1_p1", "model1_000001", "build failed"))])
    kbc.read_leftovers(args, ["default", "kernelbench"], kernels)
    state = kbc.read_state(args.state)
    assert state[("default", kernels[0].id)]["status"] == "correct"
    assert state[("default", kernels[1].id)]["status"] == "build failed"  # a kernel the state has keeps its line
    assert ("default", kernels[2].id) not in state  # no record in the folder, and no `no record` line: it runs again
    assert not (args.out / "runs" / "kb-default-part1of2").exists()


def test_the_run_command_and_its_solutions_tree(corpus: Path, tmp_path: Path) -> None:
    kernels = kbc.corpus_kernels(corpus)
    todo = [kernels[0], kernels[-1]]
    tree = kbc.link_tree(tmp_path / "solutions" / "kb-graph", todo)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*.py")) == ["l1_p1/model0_000000.py", "l3_p4/model1_000001.py"]
    assert (tree / "l1_p1" / "model0_000000.py").resolve() == kernels[0].path.resolve()
    command = kbc.run_command("graph", corpus, tree, tmp_path / "runs", "kb-graph", ["baselines.compile_modes=[]"])
    assert command[1:3] == ["run.py", "--all"] and command[command.index("--problems-dir") + 1] == str(corpus.resolve() / "problems")
    assert command[-4:] == ["--set", "baselines.compile_modes=[]", "--set", "timing.mode=graph"]  # the profile's own setting last
    assert {"--json", "--quiet"} <= set(command) and command[command.index("--run-id") + 1] == "kb-graph"
    assert kbc.run_command("kernelbench", corpus, tree, tmp_path, "x", [])[-2:] == ["--config", str(ROOT / "configs" / "kernelbench.yaml")]


def line(profile: str, kernel: str, status: str, **fields) -> dict:
    base = {"profile": profile, "kernel": kernel, "problem": "kb_l" + kernel[1] + "/" + kernel.split("/")[0], "status": status, "reason": "r", "flags": [], "stricter": None, "speedup": None, "protocol": "", "timing_mode": ""}
    return {**base, **fields}


def state_of(*lines: dict) -> dict:
    return {(x["profile"], x["kernel"]): x for x in lines}


def test_the_report_names_disagreements_and_exits_1_on_unexplained(corpus: Path) -> None:
    kernels = {k.id: k for k in kbc.corpus_kernels(corpus)}
    a, b, c, d = "l1_p1/model0_000000", "l1_p1/model1_000001", "l2_p7/model0_000000", "l3_p1/model0_000000"
    state = state_of(
        line("default", a, "correct", speedup=1.4, flags=[{"code": "forward-only", "policy": "flag"}]),
        line("default", b, "incorrect", stricter={"code": "tolerance", "detail": "max abs error 4.7e-4"}),
        line("default", c, "correct", flags=[{"code": "no-custom-kernel", "policy": "fail"}]),  # a failing flag: not correct
        line("default", d, "needs CUDA"),
        line("kernelbench", a, "correct", speedup=1.3),
        line("kernelbench", b, "correct"),
        line("kernelbench", c, "no record", reason="stopped at its limit"),
    )
    text, code = kbc.report(state, kernels, {b: "tanh-approximate GELU: max error 3e-3 at x=2"}, 30)
    assert code == 1
    assert f"- {c} (default: flag:no-custom-kernel)" in text  # unexplained, with its code
    assert "Unexplained (a disagreement with no line in benchmarks/kbcorpus_defects.yaml): 1" in text
    assert "| default | 4 | 3 | 1 | 2 | 1 | 0 |" in text and "| kernelbench | 3 | 2 | 2 | 0 | 0 | 1 |" in text
    assert "- default: flag:no-custom-kernel 1, tolerance 1" in text
    assert "| kb_l1/l1_p1 | model1_000001 | correct | **incorrect** | correct | tolerance | tanh-approximate GELU: max error 3e-3 at x=2 |" in text
    assert "| kb_l2/l2_p7 | model0_000000 | correct | **correct (!no-custom-kernel)** | no record | flag:no-custom-kernel | **unexplained** |" in text
    assert "| kb_l3/l3_p1 | model0_000000 | correct | needs CUDA |  |  |  |" in text  # not judged: no disagreement
    assert f"- default: 1.40x {a}" in text and "implausible-time: not flagged" in text
    assert f"- {c} (kernelbench): stopped at its limit" in text
    explained, code = kbc.report(state, kernels, {b: "tanh GELU", c: "torch only: calls F.linear"}, 30)
    assert code == 0 and "Unexplained (a disagreement with no line in benchmarks/kbcorpus_defects.yaml): 0" in explained


def test_the_report_compares_timing_modes_and_the_largest_speedup(corpus: Path) -> None:
    kernels = {k.id: k for k in kbc.corpus_kernels(corpus)}
    a, b = "l1_p1/model0_000000", "l1_p4/model0_000000"
    implausible = [{"code": "implausible-time", "policy": "flag", "reason": "faster than the speed-of-light floor"}]
    same = state_of(
        line("default", a, "correct", speedup=80.0, flags=implausible, protocol="graph, stream sync"),
        line("graph", a, "correct", speedup=2.0),
        line("eager", a, "correct"),
        line("default", b, "correct"),
        line("graph", b, "needs CUDA"),
        line("eager", b, "correct"),
    )
    text, code = kbc.report(same, kernels, {})
    assert code == 0 and "statuses identical across default, graph, eager on the 1 kernel(s) all of them judged" in text
    assert f"- default: 80.00x {a} (graph, stream sync; KernelBench L40S 1.00x); implausible-time: flagged (flag): faster than" in text
    moved = {**same, ("eager", a): line("eager", a, "incorrect", stricter={"code": "timed-output", "detail": "x"})}
    text, code = kbc.report(moved, kernels, {a: "reads its output before the kernel ends"})
    assert code == 1 and "statuses DIFFER" in text and f"- {a} (default: correct, graph: correct, eager: incorrect)" in text
    alone, _ = kbc.report(state_of(line("kernelbench", a, "correct", speedup=1.1)), kernels, {})
    assert "Timing modes: nothing to compare" in alone and "implausible-time: not checked (the kernelbench profile ignores flags)" in alone


def test_the_defects_file_is_a_mapping_of_kernel_ids_to_one_line(tmp_path: Path) -> None:
    shipped = kbc.load_defects(kbc.DEFECTS)  # kernel id -> one line of evidence
    assert all("/" in k and isinstance(v, str) and v and "\n" not in v for k, v in shipped.items())
    assert kbc.load_defects(tmp_path / "absent.yaml") == {}
    good = tmp_path / "good.yaml"
    good.write_text("l1_p1/model0_000000: 'tanh GELU:\n  max error 3e-3'\n")
    assert kbc.load_defects(good) == {"l1_p1/model0_000000": "tanh GELU: max error 3e-3"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("l1_p1/model0_000000: [a, b]\n")
    with pytest.raises(SystemExit):
        kbc.load_defects(bad)


def test_list_runs_nothing(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kbc.main(["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--list", "--part", "2/3", "--fraction", "0.5", "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("part ") == 3 and "  l" in printed
    assert not (tmp_path / "out").exists()


def test_verdict_rate_counts_runs_once_references_per_problem_and_leaves_unjudged_out(tmp_path):
    spec = importlib.util.spec_from_file_location("verdict_rate", ROOT / "benchmarks" / "verdict_rate.py")
    rate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rate)

    def line(kernel, problem, run, status="correct", wall=2.0):
        return {"profile": "loop", "kernel": kernel, "problem": problem, "status": status, "run_id": run, "run_wall_s": 90.0 if run == "a" else 30.0,
                "wall_s": wall, "build_s": 10.0, "phase_s": {"check": 1.0, "time": 0.5}, "reference_wall_s": 12.0 if problem == "p1" else 4.0,
                "reference_phase_s": {"judge start-up": 3.0, "judge check": 1.0}}

    lines = [line("p1/a", "p1", "a"), line("p1/b", "p1", "a", wall=4.0), line("p2/a", "p2", "a", status="no record"), line("p3/a", "p3", "b", status="incorrect")]
    state = tmp_path / "state.jsonl"
    state.write_text("".join(json.dumps(x) + "\n" for x in lines) + json.dumps({**lines[0], "profile": "default"}) + "\n{half")
    found = rate.summary(rate.read_lines(state, "loop"))
    assert found["judged"] == 3 and found["runs"] == 2 and found["run_wall_s"] == 120.0
    assert found["verdicts_per_gpu_hour"] == 90.0  # 3 verdicts in 120 s
    assert found["reference_passes"] == 2 and found["reference_wall"] == (2, 8.0, 16.0)  # p1 once, p3 once; p2 has no verdict
    assert found["candidate_wall"] == (3, 2.0, 8.0)
    assert ("judge start-up", 2, 3.0, 6.0) in found["reference_phases"]
    text = rate.render(found, "loop", "state.jsonl")
    assert "**90.0 verdicts per GPU-hour**" in text and "| reference: judge start-up | 2 | 3.00 | 6.0 |" in text


def test_verdict_rate_shows_memchecks_seconds_and_the_lanes_idle_time_between_records(tmp_path):
    spec = importlib.util.spec_from_file_location("verdict_rate", ROOT / "benchmarks" / "verdict_rate.py")
    rate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rate)

    def line(kernel, problem, at, memcheck):
        return {"profile": "loop", "kernel": kernel, "problem": problem, "status": "correct", "run_id": "a", "run_wall_s": 60.0,
                "wall_s": 3.0, "reference_wall_s": 5.0, "finished_at": f"2026-11-28T12:00:{at:02d}+00:00",
                "sanitizer": [["memcheck", "clean", "0 errors", memcheck]]}

    # 10 s after the first: 3 s of worker and 2 s of memcheck, so 5 s idle; then a new problem: 3 + 2 + 5 s of work in 25 s
    lines = [line("p1/a", "p1", 0, 2.0), line("p1/b", "p1", 10, 2.0), line("p2/a", "p2", 35, 2.0)]
    found = rate.summary(lines)
    assert found["sanitizer"] == (3, 2.0, 6.0)
    assert found["idle"] == (2, 10.0, 20.0)  # 5 s and 15 s
    assert found["idle"] == rate.spread(rate.idle_between(lines))
    text = rate.render(found, "loop", "state.jsonl")
    assert "| **lane idle between records** (one lane: no candidate ready, its build ahead not done) | 2 | 10.00 | 20.0 |" in text
    assert "| **compute-sanitizer runs** (wall, each) | 3 | 2.00 | 6.0 |" in text
    # after the first record: 2 records in 35 s
    assert found["after_first"] == (2, 35.0)
    assert "After each run's first record: 2 records in 35 s, **205.7 per hour** (the cold start left out)." in text
    assert rate.after_first([{**lines[0], "run_id": "b"}, *lines[1:]]) == (1, 25.0)  # counted per run
    # the gaps: 10 s, then 25 s ending with p2/a; their median is what a slow kernel moves least
    assert found["gaps"] == [(10.0, "p1/b"), (25.0, "p2/a")]
    assert "Between consecutive records: median **17.5 s** (2 gaps); the longest 25.0 s, ending with p2/a." in text


def test_verdict_rate_counts_both_calls_of_a_resumed_draw_that_share_a_run_id(tmp_path):
    spec = importlib.util.spec_from_file_location("verdict_rate", ROOT / "benchmarks" / "verdict_rate.py")
    rate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rate)

    def line(kernel, at, wall, kernels, status="correct"):
        return {"profile": "loop", "kernel": kernel, "problem": kernel.split("/")[0], "status": status,
                "run_id": "kb-loop-part1of1", "run_wall_s": wall, "run_kernels": kernels, "wall_s": 3.0,
                "finished_at": f"2026-11-28T12:{at:02d}:00+00:00"}

    # call 1: 3 kernels in 100 s, one left without a record; call 2 (same run id): that one, judged, in 50 s
    calls = [line("p1/a", 1, 100.0, 3), line("p1/b", 2, 100.0, 3), line("p2/a", 3, 100.0, 3, status="no record"),
             line("p2/a", 10, 50.0, 1)]
    state = tmp_path / "state.jsonl"
    state.write_text("".join(json.dumps(x) + "\n" for x in calls))
    found = rate.summary(rate.read_lines(state, "loop"))
    assert found["judged"] == 3 and found["runs"] == 2 and found["run_wall_s"] == 150.0
    assert found["verdicts_per_gpu_hour"] == 72.0  # 3 verdicts in 150 s
    assert found["gaps"] == [(60.0, "p1/b")] and found["after_first"] == (1, 60.0)  # within call 1 only
    assert found["idle"] == (1, 57.0, 57.0)
    out = tmp_path / "rate.md"
    assert rate.main([str(state), "--out", str(out)]) == 0
    assert "3 of 3 kernels judged in 2 run(s) of 150.0 s in all: **72.0 verdicts per GPU-hour**." in out.read_text()
    # a call whose every line a later call superseded still spent its wall time
    state.write_text("".join(json.dumps(x) + "\n" for x in calls[2:]))
    assert rate.main([str(state), "--out", str(out)]) == 0
    assert "1 of 1 kernels judged in 2 run(s) of 150.0 s in all: **24.0 verdicts per GPU-hour**." in out.read_text()


def test_verdict_rate_splits_builds_ahead_by_whether_they_were_given_the_precompiled_header(tmp_path):
    spec = importlib.util.spec_from_file_location("verdict_rate", ROOT / "benchmarks" / "verdict_rate.py")
    rate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rate)

    def line(kernel, seconds, header, outcome="built"):
        return {"profile": "loop", "kernel": kernel, "problem": kernel.split("/")[0], "status": "correct", "run_id": "a",
                "run_wall_s": 60.0, "wall_s": 3.0, "finished_at": "2026-11-29T12:00:00+00:00",
                "ahead": {"outcome": outcome, "detail": "", "seconds": seconds, **({} if header is None else {"header": header})}}

    # a state line from before the field (no "header") counts as without; a build that compiled nothing counts as neither
    lines = [line("p/a", 60.0, True), line("p/b", 64.0, True), line("p/c", 72.0, False), line("p/d", 80.0, None),
             line("p/e", 5.0, True, outcome="nothing")]
    found = rate.summary(lines)
    assert found["ahead_header"] == (2, 62.0, 124.0) and found["ahead_plain"] == (2, 76.0, 152.0)
    text = rate.render(found, "loop", "state.jsonl")
    assert "| build ahead (wall), given the precompiled header | 2 | 62.00 | 124.0 |" in text
    assert "| build ahead (wall), without it | 2 | 76.00 | 152.0 |" in text


def test_verdict_rate_adds_the_hosts_cpu_seconds_per_verdict_from_the_samples_of_the_same_calls(tmp_path):
    def line(kernel, status="correct"):
        return {"profile": "loop", "kernel": kernel, "problem": kernel.split("/")[0], "status": status, "run_id": "a",
                "run_wall_s": 60.0, "wall_s": 3.0}

    state = tmp_path / "state.jsonl"
    state.write_text("".join(json.dumps(x) + "\n" for x in [line("p1/a"), line("p2/a"), line("p3/a", "no record")]))
    samples = tmp_path / "cpu.csv"
    samples.write_text("c,0,0,0,16\nc,60,900,960,16\n")  # 900 CPU-s busy of 960 over 60 s on 16 cores
    out = tmp_path / "rate.md"
    done = subprocess.run([sys.executable, "benchmarks/verdict_rate.py", str(state), "--cpu", str(samples), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    last = out.read_text().strip().splitlines()[-1]
    # two verdicts (the kernel with no record is not one): 450 CPU-s each, so 16 cores carry at most 128 an hour
    assert last == ("host CPUs: 15.0 of 16 busy on average (94%) over 60 s, 900 CPU-s in all; at least 90% busy for 60 s "
                    "(100%); 450.0 CPU-s per verdict (2): 16 cores busy all the time would turn at most 128 per hour")
    missing = subprocess.run([sys.executable, "benchmarks/verdict_rate.py", str(state), "--cpu", str(tmp_path / "none.csv")],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no CPU samples file" in missing.stderr
