"""Time-to-verdict through the evaluation API (harness.api.Session) for an already-built candidate.

For each config: one session; the candidate is submitted once cold (judge, reference, baselines,
build), then `--repeats` more times under new names (same source: its build is cached), each
timed from submit to record. Prints a table and writes JSON with each record's phase times.

    python3 benchmarks/api_latency.py --problem 4_LayerNorm --candidate solutions/4_LayerNorm/team_rowwise.py \
        --configs default configs/loop.yaml --repeats 5 --out latency.json
    (--no-prewarm: prestarted workers do not ready CUDA and the profiler while they wait;
     --fresh: every submission a new source whose kernels are built already; the clock starts
     once its build is done, so the figure is a warm, already-built candidate's)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import api  # noqa: E402
from harness.core.records import to_dict  # noqa: E402


def no_prewarm() -> None:
    """Lanes whose prestarted workers skip the CUDA and profiler start-up (the comparison)."""
    import harness.parent.local
    from harness.parent.supervise import Launcher

    class Plain(Launcher):
        def __init__(self, *args, **kwargs):
            kwargs["prewarm"] = ""
            super().__init__(*args, **kwargs)

    harness.parent.local.Launcher = Plain


STAGES: dict[str, float] = {}  # seconds per wrapped harness step, for the submission being timed


def time_stages() -> None:
    """Wrap the steps of a candidate's evaluation that the parent waits on, to see where a warm
    submission's time goes: its build, the judge's session, the worker, the sanitizer."""
    import harness.parent.evaluate as ev
    import harness.parent.compared_pass as cp
    import harness.parent.prebuild as pb
    import harness.parent.sanitize as sz
    import harness.parent.supervise as sv

    def wrap(owner, name, label):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                STAGES[label] = STAGES.get(label, 0.0) + time.perf_counter() - started

        setattr(owner, name, timed)

    wrap(pb.BuildAhead, "wait", "build_wait")
    wrap(sv.WorkerRun, "_outcome", "worker_end")  # the worker's ending: its exit, pipes and log
    wrap(sz.LaneSanitizer, "run", "sanitizer")
    wrap(cp.ComparedPass, "run", "compared")
    wrap(ev.ProblemEvaluation, "_run_candidate", "candidate")


def submit_built(session, problem: str, source: str, name: str):
    """Submit a source whose build has finished already (a loop's candidate that waited in the
    queue while the pool built it): the clock starts once the build is done."""
    chosen = session.problem(problem)
    candidate = session._candidate(chosen, source, name)
    if session.builds is not None:
        session.builds.submit(candidate.path)
        session.builds.wait(candidate.path)
    started = time.perf_counter()
    return started, session.submit_candidate(chosen, candidate).result()


def measure(config: str, problem: str, source: str, repeats: int, overrides: list[str], pause: float, fresh: bool) -> dict:
    cfg = api.load(None if config == "default" else config, overrides)
    rows = []
    with api.Session(cfg) as session:
        for index in range(repeats + 1):
            if index:
                time.sleep(pause)  # let the next worker finish prestarting, as a loop's own work would
            STAGES.clear()
            text = source + (f"\n# variant {index}\n" if fresh else "")  # fresh: a new source (its sanitizer runs), the same kernels
            started, record = submit_built(session, problem, text, f"{'cold' if index == 0 else 'warm'}_{index}")
            seconds = time.perf_counter() - started
            decision, provenance = record.decision, record.provenance
            rows.append({"seconds": round(seconds, 3), "status": decision.status.value, "reason": decision.reason, "speedup": record.timing.speedup,
                         "phases": provenance.phase_seconds, "stages": {k: round(v, 3) for k, v in STAGES.items()}, "sanitizer_s": sum(s.seconds for s in record.integrity.sanitizer), "wall_seconds": provenance.wall_seconds,
                         "record": to_dict(record) if index in (0, repeats) else None})
            print(f"{config} #{index}: {seconds:.2f} s, {decision.status.value}, speedup {record.timing.speedup}, phases {provenance.phase_seconds}, stages {rows[-1]['stages']}", flush=True)
    warm = [r["seconds"] for r in rows[1:]]
    return {"config": config, "overrides": overrides, "fresh": fresh, "device": session.device, "cold_s": rows[0]["seconds"],
            "warm_median_s": statistics.median(warm) if warm else None, "warm_max_s": max(warm) if warm else None, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="4_LayerNorm")
    parser.add_argument("--candidate", default="solutions/4_LayerNorm/team_rowwise.py")
    parser.add_argument("--configs", nargs="+", default=["default", "configs/loop.yaml"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between submissions (default 3)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-prewarm", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="each submission a new source (a comment differs): its build is found in the cache, its sanitizer runs")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.no_prewarm:
        no_prewarm()
    time_stages()
    source = (ROOT / args.candidate).read_text()
    results = [measure(c, args.problem, source, args.repeats, args.set, args.pause, args.fresh) for c in args.configs]
    print("\n| config | prewarm | cold s | warm median s | warm max s |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['config']} | {'no' if args.no_prewarm else 'yes'} | {r['cold_s']:.2f} | {r['warm_median_s']:.2f} | {r['warm_max_s']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"problem": args.problem, "candidate": args.candidate, "prewarm": not args.no_prewarm, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
