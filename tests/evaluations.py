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


def evaluate_problem(problem, candidates, cfg, device, store, **kwargs: Any) -> list[CandidateRecord]:
    """Every candidate of `problem`, in order, as `ProblemEvaluation.run` gives them."""
    with problem_evaluation(problem, candidates, cfg, device, store, **kwargs) as evaluation:
        return evaluation.run()
