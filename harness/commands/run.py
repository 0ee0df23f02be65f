"""`python run.py [run] --problem X | --solution PATH | --all`: evaluate candidates, write leaderboards."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.api import Session
from harness.commands import Terminated, add_config_arguments, load_config, sigterm_interrupts
from harness.core import unrun
from harness.core.config import Config, Device, ExecutorKind, Switch
from harness.core.errors import ExitCode, UserError
from harness.core.records import CandidateRecord, ReferenceRecord, RunSummary, latest_per_candidate, to_dict
from harness.core.status import Status
from harness.core.store import RunStore, new_run_id
from harness.parent import scratch
from harness.parent.executor import gather
from harness.sources.candidate import Candidate, discover_candidates
from harness.sources.problem import Problem, discover_problems, resolve_problem
from harness.views.leaderboard import candidate_frame, print_leaderboard, write_leaderboards
from harness.views.progress import Progress
from harness.views.text import visible

Target = tuple[Problem, list[Candidate]]


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--all", action="store_true", help="every problem that has candidates")
    what.add_argument("--solution", metavar="PATH", help="evaluate one candidate file")
    what.add_argument(
        "--samples",
        metavar="DIR",
        help="a KernelBench sample folder (level_<L>_problem_<P>_sample_<S>_kernel.py), each file against its problem",
    )
    parser.add_argument(
        "--problem",
        metavar="NAME",
        action="append",
        help="problem name, unique prefix or path (repeatable); KernelBench's level1/19_ReLU and level1/19 work too",
    )
    parser.add_argument(
        "--problems-dir",
        metavar="DIR",
        help="the problem tree (config problems_dir), e.g. KernelBench's KernelBench/ folder as it is",
    )
    add_config_arguments(parser, example="check.trials=3")
    parser.add_argument("--device", choices=Device.words(), help="where to run (default: config, auto)")
    parser.add_argument("--trials", type=int, help="fresh input sets per candidate (config check.trials)")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--results", metavar="DIR", help="results folder (config results_dir)")
    parser.add_argument("--run-id", metavar="ID", help="name of the run folder (default: time + random)")
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="finish an interrupted run: evaluate only the candidates without a record in results/RUN",
    )
    parser.add_argument(
        "--executor",
        choices=ExecutorKind.words(),
        help="where evaluations run (config executor; ray: pip install '.[ray]')",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster to use with --executor ray: auto, ray://HOST:10001 (default: a new local instance)",
    )
    parser.add_argument(
        "--gate",
        metavar="BASELINE",
        help="after the run, gate it against this baseline (file, run folder or id): exit 3 on a regression, else 0",
    )
    from harness.commands.gate import add_gate_options

    add_gate_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--json", action="store_true", help="print the records as JSON lines on stdout instead of tables"
    )


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    overrides: list[str] = []  # the command's own flags, over --set
    if args.device:
        overrides.append(f"device={args.device}")
    if args.trials is not None:
        overrides.append(f"check.trials={args.trials}")
    if args.no_timing:
        overrides.append("timing.enabled=false")
    if args.results:
        overrides.append(f"results_dir={args.results}")
    if args.problems_dir:
        overrides.append(f"problems_dir={json.dumps(args.problems_dir)}")
    if args.executor:
        overrides.append(f"executor={args.executor}")
    if args.ray_address is not None:
        overrides.append(f"ray.address={json.dumps(args.ray_address)}")
    cfg = load_config(args, overrides)
    if args.resume and args.run_id:
        raise UserError("--resume names the run to finish; leave out --run-id")
    targets = select_targets(
        cfg, problem=args.problem, solution=args.solution, everything=args.all, samples=args.samples
    )
    run_id = Path(args.resume).name if args.resume else args.run_id or new_run_id()  # named first, for the resume line
    gating = None
    if args.gate is not None:
        from harness.commands.gate import prepare_gate

        gating = prepare_gate(cfg, args.gate, args.fail_on, args.allow_missing)  # a bad baseline or rule fails first
    code = run(
        cfg,
        targets,
        run_id=run_id,
        resume=bool(args.resume),
        quiet=args.quiet,
        json_output=args.json,
        argv=argv,
        kernelbench=bool(args.samples),
    )
    if gating is None or code in (ExitCode.INTERRUPTED, ExitCode.INTERNAL):
        return told_how_to_resume(code, args.program, argv, run_id)  # unfinished, or a failed reference: not gated
    from harness.commands.gate import run_gate

    baseline, rules = gating
    folder = cfg.path(cfg.results_dir) / run_id
    return run_gate(cfg, baseline, rules, str(folder), args.across_changes, folder / "gate.md", echo=not args.json)


def told_how_to_resume(code: int, program: str, argv: Sequence[str], run_id: str) -> int:
    """`code`, after printing the line that resumes the run when it was interrupted."""
    if code == ExitCode.INTERRUPTED:
        print(resume_line(program, argv, run_id), file=sys.stderr)
    return code


def resume_line(program: str, argv: Sequence[str], run_id: str) -> str:
    """ "interrupted: resume with python3 run.py --all --resume RUN": the run's own command line
    (`program` as it was started, `argv` its arguments) with --resume RUN_ID in place of --run-id or --resume."""
    words = list(argv[1:] if argv and argv[0] == "run" else argv)
    kept: list[str] = []
    while words:
        word = words.pop(0)
        if word in ("--run-id", "--resume"):
            words = words[1:]  # and its value
        elif not word.startswith(("--run-id=", "--resume=")):
            kept.append(word)
    start = f"python3 {program}" if program.endswith(".py") else program
    return f"interrupted: resume with {start} {shlex.join([*kept, '--resume', run_id])}"


def select_targets(
    cfg: Config,
    *,
    problem: str | Sequence[str] | None,
    solution: str | None,
    everything: bool,
    samples: str | None = None,
) -> list[Target]:
    """What a run evaluates: one candidate file (`solution`, against `problem` or its folder's
    name), a KernelBench sample folder, every problem with candidates, or each named problem's
    candidates (`problem`: one name or several, in the order given, each once)."""
    problems_dir = cfg.path(cfg.problems_dir)
    solutions_dir = cfg.path(cfg.solutions_dir)
    queries = [problem] if isinstance(problem, str) else list(problem or [])
    if samples:
        if queries:
            raise UserError("--samples maps each file to its problem; leave out --problem")
        from harness.sources.samples import sample_targets

        return sample_targets(Path(samples), problems_dir)
    if solution:
        return [solution_target(Path(solution), queries, problems_dir)]
    if everything:
        targets = [(p, discover_candidates(solutions_dir / p.name)) for p in discover_problems(problems_dir)]
        targets = [(p, c) for p, c in targets if c]
        if not targets:
            raise UserError(f"no problem has candidates under {solutions_dir}")
        return targets
    if not queries:
        raise UserError("say what to evaluate: --problem NAME, --solution PATH, --samples DIR or --all")
    chosen = list({p.path: p for p in (resolve_problem(q, problems_dir) for q in queries)}.values())
    targets = []
    for each in chosen:
        candidates = discover_candidates(solutions_dir / each.name)
        if not candidates:
            raise UserError(
                f"no candidates in {solutions_dir / each.name} (add ModelNew files there, or use `python run.py "
                f"ingest FILE --problem {each.name}`)"
            )
        targets.append((each, candidates))
    return targets


def solution_target(path: Path, queries: list[str], problems_dir: Path) -> Target:
    """One candidate file and its problem: the one named, else the one its folder is named after
    (solutions/<problem>/<candidate>.py)."""
    if not path.exists():
        raise UserError(f"--solution {path}: no such file")
    if not path.is_file() or path.suffix != ".py":
        raise UserError(f"--solution {path}: not a Python file")
    if len(queries) > 1:
        raise UserError("--solution is judged against one problem; give one --problem")
    if queries:
        return resolve_problem(queries[0], problems_dir), [Candidate(path.stem, path.resolve())]
    folder = path.resolve().parent.name
    try:
        chosen = resolve_problem(folder, problems_dir)
    except UserError:
        raise UserError(
            f"--solution {path}: its folder {folder!r} names no problem in {problems_dir}; say which problem it "
            "solves with --problem NAME"
        ) from None
    return chosen, [Candidate(path.stem, path.resolve())]


def resume_targets(
    store: RunStore, targets: list[Target]
) -> tuple[list[Target], list[CandidateRecord], list[ReferenceRecord]]:
    """The targets minus candidates that already have a final record in `store` (same problem and
    candidate file contents), those records, and the reference records the earlier process wrote.
    A `harness error` record is redone."""
    earlier = store.earlier()
    latest = latest_per_candidate(r for r in earlier if isinstance(r, CandidateRecord))
    finished = {key: record for key, record in latest.items() if record.decision.status is not Status.HARNESS_ERROR}
    left: list[Target] = []
    kept: list[CandidateRecord] = []
    for problem, candidates in targets:
        todo = []
        for candidate in candidates:
            done = finished.get((problem.name, candidate.name))
            if (
                done is not None
                and done.identity.candidate_hash == candidate.hash
                and done.identity.problem_hash == problem.hash
            ):
                kept.append(done)
            else:
                todo.append(candidate)
        if todo:
            left.append((problem, todo))
    return left, kept, [r for r in earlier if isinstance(r, ReferenceRecord)]


def run(
    cfg: Config,
    targets: list[Target],
    *,
    run_id: str | None = None,
    resume: bool = False,
    quiet: bool = False,
    json_output: bool = False,
    argv: Sequence[str] = (),
    kernelbench: bool = False,
) -> int:
    """Evaluate `targets` into a new (or, with `resume`, an existing) run folder; the exit code.
    With `kernelbench` (a sample folder), the verdicts are also written as KernelBench's eval_results.json.
    The run's session owns its resources (a scratch folder, the quiet host, the build pool) and
    releases them however it ends; SIGTERM interrupts it as Ctrl-C does. Too little free disk raises
    ResourceError first."""
    with sigterm_interrupts():
        for problem, _ in targets:
            _ = problem.settings  # a malformed HARNESS_* declaration is a usage error before anything runs
        results_dir = cfg.path(cfg.results_dir)
        if resume and not (results_dir / str(run_id) / "records.jsonl").is_file():
            raise UserError(f"--resume {run_id}: no run with records in {results_dir}")
        if not resume and run_id and (results_dir / run_id / "records.jsonl").is_file():
            raise UserError(
                f"run {run_id} already has records in {results_dir}; use --resume {run_id} to finish it, or another "
                "--run-id"
            )
        # before the run folder exists
        scratch.check_free_disk([scratch.default_base(), results_dir], cfg.limits.min_free_disk_mb * scratch.MIB)
        return _run(
            cfg,
            targets,
            results_dir,
            run_id=run_id,
            resume=resume,
            quiet=quiet,
            json_output=json_output,
            argv=argv,
            kernelbench=kernelbench,
        )


def _run(
    cfg: Config,
    targets: list[Target],
    results_dir: Path,
    *,
    run_id: str | None,
    resume: bool,
    quiet: bool,
    json_output: bool,
    argv: Sequence[str],
    kernelbench: bool = False,
) -> int:
    store = RunStore(results_dir, run_id or new_run_id())
    levels = {p.name: p.level for p, _ in targets}  # before a resume drops the finished ones
    previous: list[CandidateRecord] = []
    references: list[ReferenceRecord] = []  # the earlier process's, on a resume
    if resume:
        if store.drop_partial_line() and not quiet:
            print(
                f"note: {store.records_path} ended in a half-written line (the run was killed); it was cut",
                file=sys.stderr,
            )
        targets, previous, references = resume_targets(store, targets)
        if not quiet:
            print(
                f"resuming {store.run_id}: {len(previous)} candidate(s) already finished, "
                f"{sum(len(c) for _, c in targets)} to evaluate",
                file=sys.stderr,
            )
    counts = {p.name: len(c) for p, c in targets}
    with Progress(quiet=quiet, total=sum(counts.values())) as progress:
        session = Session(
            cfg,
            store=store,
            argv=argv,
            echo=not quiet,
            on_problem=lambda p: progress.problem(p.name, counts[p.name]),
            on_start=lambda c: progress.started(c.name),
            on_record=progress.finished,
        )
        records, interrupted, summary = _evaluate(session, targets, progress)
    records = previous + records
    for warning in summary.end.warnings:
        print(f"warning: {visible(warning)}", file=sys.stderr)
    references += summary.references
    if records:
        csv_path, md_path = write_leaderboards(store.dir, records, cfg.leaderboard.fast_p, references=references)
    extra = []
    if records and kernelbench:
        from harness.sources.samples import write_eval_results

        extra = write_eval_results(
            store.dir, records, levels, {r.identity.problem: r.identity.device_name for r in references}
        )
    if json_output:
        for record in records:
            print(json.dumps(to_dict(record)))
    elif records:
        from harness.views.terminal import terminal_console

        print_leaderboard(candidate_frame(records), cfg.leaderboard.fast_p, terminal_console(), references)
    if not quiet:
        paths = (
            f"{store.records_path}" + (f", {csv_path}, {md_path}" if records else "") + "".join(f", {p}" for p in extra)
        )
        print(f"wrote {paths}", file=sys.stderr)
    required = unrun.required_unrun(records, cfg.sanitizer.enabled == Switch.ON)
    if required and not interrupted:
        print(f"error: {visible(required)}", file=sys.stderr)
    return int(exit_code(records, interrupted, required))


def _evaluate(
    session: Session, targets: list[Target], progress: Progress
) -> tuple[list[CandidateRecord], bool, RunSummary]:
    """Every target's candidate submitted to `session`, and their records in target order; on
    Ctrl-C or SIGTERM, the records finished so far. The session is closed however this ends."""
    progress.builds = session.builds.counts if session.builds is not None else None
    if session.device == Device.CPU:
        progress.message(
            "note: no CUDA device in use: running on the CPU; candidates that need CUDA get the status 'needs CUDA'"
        )
    if session.executor.describe():
        progress.message(session.executor.describe())
    progress.message(f"boundary around candidates: {session.resources.boundary.describe()}")
    futures: list[Any] = []
    interrupted = False
    try:
        # the whole run, sealed: no judge or worker is started ahead for work that will not come
        futures = session.submit_all(
            [(problem, candidate) for problem, candidates in targets for candidate in candidates], last=True
        )
        records = gather(futures)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        interrupted = True
        session.stop()
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        progress.message(f"{how}: the leaderboard below covers the candidates finished so far")
        records = [f.result() for f in futures if f.done() and not f.cancelled() and f.exception() is None]
    except BaseException:
        session.stop()
        raise
    finally:
        summary = session.close()
    return records, interrupted, summary


def exit_code(records: list[CandidateRecord], interrupted: bool = False, required_unrun: str = "") -> ExitCode:
    """The run's exit code: interrupted; else the harness's or a required check's failure (a check
    asked for explicitly that could not run, `required_unrun`); else a candidate's; else ok."""
    if interrupted:
        return ExitCode.INTERRUPTED
    if required_unrun or any(r.decision.status in (Status.REFERENCE_FAILED, Status.HARNESS_ERROR) for r in records):
        return ExitCode.INTERNAL
    if any(r.decision.status.is_failure for r in records):
        return ExitCode.CANDIDATES_FAILED
    return ExitCode.OK
