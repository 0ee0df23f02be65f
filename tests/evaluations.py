"""A problem's evaluation for tests: a ProblemEvaluation on run resources and a lane of its own (a bare
scratch; no quiet host, build pool or boundary), closed with it. The evaluation itself never owns them."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from harness.core.records import CandidateRecord
from harness.parent.evaluate import ProblemEvaluation
from harness.parent.resources import RunResources
from harness.parent.scratch import RunScratch
from harness.parent.supervise import Lane


@contextlib.contextmanager
def problem_evaluation(problem, candidates, cfg, device, store, **kwargs: Any) -> Iterator[ProblemEvaluation]:
    """The evaluation of `problem` on a lane of its own; it, its lane and its resources end after the block."""
    with RunResources(cfg, device, store, RunScratch.create()) as resources:
        lane = Lane.single(cfg, device, quiet=resources.quiet, worker_env=resources.boundary.env)
        evaluation = ProblemEvaluation(problem, candidates, cfg, device, store, resources=resources, lane=lane, **kwargs)
        try:
            yield evaluation
        finally:
            evaluation.close()
            lane.launcher.close()


@contextlib.contextmanager
def bodies_evaluation(tmp_path, cfg, bodies, device="cpu", run="judge-test") -> Iterator[tuple[ProblemEvaluation, list]]:
    """`bodies` ((name, forward body) pairs) as candidates of 1_Scale_Bias_ReLU (tests/sources.py's ModelNew), written
    in order into `tmp_path`/solutions, on an evaluation of their own: (the evaluation, the candidates)."""
    from harness.core.store import RunStore
    from harness.sources.candidate import Candidate
    from harness.sources.problem import resolve_problem
    from tests.sources import scale_bias_relu

    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    folder = tmp_path / "solutions"
    folder.mkdir(exist_ok=True)
    candidates = []
    for index, (name, body) in enumerate(bodies):
        path = folder / f"{index}_{name}.py"
        path.write_text(scale_bias_relu(body))
        candidates.append(Candidate(path.stem, path))
    store = RunStore(cfg.path(cfg.results_dir), run)
    with problem_evaluation(problem, candidates, cfg, device, store) as evaluation:
        yield evaluation, candidates


def evaluate_problem(problem, candidates, cfg, device, store, **kwargs: Any) -> list[CandidateRecord]:
    """Every candidate of `problem`, in order, as `ProblemEvaluation.run` gives them."""
    with problem_evaluation(problem, candidates, cfg, device, store, **kwargs) as evaluation:
        return evaluation.run()


def fast_config(folder, build_cache, measurement_cache, *extra: str):
    """The config of conftest's make_config, its results in `folder`: for a fixture of a wider scope than a test's."""
    from harness.core.config import load_config

    return load_config(overrides=[
        f"results_dir={folder / 'results'}",
        f"build_cache_dir={build_cache}",
        f"measurement_cache_dir={measurement_cache}",
        "device=cpu",
        "baselines.compile_modes=[]",
        "check.trials=2",
        "timing.budget_s=0.3",
        "timing.warmup_ms=10",
        "timing.min_reps=3",
        "timing.rounds=4",
        "timing.max_rounds=6",
        "timeouts.construct=60",
        "timeouts.check=20",
        "timeouts.time=30",
        # most candidates in the tests are torch-only stand-ins for the mechanics under test; the
        # default policy (fail: a torch pass-through is not a custom kernel) is tested on its own
        "flags.no_custom_kernel=flag",
        # its make is about 40 CPU-s beside a test's builds; tests/test_pch.py turns it on where it is under test
        "builds.precompiled_header=false",
        *extra,
    ])


def evaluate_in_mode(root, build_cache, problem_name, problems_dir, candidates, mode, *extra: str) -> dict[str, CandidateRecord]:
    """`candidates` ((name, source) pairs, written into `root`) of a problem on the GPU under timing.mode `mode`,
    with short timing and no baselines, null candidate or memcheck: their records by candidate name."""
    from harness.core.config import load_config
    from harness.core.store import RunStore
    from harness.sources.candidate import Candidate
    from harness.sources.problem import resolve_problem

    written = []
    for name, source in candidates:
        (root / f"{name}.py").write_text(source)
        written.append(Candidate(name, root / f"{name}.py"))
    quick = ["timing.budget_s=1", "timing.rounds=4", "baselines.compile_modes=[]", "timing.null_candidate=off", "sanitizer.enabled=off"]
    cfg = load_config(overrides=[f"results_dir={root / 'results'}", f"build_cache_dir={build_cache}", *quick, f"timing.mode={mode}", *extra])
    problem = resolve_problem(problem_name, problems_dir if problems_dir is not None else cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), f"{problem_name}-{mode}")
    return {r.identity.candidate: r for r in evaluate_problem(problem, written, cfg, "cuda", store)}
