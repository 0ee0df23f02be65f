"""The corpus of LLM-written kernels (../shared/kbcorpus: 267 ModelNew files for 119 KernelBench problems,
every one judged correct by KernelBench's own eval) through the real CLI under our profiles, resumable
and in parts, with a report of where our verdict differs from KernelBench's and why.

    python3 benchmarks/kbcorpus.py [--corpus DIR] [--out DIR] [--state FILE] [--report FILE]
                                   [--profiles default,kernelbench,graph,eager,auto,loop] [--fraction F --seed N]
                                   [--problems l1_p1 kb_l2/l2_p5 ...] [--part K/N] [--timeout-s S] [--budget-s S]
                                   [--retry "no record,harness error"] [--set KEY=VALUE ...] [--list | --report-only]

The corpus (--corpus, default ../shared/kbcorpus from the repository root): problems/kb_l{L}/l{L}_p{N}.py,
solutions/l{L}_p{N}/{model}_{hash}.py and kb_verdicts.json, which maps each kernel's id
`l{L}_p{N}/{model}_{hash}` to KernelBench's verdict and its figures (L40S speedup, times). A corpus without
kb_verdicts.json but with an index.json (../shared/kbcorpus2) is compared with each kernel's published verdict
there instead (correct, or incorrect for a wrong output or a failure; `?` where its source published none).

Selection: every kernel, or (--fraction F --seed N) a seeded draw of F of each level's kernels, at least
one per level, so all levels are represented (the same arguments draw the same kernels); --problems
narrows to some problems first. --part K/N keeps the K-th of N parts, split by problem (a problem's
kernels stay together), balanced on kernels with a level-2 kernel counting 1.5 and a level-3 one 3
(their references and builds take longer). --list prints the selection and the parts and runs nothing.

Profiles: `default` (configs/default.yaml), `kernelbench` (--config configs/kernelbench.yaml),
`graph`, `eager`, `auto` (the default with --set timing.mode=...) and `loop` (configs/loop.yaml with
memcheck on, no compile baseline, no null candidate: what benchmarks/verdict_rate.py reads as
verdicts per GPU-hour; each state line then also carries the kernel's phases, builds and run time). For each, one `run.py --all --json
--quiet` over the selected kernels the state does not have yet for that profile: the problems are the
corpus's problems/ folder (run.py names a problem by its file stem, l1_p1, and looks for its candidates
in <solutions_dir>/l1_p1/), the candidates a tree of links to the kernels' files (OUT/solutions/RUN/),
the records in OUT/runs/RUN/ (RUN = kb-<profile>[-part<K>of<N>]); --set overrides go to every run
(e.g. baselines.compile_modes=[], timing.null_candidate=false), the profile's own setting last. Each run
is stopped (its whole process tree) after --timeout-s, or sooner when the invocation's --budget-s runs
out; a profile with under a minute of budget left is not started.

State (--state, default OUT/state.jsonl): JSON lines, one per (profile, kernel), appended as soon as a
run ends from its records.jsonl (fsync'ed as each record lands, so a run stopped at its limit keeps what
it finished); the last line of a pair wins. Fields: profile, kernel, problem (kb_l1/l1_p1), level, status,
reason (first 200 characters), flags ([{code, policy, reason}]), stricter ({code, detail} or null:
harness/parent/verdict.py), speedup and interval ([low, high], paired rounds), candidate_ms, reference_ms,
protocol (paired.protocol), timing_mode and timing_fallback (the candidate's timing), problem_timing_mode
and problem_timing_mode_reason (the reference record's: the mode its problem was timed in, and why),
max_abs_error, gradients, device, device_name, run_id, wall_s, finished_at, and log_tail (the end of the
worker's log) when not correct. A kernel without a record after its run gets status `no record` and
the reason (run.py was stopped at its limit, or its exit and stderr); `--retry 'no record'` runs those
again. A pair already in the state is skipped, except
`needs CUDA` (a CPU run's skip) and the statuses named by --retry. When this script is interrupted
(Ctrl-C, SIGTERM) the run in flight is stopped, its finished records go into the state and the rest get
no line. A run folder of the same RUN already in OUT/runs (a killed invocation's) is read into the state
first, for the kernels the state lacks.

Report (--report, default OUT/report.md; written after every invocation, --report-only writes it alone):
one row per kernel in the state: problem, kernel, KernelBench's verdict, ours under each profile, our
speedup beside KernelBench's L40S one, and for each disagreement (ours not correct, a flag with policy
fail counting as not correct, where KernelBench says correct; and the reverse, `looser`) our code (the stricter check, the failing
flag or the status) and the named defect from benchmarks/kbcorpus_defects.yaml, else "unexplained". The
summary on top: kernels judged per profile (`needs CUDA` and `no record` are not judged), agreements,
disagreements by code, the unexplained ones, whether the timing-mode profiles (default, auto, graph,
eager) give identical statuses on the kernels all of them judged, and the largest speedup per profile
with its implausible-time flag. Exit 1 when a disagreement is unexplained or a timing-mode profile
changes a status, else 0. GPU only for verdicts: on the CPU every CUDA kernel is `needs CUDA`.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from kernelbench_levels import Finished, append_line, read_text, run_bounded, tail  # noqa: E402

from harness.core.schema import upgrade  # noqa: E402

DEFECTS = ROOT / "benchmarks" / "kbcorpus_defects.yaml"
PROFILES: dict[str, list[str]] = {  # extra run.py arguments of each profile, after the caller's --set
    "default": [],
    "kernelbench": ["--config", str(ROOT / "configs" / "kernelbench.yaml")],
    "auto": ["--set", "timing.mode=auto"],
    "graph": ["--set", "timing.mode=graph"],
    "eager": ["--set", "timing.mode=eager"],
    # what loops run (issue targets on verdicts per GPU-hour): configs/loop.yaml with memcheck on, no
    # compile baseline and no null candidate
    "loop": ["--config", str(ROOT / "configs" / "loop.yaml"), "--set", "sanitizer.enabled=auto", "--set", "baselines.compile_modes=[]", "--set", "timing.null_candidate=off"],
}
TIMING_PROFILES = ("default", "auto", "graph", "eager")  # the same checks, another timing protocol: statuses must not move
LEVEL_COST = {1: 1.0, 2: 1.5, 3: 3.0}  # a kernel's weight when parts are balanced
NOT_JUDGED = ("needs CUDA", "no record")
MIN_RUN_S = 60.0  # a profile is not started with less budget than this left


# ---------------------------------------------------------------- the corpus and the selection


@dataclasses.dataclass(frozen=True)
class Kernel:
    id: str  # l1_p1/deepseek_9c99af: kb_verdicts.json's key
    problem: str  # l1_p1: the problem file's stem, run.py's name for it
    level: int
    number: int
    path: Path
    kernelbench: str = "?"  # KernelBench's verdict ("correct"), "?" when kb_verdicts.json lacks the kernel
    kb_speedup: Optional[float] = None  # torch_speedup_l40s

    @property
    def problem_key(self) -> str:
        return f"kb_l{self.level}/{self.problem}"


def parse_problem(name: str) -> tuple[int, int]:
    """(level, number) of `l1_p19` (or `kb_l1/l1_p19`)."""
    stem = name.rsplit("/", 1)[-1]
    level, _, number = stem.partition("_p")
    if not level.startswith("l") or not level[1:].isdigit() or not number.isdigit():
        raise ValueError(f"not a corpus problem name: {name!r} (l<L>_p<N>)")
    return int(level[1:]), int(number)


def published_verdicts(index: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """kb_verdicts.json's shape from a corpus's index.json (../shared/kbcorpus2: kernels from other sources, each with
    its source's `published_verdict`): correct where the source judged it correct (`correct` or `correctness` true,
    or category `correct`), incorrect where it judged the output wrong or the kernel failed (category `mismatch` or
    `failed`, or `correctness` false), and no entry (`?`) where the source published nothing."""
    verdicts: dict[str, dict[str, Any]] = {}
    for entry in index:
        published = entry.get("published_verdict") or {}
        said = published.get("correct", published.get("correctness"))
        category = published.get("category")
        if said is True or (said is None and category == "correct"):
            verdict = "correct"
        elif said is False or category in ("mismatch", "failed"):
            verdict = "incorrect"
        else:
            continue
        solution = Path(str(entry.get("solution", "")))
        verdicts[f"{solution.parent.name}/{solution.stem}"] = {"kernelbench": verdict}
    return verdicts


def corpus_kernels(corpus: Path) -> list[Kernel]:
    """Every kernel file under corpus/solutions/, in (level, problem, name) order, with KernelBench's verdict
    (kb_verdicts.json), or without that file the verdict its source published (index.json)."""
    verdicts_path, index_path = corpus / "kb_verdicts.json", corpus / "index.json"
    verdicts = {}
    if verdicts_path.is_file():
        verdicts = json.loads(verdicts_path.read_text())
    elif index_path.is_file():
        verdicts = published_verdicts(json.loads(index_path.read_text()))
    found = []
    for path in (corpus / "solutions").glob("*/*.py"):
        if path.name.startswith("_"):
            continue
        level, number = parse_problem(path.parent.name)
        kernel_id = f"{path.parent.name}/{path.stem}"
        known = verdicts.get(kernel_id) or {}
        found.append(Kernel(kernel_id, path.parent.name, level, number, path, known.get("kernelbench", "?"), known.get("torch_speedup_l40s")))
    return sorted(found, key=order)


def order(kernel: Kernel) -> tuple[int, int, str]:
    return kernel.level, kernel.number, kernel.id


def select(kernels: list[Kernel], fraction: float = 1.0, seed: int = 0, problems: Iterable[str] = ()) -> list[Kernel]:
    """--problems, then a seeded draw of `fraction` of each level's kernels (at least one per level present)."""
    wanted = {parse_problem(p) for p in problems}
    if wanted:
        missing = wanted - {(k.level, k.number) for k in kernels}
        if missing:
            raise SystemExit(f"error: --problems: not in the corpus: {', '.join(f'l{lv}_p{n}' for lv, n in sorted(missing))}")
        kernels = [k for k in kernels if (k.level, k.number) in wanted]
    if not 0 < fraction <= 1:
        raise SystemExit(f"error: --fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return list(kernels)
    chosen: list[Kernel] = []
    for level in sorted({k.level for k in kernels}):
        pool = [k for k in kernels if k.level == level]
        count = max(1, round(fraction * len(pool)))
        chosen += random.Random(f"kbcorpus:{seed}:{level}").sample(pool, count)
    return sorted(chosen, key=order)


def parse_part(text: str) -> tuple[int, int]:
    part, _, parts = text.partition("/")
    if not part.isdigit() or not parts.isdigit() or not 1 <= int(part) <= int(parts):
        raise SystemExit(f"error: --part takes K/N with 1 <= K <= N, got {text!r}")
    return int(part), int(parts)


def split_parts(kernels: list[Kernel], parts: int) -> list[list[Kernel]]:
    """`parts` lists of kernels, a problem's kernels together: problems by falling weight (kernels times
    LEVEL_COST), each to the lightest part so far (the first on a tie). Deterministic for one selection."""
    by_problem: dict[str, list[Kernel]] = {}
    for kernel in kernels:
        by_problem.setdefault(kernel.problem, []).append(kernel)
    weight = {p: sum(LEVEL_COST.get(k.level, 1.0) for k in ks) for p, ks in by_problem.items()}
    loads, split = [0.0] * parts, [[] for _ in range(parts)]
    for problem in sorted(by_problem, key=lambda p: (-weight[p], order(by_problem[p][0]))):
        lightest = loads.index(min(loads))
        loads[lightest] += weight[problem]
        split[lightest] += by_problem[problem]
    return [sorted(part, key=order) for part in split]


# ---------------------------------------------------------------- the state


def read_state(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(profile, kernel) -> its last line; a half-written line is skipped."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for text in read_text(path).splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and line.get("profile") and line.get("kernel"):
            found[(line["profile"], line["kernel"])] = line
    return found


def append_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """Append JSON lines, each flushed and fsync'ed (kernelbench_levels.append_line cuts a half-written last line first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for line in lines:
        append_line(path, line)


def pending(kernels: list[Kernel], state: dict[tuple[str, str], dict[str, Any]], profile: str, retry: Iterable[str] = ()) -> list[Kernel]:
    """The kernels this profile still has to run: no line, or a line whose status is `needs CUDA` or in `retry`."""
    again = {"needs CUDA", *retry}
    return [k for k in kernels if (profile, k.id) not in state or state[(profile, k.id)].get("status") in again]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def state_line(profile: str, kernel: Kernel, record: dict[str, Any], reference: Optional[dict[str, Any]] = None, run_id: str = "", log_tail: str = "") -> dict[str, Any]:
    """One state line from a candidate record (a records.jsonl line in this harness's layout, its parts:
    read_run upgrades an earlier version's) and its problem's reference record."""
    identity, decision, checks, timing, integrity, provenance = (record.get(part) or {} for part in ("identity", "decision", "checks", "timing", "integrity", "provenance"))
    stats = timing.get("stats") or {}
    paired = timing.get("paired") or {}
    stricter = decision.get("stricter")
    ref_identity, ref_timing, ref_provenance = ((reference or {}).get(part) or {} for part in ("identity", "timing", "provenance"))
    errors = [c["max_abs_error"] for c in checks.get("results") or [] if c.get("max_abs_error") is not None]
    line: dict[str, Any] = {
        "profile": profile,
        "kernel": kernel.id,
        "problem": kernel.problem_key,
        "level": kernel.level,
        "status": decision.get("status"),
        "reason": (decision.get("reason") or "")[:200],
        "flags": [{"code": f.get("code"), "policy": f.get("policy"), "reason": (f.get("reason") or "")[:200]} for f in integrity.get("flags") or []],
        "stricter": {"code": stricter.get("code"), "detail": (stricter.get("detail") or "")[:200]} if stricter else None,
        "speedup": timing.get("speedup"),
        "interval": [paired["low"], paired["high"]] if paired.get("low") is not None else None,
        "candidate_ms": stats.get("median_ms"),
        "reference_ms": timing.get("reference_ms"),
        "protocol": paired.get("protocol", ""),
        "timing_mode": stats.get("timing_mode", ""),
        "timing_fallback": stats.get("fallback", ""),
        "problem_timing_mode": ref_timing.get("timing_mode") or (ref_timing.get("stats") or {}).get("timing_mode", ""),
        "problem_timing_mode_reason": (ref_timing.get("timing_mode_reason") or "")[:200],
        "max_abs_error": max(errors) if errors else None,
        "gradients": checks.get("gradients", ""),
        "device": identity.get("device", ""),
        "device_name": ref_identity.get("device_name", ""),
        "run_id": run_id or identity.get("run_id", ""),
        "wall_s": provenance.get("wall_seconds"),
        "phase_s": provenance.get("phase_seconds") or {},
        "build_s": round(sum(b.get("seconds") or 0.0 for b in provenance.get("builds") or [] if not b.get("cached")), 3),
        "builds": [[b.get("name"), bool(b.get("cached"))] for b in provenance.get("builds") or []],
        "ahead": {k: (provenance.get("ahead") or {}).get(k) for k in ("outcome", "detail", "seconds", "header")},
        # [tool, outcome, detail, seconds]: what each run cost the lane (sanitizer.prestart's saving shows here)
        "sanitizer": [[r.get("tool"), r.get("outcome"), (r.get("detail") or "")[:160], r.get("seconds")] for r in integrity.get("sanitizer") or []],
        "warnings": [(w or "")[:200] for w in decision.get("warnings") or []],
        "reference_wall_s": ref_provenance.get("wall_seconds"),
        "reference_phase_s": ref_provenance.get("phase_seconds") or {},
        "finished_at": provenance.get("finished_at") or now(),
    }
    if line["status"] not in ("correct", "needs CUDA") and log_tail:
        line["log_tail"] = log_tail
    return line


def no_record_line(profile: str, kernel: Kernel, reason: str, run_id: str = "") -> dict[str, Any]:
    return {
        "profile": profile,
        "kernel": kernel.id,
        "problem": kernel.problem_key,
        "level": kernel.level,
        "status": "no record",
        "reason": reason[:200],
        "flags": [],
        "stricter": None,
        "speedup": None,
        "interval": None,
        "candidate_ms": None,
        "reference_ms": None,
        "protocol": "",
        "timing_mode": "",
        "timing_fallback": "",
        "problem_timing_mode": "",
        "problem_timing_mode_reason": "",
        "max_abs_error": None,
        "gradients": "",
        "device": "",
        "device_name": "",
        "run_id": run_id,
        "wall_s": None,
        "finished_at": now(),
    }


def read_run(folder: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """A run folder's candidate records by kernel id (the last wins) and reference records by problem,
    each in this harness's layout (a line of an earlier schema version upgraded: harness.core.schema.upgrade)."""
    candidates: dict[str, dict[str, Any]] = {}
    references: dict[str, dict[str, Any]] = {}
    for text in read_text(folder / "records.jsonl").splitlines():
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            continue  # the half-written last line of a killed run
        if not isinstance(record, dict):
            continue
        record = upgrade(record)
        if record.get("kind") == "candidate":
            candidates[f"{record['identity'].get('problem')}/{record['identity'].get('candidate')}"] = record
        elif record.get("kind") == "reference":
            references[(record.get("identity") or {}).get("problem", "")] = record
    return candidates, references


def harvest(folder: Path, profile: str, kernels: list[Kernel], missing_reason: Optional[str]) -> list[dict[str, Any]]:
    """State lines for `kernels` from a run folder: one per record found, and, when `missing_reason` is given,
    a `no record` line with it for each kernel the run left without a record."""
    candidates, references = read_run(folder)
    lines = []
    for kernel in kernels:
        record = candidates.get(kernel.id)
        if record is not None:
            log_path = record["provenance"].get("log_path")
            log = tail(read_text(folder / log_path), 600) if log_path else ""
            lines.append(state_line(profile, kernel, record, references.get(kernel.problem), folder.name, log))
        elif missing_reason is not None:
            lines.append(no_record_line(profile, kernel, missing_reason, folder.name))
    return lines


# ---------------------------------------------------------------- the runs


def run_id(profile: str, part: Optional[tuple[int, int]]) -> str:
    return f"kb-{profile}" + (f"-part{part[0]}of{part[1]}" if part else "")


def link_tree(folder: Path, kernels: list[Kernel]) -> Path:
    """A solutions tree of links: folder/<problem>/<name>.py -> the corpus file, for these kernels only."""
    shutil.rmtree(folder, ignore_errors=True)
    for kernel in kernels:
        (folder / kernel.problem).mkdir(parents=True, exist_ok=True)
        (folder / kernel.problem / kernel.path.name).symlink_to(kernel.path.resolve())
    return folder


def run_command(profile: str, corpus: Path, solutions: Path, results: Path, rid: str, overrides: list[str]) -> list[str]:
    command = [sys.executable, "run.py", "--all", "--problems-dir", str(corpus.resolve() / "problems"), "--set", f"solutions_dir={json.dumps(str(solutions))}", "--results", str(results), "--run-id", rid, "--json", "--quiet"]
    for item in overrides:
        command += ["--set", item]
    return command + PROFILES[profile]


def run_env(out: Path) -> dict[str, str]:
    scratch = out / "scratch"
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"), "TRITON_CACHE_DIR": str(scratch / "triton")}


def missing_reason(done: Finished, timeout_s: float) -> str:
    """Why a kernel has no record after this run: it was stopped at its limit, or it ended without one."""
    if done.timed_out:
        cause = "--timeout-s" if done.limit >= timeout_s else "what was left of --budget-s"
        return f"run.py was stopped at its limit ({done.limit:.0f} s, {cause}) before this kernel's record; rerun with --retry 'no record'"
    return f"no record; run.py exit {done.exit}: {tail(done.stderr, 160) or 'no output'}"


def run_profile(profile: str, todo: list[Kernel], args: argparse.Namespace, limit: float) -> list[dict[str, Any]]:
    """One run.py over `todo` under `profile`; its state lines (already appended to the state)."""
    rid = run_id(profile, args.part)
    results = args.out / "runs"
    folder = results / rid
    shutil.rmtree(folder, ignore_errors=True)  # read into the state at the start (leftovers)
    solutions = link_tree(args.out / "solutions" / rid, todo)
    command = run_command(profile, args.corpus, solutions, results, rid, args.set)
    print(f"{profile}: {len(todo)} kernel(s) on {len({k.problem for k in todo})} problem(s), limit {limit:.0f} s", file=sys.stderr, flush=True)
    done: Optional[Finished] = None
    try:
        done = run_bounded(command, limit, run_env(args.out), args.out, rid)
    finally:  # an interrupt of this script stops the run (run_bounded) and keeps what it finished
        reason = missing_reason(done, args.timeout_s) if done is not None else None  # interrupted: no line for the rest
        lines = harvest(folder, profile, todo, reason)
        for line in lines if done is not None else []:  # the run's own wall time, for verdicts per hour (benchmarks/verdict_rate.py)
            line.update(run_wall_s=round(done.wall_s, 1), run_kernels=len(todo))
        append_lines(args.state, lines)
    counts: dict[str, int] = {}
    for line in lines:
        counts[line["status"]] = counts.get(line["status"], 0) + 1
    how = "stopped at its limit" if done.timed_out else f"exit {done.exit}"
    print(f"{profile}: {how} after {done.wall_s:.0f} s; " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), file=sys.stderr, flush=True)
    return lines


def read_leftovers(args: argparse.Namespace, profiles: list[str], kernels: list[Kernel]) -> None:
    """Records of run folders a killed invocation left in OUT/runs, into the state (finished kernels only)."""
    state = read_state(args.state)
    for profile in profiles:
        folder = args.out / "runs" / run_id(profile, args.part)
        if (folder / "records.jsonl").is_file():
            lines = harvest(folder, profile, [k for k in kernels if (profile, k.id) not in state], None)
            append_lines(args.state, lines)
            if lines:
                print(f"{profile}: {len(lines)} record(s) read from {folder}, left by an earlier invocation", file=sys.stderr)
            shutil.rmtree(folder, ignore_errors=True)


def lock(state: Path) -> Any:
    state.parent.mkdir(parents=True, exist_ok=True)
    handle = open(f"{state}.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"error: another invocation is using {state}") from None
    return handle


def on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("terminated")


def run_all(args: argparse.Namespace, profiles: list[str], kernels: list[Kernel]) -> bool:
    """Every profile over the kernels it still needs; False when interrupted."""
    started = time.monotonic()
    read_leftovers(args, profiles, kernels)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        for profile in profiles:
            todo = pending(kernels, read_state(args.state), profile, args.retry)
            if not todo:
                print(f"{profile}: nothing to run (every selected kernel has a line)", file=sys.stderr)
                continue
            left = args.budget_s - (time.monotonic() - started) if args.budget_s else float("inf")
            if left < MIN_RUN_S:
                print(f"budget: {left:.0f} s left; {profile} ({len(todo)} kernels) waits for the next invocation", file=sys.stderr)
                break
            run_profile(profile, todo, args, min(args.timeout_s, left))
    except KeyboardInterrupt:
        print("interrupted: the records finished so far are in the state", file=sys.stderr)
        return False
    return True


# ---------------------------------------------------------------- the report


def failing_flags(line: dict[str, Any]) -> list[str]:
    return [f["code"] for f in line.get("flags") or [] if f.get("policy") == "fail"]


def judged(line: dict[str, Any]) -> bool:
    return line.get("status") not in NOT_JUDGED


def ours_correct(line: dict[str, Any]) -> bool:
    return line.get("status") == "correct" and not failing_flags(line)


def our_code(line: dict[str, Any]) -> str:
    """Why ours is not correct: the stricter check's code, else the failing flag, else the status."""
    if line.get("stricter"):
        return line["stricter"]["code"]
    failing = failing_flags(line)
    return f"flag:{failing[0]}" if failing else str(line.get("status"))


def disagreement(line: dict[str, Any], kernelbench: str) -> Optional[str]:
    """Our code where ours and KernelBench's verdicts differ on a judged kernel, else None."""
    if not judged(line) or kernelbench not in ("correct", "incorrect"):
        return None
    if kernelbench == "correct" and not ours_correct(line):
        return our_code(line)
    if kernelbench != "correct" and ours_correct(line):
        return "looser: correct here"
    return None


def load_defects(path: Path) -> dict[str, str]:
    """Kernel id -> one line of evidence, from the annotation file (missing or empty: none)."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SystemExit(f"error: {path} must map kernel ids (l1_p1/model_hash) to one line of text each")
    return {k: " ".join(v.split()) for k, v in data.items()}


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict_cell(line: Optional[dict[str, Any]], disagrees: bool) -> str:
    if line is None:
        return ""
    codes = [("!" if f.get("policy") == "fail" else "") + str(f.get("code")) for f in line.get("flags") or []]
    text = str(line.get("status")) + (f" ({', '.join(dict.fromkeys(codes))})" if codes else "")
    return f"**{text}**" if disagrees else text


def fmt_x(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}x"


def implausible(line: dict[str, Any]) -> str:
    """The implausible-time flag of a line (and suspect-time, its grey neighbour, where the harness has it)."""
    hits = [f for f in line.get("flags") or [] if f.get("code") in ("implausible-time", "suspect-time")]
    if hits:
        return "; ".join(f"{'' if f['code'] == 'implausible-time' else f['code'] + ' '}flagged ({f.get('policy')}): {f.get('reason', '')[:120]}" for f in hits)
    return "not flagged" if line.get("profile") != "kernelbench" else "not checked (the kernelbench profile ignores flags)"


def timing_consistency(state: dict[tuple[str, str], dict[str, Any]], profiles: list[str]) -> tuple[list[str], int, list[str]]:
    """The timing-mode profiles present, the kernels all of them judged, and those whose status differs among them."""
    modes = [p for p in profiles if p in TIMING_PROFILES]
    kernel_ids = sorted({k for _, k in state})
    common = [k for k in kernel_ids if all((p, k) in state and judged(state[(p, k)]) for p in modes)]
    differ = []
    for k in common:
        verdicts = {p: (state[(p, k)]["status"], tuple(failing_flags(state[(p, k)]))) for p in modes}
        if len(set(verdicts.values())) > 1:
            differ.append(f"{k} (" + ", ".join(f"{p}: {s}" + (f" !{','.join(f)}" if f else "") for p, (s, f) in verdicts.items()) + ")")
    return modes, len(common), differ


def report(state: dict[tuple[str, str], dict[str, Any]], kernels: dict[str, Kernel], defects: dict[str, str], corpus_total: Optional[int] = None) -> tuple[str, int]:
    """The markdown report over every line of the state, and the exit code (1: an unexplained disagreement or a
    timing-mode profile that changes a status)."""
    profiles = [p for p in PROFILES if any(q == p for q, _ in state)] + sorted({q for q, _ in state} - set(PROFILES))
    kernel_ids = sorted({k for _, k in state}, key=lambda k: order(kernels[k]) if k in kernels else (99, 0, k))

    def kb(k: str) -> str:
        return kernels[k].kernelbench if k in kernels else "?"

    rows, unexplained, by_code, explained_kernels = [], [], {p: {} for p in profiles}, set()
    for k in kernel_ids:
        codes = {}
        for p in profiles:
            line = state.get((p, k))
            code = disagreement(line, kb(k)) if line else None
            if code:
                codes[p] = code
                by_code[p][code] = by_code[p].get(code, 0) + 1
        if codes:
            if k in defects:
                explained_kernels.add(k)
            else:
                unexplained.append(f"{k} (" + ", ".join(f"{p}: {c}" for p, c in codes.items()) + ")")
        code_text = next(iter(codes.values())) if len(set(codes.values())) == 1 else "; ".join(f"{p}: {c}" for p, c in codes.items())
        defect = (defects.get(k) or "**unexplained**") if codes else defects.get(k, "")
        speedup = next((state[(p, k)]["speedup"] for p in profiles if (p, k) in state and state[(p, k)].get("speedup") is not None), None)
        kb_x = kernels[k].kb_speedup if k in kernels else None
        problem = next(state[(p, k)]["problem"] for p in profiles if (p, k) in state)
        row = [problem, k.split("/", 1)[1], kb(k)] + [verdict_cell(state.get((p, k)), p in codes) for p in profiles]
        rows.append(row + [code_text, cell(defect), fmt_x(speedup), fmt_x(kb_x)])
    modes, common, differ = timing_consistency(state, profiles)
    stale = sorted(k for k in defects if k in kernel_ids and k not in explained_kernels and all(judged(state[(p, k)]) for p in profiles if (p, k) in state))

    out = ["# The LLM-written kernel corpus against KernelBench's verdicts", ""]
    total = f" of the corpus's {corpus_total}" if corpus_total is not None else ""
    levels = {lv: sum(1 for k in kernel_ids if k in kernels and kernels[k].level == lv) for lv in sorted({kernels[k].level for k in kernel_ids if k in kernels})}
    out.append(f"- {len(kernel_ids)} kernel(s){total} have a line in the state (" + ", ".join(f"level {lv}: {n}" for lv, n in levels.items()) + ")")
    out += ["", "| profile | lines | judged | agree | disagree | needs CUDA | no record | devices |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for p in profiles:
        lines = [line for (q, _), line in state.items() if q == p]
        seen = [line for line in lines if judged(line)]
        disagree = sum(by_code[p].values())
        devices = ", ".join(sorted({line.get("device_name") or line.get("device") or "" for line in seen} - {""}))
        out.append(f"| {p} | {len(lines)} | {len(seen)} | {len(seen) - disagree} | {disagree} | {sum(x['status'] == 'needs CUDA' for x in lines)} | {sum(x['status'] == 'no record' for x in lines)} | {cell(devices)} |")
    out += ["", "Disagreements by code:"] + [f"- {p}: " + (", ".join(f"{c} {n}" for c, n in sorted(by_code[p].items(), key=lambda x: (-x[1], x[0]))) or "none") for p in profiles]
    out += ["", f"Unexplained (a disagreement with no line in benchmarks/kbcorpus_defects.yaml): {len(unexplained)}"] + [f"- {u}" for u in unexplained]
    if len(modes) < 2 or not common:
        out += ["", f"Timing modes: nothing to compare ({', '.join(modes) or 'no timing-mode profile'} run; {common} kernel(s) judged by all of them)"]
    elif differ:
        out += ["", f"Timing modes: statuses DIFFER across {', '.join(modes)} on {len(differ)} of the {common} kernel(s) all of them judged:"] + [f"- {d}" for d in differ]
    else:
        out += ["", f"Timing modes: statuses identical across {', '.join(modes)} on the {common} kernel(s) all of them judged"]
    out += ["", "Largest speedup per profile:"]
    for p in profiles:
        timed = [line for (q, _), line in state.items() if q == p and line.get("speedup") is not None]
        if timed:
            top = max(timed, key=lambda line: line["speedup"])
            kb_x = kernels[top["kernel"]].kb_speedup if top["kernel"] in kernels else None
            out.append(f"- {p}: {fmt_x(top['speedup'])} {top['kernel']} ({top.get('protocol') or top.get('timing_mode')}; KernelBench L40S {fmt_x(kb_x) or '?'}); implausible-time: {implausible(top)}")
        else:
            out.append(f"- {p}: no timed kernel")
    missing = sorted((line for line in state.values() if line.get("status") == "no record"), key=lambda line: (line["kernel"], line["profile"]))
    if missing:
        out += ["", f"No record ({len(missing)}, not judged):"] + [f"- {line['kernel']} ({line['profile']}): {line.get('reason', '')}" for line in missing[:30]]
        out += [f"- ... and {len(missing) - 30} more"] if len(missing) > 30 else []
    if stale:
        out += ["", f"Annotated but agreeing under every profile judged (a stale annotation?): {', '.join(stale)}"]
    failed = bool(unexplained) or bool(differ)
    why = [w for w, hit in (("unexplained disagreements", unexplained), ("a timing-mode profile changes a status", differ)) if hit]
    out += ["", f"Exit {int(failed)}" + (f": {', '.join(why)}" if why else ": every disagreement explained, timing modes agree"), ""]
    header = ["problem", "kernel", "KernelBench"] + profiles + ["code", "defect", "speedup (ours)", "KernelBench L40S"]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n", int(failed)


def write_report(args: argparse.Namespace, kernels: list[Kernel]) -> int:
    text, code = report(read_state(args.state), {k.id: k for k in kernels}, load_defects(args.defects), len(kernels))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    head = text.split("\n| problem |", 1)[0]
    print(head.rstrip() + f"\n\nreport: {args.report}; state: {args.state}", flush=True)
    return code


# ---------------------------------------------------------------- main


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "kbcorpus", help="the corpus folder (default ../shared/kbcorpus)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "kbcorpus", help="run folders, link trees and scratch (default .cache/kbcorpus)")
    parser.add_argument("--state", type=Path, help="the state file (default OUT/state.jsonl)")
    parser.add_argument("--report", type=Path, help="the markdown report (default OUT/report.md)")
    parser.add_argument("--defects", type=Path, default=DEFECTS, help="kernel id -> named defect (default benchmarks/kbcorpus_defects.yaml)")
    parser.add_argument("--profiles", default="default", help=f"comma-separated, of {', '.join(PROFILES)} (default: default)")
    parser.add_argument("--fraction", type=float, default=1.0, help="draw this share of each level's kernels (default 1: all)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed")
    parser.add_argument("--problems", nargs="+", default=[], metavar="NAME", help="only these problems (l1_p1 or kb_l1/l1_p1)")
    parser.add_argument("--part", type=parse_part, help="K/N: the K-th of N parts of the selection, split by problem")
    parser.add_argument("--timeout-s", type=float, default=540.0, help="limit of each run.py (default 540)")
    parser.add_argument("--budget-s", type=float, help="the whole invocation's limit for its runs")
    parser.add_argument("--retry", default="", help="comma-separated statuses to run again (e.g. 'no record,harness error')")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every run")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="print the selection and its parts; run nothing")
    what.add_argument("--report-only", action="store_true", help="write the report from the state; run nothing")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.state = (args.state or args.out / "state.jsonl").resolve()
    args.report = (args.report or args.out / "report.md").resolve()
    args.retry = [s.strip() for s in args.retry.split(",") if s.strip()]
    return args


def list_selection(selection: list[Kernel], args: argparse.Namespace) -> None:
    parts = args.part[1] if args.part else 1
    for index, part in enumerate(split_parts(selection, parts), 1):
        weight = sum(LEVEL_COST.get(k.level, 1.0) for k in part)
        problems = sorted({(k.level, k.number) for k in part})
        print(f"part {index}/{parts}: {len(part)} kernel(s), weight {weight:g}, {len(problems)} problem(s): " + " ".join(f"l{lv}_p{n}" for lv, n in problems))
        if args.part and index == args.part[0]:
            print("\n".join(f"  {k.id}" for k in part))


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        raise SystemExit(f"error: unknown profile(s) {', '.join(unknown)}; choose from {', '.join(PROFILES)}")
    if not (args.corpus / "solutions").is_dir() or not (args.corpus / "problems").is_dir():
        raise SystemExit(f"error: {args.corpus} has no problems/ and solutions/ (--corpus)")
    kernels = corpus_kernels(args.corpus)
    if args.report_only:
        return write_report(args, kernels)
    selection = select(kernels, args.fraction, args.seed, args.problems)
    if args.list:
        list_selection(selection, args)
        return 0
    chosen = split_parts(selection, args.part[1])[args.part[0] - 1] if args.part else selection
    label = f"part {args.part[0]}/{args.part[1]}" if args.part else "the selection"
    print(f"{label}: {len(chosen)} of {len(selection)} selected kernel(s) ({len(kernels)} in the corpus), profiles {', '.join(profiles)}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    handle = lock(args.state)
    try:
        finished = run_all(args, profiles, chosen)
    finally:
        handle.close()
    code = write_report(args, kernels)
    return code if finished else 130


if __name__ == "__main__":
    sys.exit(main())
