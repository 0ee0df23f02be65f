"""Verdicts per GPU-hour, and where the seconds go: a corpus state (benchmarks/kbcorpus.py) read back.

    python3 benchmarks/verdict_rate.py STATE [--profile loop] [--out FILE.md] [--cpu CPU.csv]

The state's lines of one profile (the `loop` profile: configs/loop.yaml, memcheck on, no compile
baseline, no null candidate) hold each kernel's status, its worker's phases, its builds and its wall
time, its problem's reference pass (wall time and phases) and the wall time of the run.py run it
came from. Printed (and written with --out):

- verdicts per GPU-hour: kernels with a verdict over the runs' summed wall time (a run is one
  run.py process on one GPU, start-up and reference passes included; told apart by run id, wall time and
  kernel count, as a resumed draw's calls share the id, and counted where a later call superseded its lines);
- the rate after each run's first record: the records after the first over the time from the first
  to the last (the cold start, the first builds above all, left out: what a warm loop would see);
- the gaps between consecutive records: their median, and the longest with the kernel it ended on (on a
  small draw one slow kernel, such as a 700 ms forward under memcheck, can move the rates above by a
  fifth; the median gap is what two runs of the same draw compare by);
- the reference pass per problem: median and total seconds of each phase (the judge's start-up,
  load, construct, check, time; the baselines and the null candidate when the profile has them);
- the candidate: median and total of its wall time as the parent saw it, of its builds (cold
  builds only) and of each worker phase;
- each compute-sanitizer run's seconds, and (a run with one lane) the lane's idle time between records:
  the gap less the lane's own work, where it waited for builds ahead (memcheck runs count as idle where
  the state has no seconds for them, as in states written before 2026-11-28 evening).

With --cpu FILE (benchmarks/host_cpu.py's samples over the same calls), a last line: how busy the host's cores
were, how long the run was bound by them, the CPU-seconds per verdict and the rate the cores could carry at that cost.

Hold a change against it: run the same selection and part before and after, and compare the tables.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

NOT_JUDGED = ("no record", "needs CUDA")


def profile_lines(path: Path, profile: str) -> list[dict[str, Any]]:
    """Every line of `profile`, in the order written (a half-written line is skipped)."""
    found = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and line.get("profile") == profile and line.get("kernel"):
            found.append(line)
    return found


def latest(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last of `lines` per kernel: a later line supersedes an earlier one."""
    return list({line["kernel"]: line for line in lines}.values())


def read_lines(path: Path, profile: str) -> list[dict[str, Any]]:
    """The last line per kernel of `profile`."""
    return latest(profile_lines(path, profile))


def run_of(line: dict[str, Any]) -> tuple[str, Any, Any]:
    """The run a line came from: a resumed draw's calls share a run id, not their wall time and kernel count."""
    return line.get("run_id", ""), line.get("run_wall_s"), line.get("run_kernels")


def spread(values: Iterable[float]) -> tuple[int, float, float]:
    """(count, median, total) of `values`."""
    found = [float(v) for v in values if v is not None]
    return len(found), statistics.median(found) if found else 0.0, sum(found)


def phase_rows(dicts: list[dict[str, float]]) -> list[tuple[str, int, float, float]]:
    """Each phase named in `dicts`: (name, count, median, total), in the order first seen."""
    names: dict[str, None] = {}
    for d in dicts:
        names.update(dict.fromkeys(d))
    return [(name, *spread(d[name] for d in dicts if name in d)) for name in names]


def _moment(stamp: str) -> float:
    """An ISO time (naive ones are UTC) as seconds."""
    moment = datetime.fromisoformat(stamp)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def sanitizer_seconds(line: dict[str, Any]) -> list[float]:
    """The seconds of a state line's compute-sanitizer runs (`[tool, outcome, detail, seconds]` each; lines written
    before 2026-11-28 evening have none)."""
    return [float(run[3]) for run in line.get("sanitizer") or [] if len(run) > 3 and isinstance(run[3], (int, float))]


def records_by_run(judged: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The judged lines that say when they finished, per run, in the order they finished."""
    by_run: dict[tuple[str, Any, Any], list[dict[str, Any]]] = {}
    for line in judged:
        if line.get("finished_at"):
            by_run.setdefault(run_of(line), []).append(line)
    return [sorted(lines, key=lambda line: _moment(line["finished_at"])) for lines in by_run.values()]


def idle_between(judged: list[dict[str, Any]]) -> list[float]:
    """For a run with one lane: each gap between consecutive records less the lane's own work on the later one (its
    worker's wall, its memcheck runs, its problem's reference pass when the problem changed). What is left is time
    the lane had no candidate ready: waiting for its build ahead, mostly."""
    idle = []
    for lines in records_by_run([line for line in judged if line.get("wall_s") is not None]):
        for before, line in zip(lines, lines[1:]):
            work = line["wall_s"] + sum(sanitizer_seconds(line))
            if line.get("problem") != before.get("problem"):
                work += line.get("reference_wall_s") or 0
            idle.append(max(0.0, _moment(line["finished_at"]) - _moment(before["finished_at"]) - work))
    return idle


def gaps(judged: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(seconds, kernel) for each record after each run's first: the time since the run's previous record."""
    return [
        (_moment(line["finished_at"]) - _moment(before["finished_at"]), line.get("kernel", ""))
        for lines in records_by_run(judged)
        for before, line in zip(lines, lines[1:])
    ]


def after_first(judged: list[dict[str, Any]]) -> tuple[int, float]:
    """(records after each run's first, seconds from each run's first record to its last), summed over runs: the
    count and the sum of the gaps."""
    between = gaps(judged)
    return len(between), sum(seconds for seconds, _ in between)


def summary(lines: list[dict[str, Any]], every: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The numbers of the report for the last line per kernel, `lines`; the runs' wall time comes from `every` line
    (superseded ones too: their run's time was spent), `lines` when not given."""
    judged = [line for line in lines if line.get("status") not in NOT_JUDGED]
    runs = {run_of(line) for line in (lines if every is None else every) if line.get("run_wall_s") is not None}
    wall = sum(run_wall for _, run_wall, _ in runs)
    judged_in_timed = [line for line in judged if run_of(line) in runs]
    references = {(run_of(line), line["problem"]): line for line in judged if line.get("reference_wall_s") is not None}
    return {
        "kernels": len(lines),
        "judged": len(judged),
        "runs": len(runs),
        "run_wall_s": round(wall, 1),
        "verdicts_per_gpu_hour": round(len(judged_in_timed) / wall * 3600, 1) if wall else None,
        "reference_passes": len(references),
        "reference_wall": spread(r["reference_wall_s"] for r in references.values()),
        "reference_phases": phase_rows([r.get("reference_phase_s") or {} for r in references.values()]),
        "candidate_wall": spread(line.get("wall_s") for line in judged),
        "candidate_builds": spread(line.get("build_s") for line in judged if line.get("build_s")),
        # the build pool's builds ahead, given the precompiled header or not (state lines since 2026-11-29 say which)
        "ahead_header": spread(built_ahead(judged, True)),
        "ahead_plain": spread(built_ahead(judged, False)),
        "candidate_phases": phase_rows([line.get("phase_s") or {} for line in judged]),
        # each sanitizer run's seconds (state lines since 2026-11-28 carry them as the fourth item)
        "sanitizer": spread(seconds for line in judged for seconds in sanitizer_seconds(line) if seconds),
        "idle": spread(idle_between(judged)),
        "after_first": after_first(judged),
        "gaps": gaps(judged),
    }


def built_ahead(judged: list[dict[str, Any]], header: bool) -> list[float]:
    """The seconds of the builds ahead that compiled something, given the precompiled header or not."""
    found = []
    for line in judged:
        ahead = line.get("ahead") or {}
        if ahead.get("outcome") == "built" and bool(ahead.get("header")) is header and ahead.get("seconds"):
            found.append(float(ahead["seconds"]))
    return found


def render(found: dict[str, Any], profile: str, source: str) -> str:
    rate = found["verdicts_per_gpu_hour"]
    out = [
        f"# Verdicts per GPU-hour: profile {profile} ({source})",
        "",
        f"{found['judged']} of {found['kernels']} kernels judged in {found['runs']} run(s) of {found['run_wall_s']} s in all: "
        + (f"**{rate} verdicts per GPU-hour**." if rate is not None else "no run wall time recorded."),
        "",
    ]
    records, seconds = found["after_first"]
    if records and seconds > 0:
        out += [
            f"After each run's first record: {records} records in {seconds:.0f} s, **{records / seconds * 3600:.1f} per "
            "hour** (the cold start left out).",
            "",
        ]
    between = found["gaps"]
    if between:
        longest = max(between)
        out += [
            f"Between consecutive records: median **{statistics.median(s for s, _ in between):.1f} s** ({len(between)} "
            f"gaps); the longest {longest[0]:.1f} s, ending with {longest[1]}.",
            "",
        ]
    out += [
        "| part | n | median s | total s |",
        "|---|---:|---:|---:|",
    ]

    def row(name: str, n: int, median: float, total: float) -> None:
        out.append(f"| {name} | {n} | {median:.2f} | {total:.1f} |")

    row("**reference pass** (wall)", *found["reference_wall"])
    for name, *numbers in found["reference_phases"]:
        row(f"reference: {name}", *numbers)
    row("**candidate** (wall, seen by the parent)", *found["candidate_wall"])
    row("candidate: cold builds", *found["candidate_builds"])
    row("build ahead (wall), given the precompiled header", *found["ahead_header"])
    row("build ahead (wall), without it", *found["ahead_plain"])
    for name, *numbers in found["candidate_phases"]:
        row(f"candidate worker: {name}", *numbers)
    row("**compute-sanitizer runs** (wall, each)", *found["sanitizer"])
    row("**lane idle between records** (one lane: no candidate ready, its build ahead not done)", *found["idle"])
    return "\n".join(out) + "\n"


def cpu_line(samples: Path, judged: int) -> str:
    """The host's CPUs over the sampled calls, and what each of `judged` verdicts cost them (benchmarks/host_cpu.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import host_cpu
    finally:
        sys.path.pop(0)
    return host_cpu.render(host_cpu.summarise(host_cpu.load(samples), judged))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path)
    parser.add_argument("--profile", default="loop")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cpu", type=Path, help="the host's CPU samples over the runs (benchmarks/host_cpu.py sample)")
    args = parser.parse_args(argv)
    if not args.state.is_file():
        print(f"error: no state file {args.state}", file=sys.stderr)
        return 1
    if args.cpu is not None and not args.cpu.is_file():
        print(f"error: no CPU samples file {args.cpu}", file=sys.stderr)
        return 1
    every = profile_lines(args.state, args.profile)
    if not every:
        print(f"error: {args.state} has no lines of profile {args.profile!r}", file=sys.stderr)
        return 1
    found = summary(latest(every), every)
    text = render(found, args.profile, args.state.name)
    if args.cpu is not None:
        text += "\n" + cpu_line(args.cpu, found["judged"]) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
