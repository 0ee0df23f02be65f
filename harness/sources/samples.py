"""KernelBench's sample folders as they are: `runs/<run_name>/level_<L>_problem_<P>_sample_<S>_kernel.py`
(what its scripts/eval_from_generations.py reads), each mapped to its problem, `level<L>/<P>_...`
in the problem tree, as a candidate named `sample_<S>`; and the verdicts written back as its
eval_results.json, so its analysis scripts read them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

from harness.core.errors import UserError
from harness.core.records import CandidateRecord, to_dict
from harness.core.status import Status
from harness.sources.candidate import Candidate
from harness.sources.problem import Problem, resolve_problem

SAMPLE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")


def sample_targets(folder: Path, problems_dir: Path) -> list[tuple[Problem, list[Candidate]]]:
    """Every sample in `folder`, grouped by problem, in (level, problem id, sample id) order. Other
    files are left alone; a sample whose problem is not in the tree is a usage error."""
    if not folder.is_dir():
        raise UserError(f"--samples {folder}: not a folder")
    found: dict[tuple[int, int], list[tuple[int, Path]]] = {}
    for path in folder.iterdir():
        match = SAMPLE.fullmatch(path.name)
        if match and path.is_file():
            level, number, sample = (int(g) for g in match.groups())
            found.setdefault((level, number), []).append((sample, path))
    if not found:
        raise UserError(f"--samples {folder}: no file named like level_<L>_problem_<P>_sample_<S>_kernel.py")
    targets = []
    for (level, number), samples in sorted(found.items()):
        try:
            problem = resolve_problem(f"level{level}/{number}", problems_dir)
        except UserError as exc:
            raise UserError(
                f"--samples: {samples[0][1].name} is for level {level} problem {number}, which {problems_dir} does "
                f"not have ({exc})"
            ) from None
        targets.append((problem, [Candidate(f"sample_{s}", p.resolve()) for s, p in sorted(samples)]))
    return targets


NOT_COMPILED = {
    Status.EXTRACT_FAILED,
    Status.SYNTAX_ERROR,
    Status.IMPORT_ERROR,
    Status.INTERFACE_ERROR,
    Status.BUILD_FAILED,
}
# Samples never judged (skipped for want of CUDA, or stopped by the reference or the harness): left
# out of eval_results.json, since KernelBench's analysis counts every entry as a kernel judged.
NOT_JUDGED = {Status.NEEDS_CUDA, Status.REFERENCE_FAILED, Status.HARNESS_ERROR}


def eval_results(
    records: Iterable[CandidateRecord], levels: dict[str, str], hardware: dict[str, str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Sample records as KernelBench's scripts/eval_from_generations.py writes them, per level:
    {"<problem id>": [{"sample_id", "compiled", "correctness", "metadata", "runtime",
    "runtime_stats"}]}, runtimes in milliseconds (-1.0 when not timed). `correctness` is this
    harness's verdict (a failing flag makes it false); the verdict's details go in `metadata`.
    Samples never judged (NOT_JUDGED: `needs CUDA`, `reference failed`, `harness error`) are left out.
    `levels`: problem name -> its level ("level1"); `hardware`: problem name -> device name."""
    by_level: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        sample = re.fullmatch(r"sample_(\d+)", record.identity.candidate)
        number = record.identity.problem.split("_", 1)[0]
        if sample is None or not number.isdigit() or record.decision.status in NOT_JUDGED:
            continue
        timing = record.timing.stats if record.decision.status is Status.CORRECT else None
        stats: dict[str, Any] = {}
        if timing is not None:
            stats = {
                "mean": timing.mean_ms,
                "std": timing.std_ms,
                "min": timing.min_ms,
                "max": max(timing.samples_ms),
                "median": timing.median_ms,
                "num_trials": timing.n,
                "hardware": hardware.get(record.identity.problem, ""),
                "device": record.identity.lane or record.identity.device,
            }
        metadata = {
            "status": record.decision.status.value,
            "reason": record.decision.reason,
            "flags": [to_dict(f) for f in record.integrity.flags],
            "gradients": record.checks.gradients,
            "speedup": record.timing.speedup,
            "speedups": record.timing.speedups,
            "reference_ms": record.timing.reference_ms,
            "sol_fraction": record.timing.sol_fraction,
            "sol_floor": record.timing.sol_floor,
            "warnings": list(record.decision.warnings),
            "harness": f"kernel-harness {record.tool_version}",
        }
        by_level.setdefault(levels.get(record.identity.problem, ""), {}).setdefault(number, []).append(
            {
                "sample_id": int(sample.group(1)),
                "compiled": record.decision.status not in NOT_COMPILED,
                "correctness": record.decision.status is Status.CORRECT,
                "metadata": metadata,
                "runtime": timing.mean_ms if timing is not None else -1.0,  # KernelBench's eval reports the mean
                "runtime_stats": stats,
            }
        )
    return {
        level: {k: sorted(v, key=lambda e: e["sample_id"]) for k, v in sorted(found.items(), key=lambda kv: int(kv[0]))}
        for level, found in by_level.items()
    }


def write_eval_results(
    run_dir: Path, records: Iterable[CandidateRecord], levels: dict[str, str], hardware: dict[str, str]
) -> list[Path]:
    """eval_results.json in `run_dir` (KernelBench keeps one level per run); with samples of
    several levels, eval_results_<level>.json for each."""
    results = eval_results(records, levels, hardware)
    written = []
    for level, content in sorted(results.items()):
        path = run_dir / ("eval_results.json" if len(results) == 1 else f"eval_results_{level or 'other'}.json")
        path.write_text(json.dumps(content, indent=4) + "\n")
        written.append(path)
    return written
