"""KernelBench's sample folders as they are: `runs/<run_name>/level_<L>_problem_<P>_sample_<S>_kernel.py`
(what its scripts/eval_from_generations.py reads), each mapped to its problem, `level<L>/<P>_...`
in the problem tree, as a candidate named `sample_<S>`."""
from __future__ import annotations

import re
from pathlib import Path

from harness.candidate import Candidate
from harness.errors import UserError
from harness.problem import Problem, resolve_problem

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
            level, problem, sample = (int(g) for g in match.groups())
            found.setdefault((level, problem), []).append((sample, path))
    if not found:
        raise UserError(f"--samples {folder}: no file named like level_<L>_problem_<P>_sample_<S>_kernel.py")
    targets = []
    for (level, number), samples in sorted(found.items()):
        try:
            problem = resolve_problem(f"level{level}/{number}", problems_dir)
        except UserError as exc:
            raise UserError(f"--samples: {samples[0][1].name} is for level {level} problem {number}, which {problems_dir} does not have ({exc})") from None
        targets.append((problem, [Candidate(f"sample_{s}", p.resolve()) for s, p in sorted(samples)]))
    return targets
