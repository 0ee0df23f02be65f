"""How one candidate's evaluation travels through harness's modules, measured in the parent process.

The property: following a candidate from the executor to its record enters each module once. The
executor hands a candidate over by calling `ProblemEvaluation.evaluate` (harness.parent.evaluate);
from there to its record, no module is entered twice. A tracer (`sys.setprofile` and
`threading.setprofile`: Python-level call events, per thread) records, for each call into a harness
module, the harness modules of the frames on that thread's stack from the evaluation's frame inward,
consecutive duplicates collapsed (evaluate -> evaluate -> compared_pass -> pairing is
[evaluate, compared_pass, pairing]). A module that appears twice in such a stack is a re-entry: the
modules between called back into it (a lambda, a callback, a closure handed down). `reentries`
names each as the collapsed chain from one occurrence to the next, e.g.
("harness.parent.evaluate", "harness.parent.verdict", "harness.parent.evaluate").

Frames of code generated at run time (a dataclass's `__init__`, file "<string>") are not a module's
own code and are left out. The executor's own dispatch around the evaluation (its queue, threads and
the progress callbacks it wraps) is outside the path.

`python3 tests/test_candidate_path.py` evaluates one candidate under the tracer and prints every re-entry.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

PREFIX = "harness."

# Where the candidate's path starts: the executor calls the evaluation of its problem on a lane
START = "harness.parent.evaluate"

# Imported lazily on the way (harness.api's make_executor, ...): imported before tracing, so the stacks
# are the evaluation's whichever tests ran first, not a module body's import-time calls.
LAZY_IMPORTS = ("harness.api", "harness.parent.local", "harness.parent.evaluate", "harness.device.environment")


# -- re-entries of collapsed stacks --------------------------------------------------------------------------


def collapse(modules: Iterable[str]) -> tuple[str, ...]:
    """`modules` (outermost first) with consecutive duplicates collapsed."""
    out: list[str] = []
    for module in modules:
        if not out or out[-1] != module:
            out.append(module)
    return tuple(out)


def reentries(stacks: Iterable[Iterable[str]]) -> set[tuple[str, ...]]:
    """Every re-entry of `stacks` (module names, outermost first; collapsed here if they are not): for each
    module that appears more than once in a stack, the collapsed chain from each occurrence to its next,
    both ends included, e.g. (A, B, A) for [X, A, B, A]."""
    found: set[tuple[str, ...]] = set()
    for stack in stacks:
        chain = collapse(stack)
        last: dict[str, int] = {}
        for index, module in enumerate(chain):
            if module in last:
                found.add(chain[last[module] : index + 1])
            last[module] = index
    return found


def test_reentries_finds_a_callback_into_the_calling_module() -> None:
    stacks = {
        ("harness.parent.local", "harness.parent.evaluate", "harness.parent.evaluate", "harness.parent.verdict"),
        # verdict.settle calls a lambda defined in evaluate, which calls compare_times (evaluate again)
        (
            "harness.parent.local",
            "harness.parent.evaluate",
            "harness.parent.verdict",
            "harness.parent.evaluate",
            "harness.parent.evaluate",
            "harness.core.integrity",
        ),
    }
    assert reentries(stacks) == {("harness.parent.evaluate", "harness.parent.verdict", "harness.parent.evaluate")}


def test_reentries_finds_each_successive_pair_and_nested_ones() -> None:
    assert reentries([("a", "b", "a", "c", "a")]) == {("a", "b", "a"), ("a", "c", "a")}
    assert reentries([("a", "b", "c", "b", "a")]) == {("b", "c", "b"), ("a", "b", "c", "b", "a")}


def test_reentries_passes_a_clean_path_and_collapses_repeats() -> None:
    clean = [
        ("harness.parent.local", "harness.parent.evaluate", "harness.parent.lane_judge", "harness.core.pairing"),
        ("harness.parent.evaluate", "harness.parent.evaluate", "harness.parent.evaluate", "harness.core.records"),
        (),
    ]
    assert reentries(clean) == set()


# -- the tracer ------------------------------------------------------------------------------------------------


def _module(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


class ModuleStacks:
    """The distinct collapsed stacks of harness modules seen at call events while active."""

    def __init__(self, prefix: str = PREFIX) -> None:
        self.prefix = prefix
        self.stacks: set[tuple[str, ...]] = set()
        self.active = False
        self._lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # A stack's harness modules change only when a harness frame is pushed: the call events of
        # other modules' frames (the standard library, torch) repeat the stack of their harness caller.
        if event != "call" or not self.active or not _module(frame).startswith(self.prefix):
            return
        modules: list[str] = []
        current: FrameType | None = frame
        while current is not None:
            module = _module(current)
            if module.startswith(self.prefix) and current.f_code.co_filename != "<string>":
                modules.append(module)
            current = current.f_back
        stack = collapse(reversed(modules))
        if stack not in self.stacks:
            with self._lock:
                self.stacks.add(stack)


@contextlib.contextmanager
def module_stacks(prefix: str = PREFIX) -> Iterator[ModuleStacks]:
    """Records the collapsed harness-module stacks of every call in this thread and in the threads
    started inside the block; threads still running after it record nothing more."""
    tracer = ModuleStacks(prefix)
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    tracer.active = True
    threading.setprofile(tracer.profile)
    sys.setprofile(tracer.profile)
    try:
        yield tracer
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
        tracer.active = False


def test_the_tracer_sees_threads_and_leaves_other_modules_out() -> None:
    def inner() -> None:
        pass

    def outer() -> None:
        inner()

    before = sys.getprofile(), threading.getprofile()
    with module_stacks(prefix=__name__) as tracer:
        thread = threading.Thread(target=outer)
        thread.start()
        thread.join()
        outer()
    assert tracer.stacks == {(__name__,)}  # outer -> inner collapses to one module
    assert (sys.getprofile(), threading.getprofile()) == before  # both put back


# -- one candidate's evaluation --------------------------------------------------------------------------------

PROBLEM = "1_Scale_Bias_ReLU"

# Every module an honest, timed candidate's evaluation must pass through: a trace without them missed the path.
ON_THE_PATH = {
    "harness.parent.evaluate",
    "harness.parent.lane_judge",
    "harness.parent.compared_pass",
    "harness.parent.supervise",
    "harness.parent.verdict",
    "harness.core.pairing",
    "harness.core.scan",
}


def fast_overrides(root: Path) -> list[str]:
    """A CPU run with everything under `root`, one check trial and the shortest timing that still times."""
    return [
        f"results_dir={root / 'results'}",
        f"build_cache_dir={root / 'builds'}",
        f"measurement_cache_dir={root / 'measurements'}",
        "device=cpu",
        "baselines.compile_modes=[]",
        "flags.no_custom_kernel=flag",  # the candidate is the torch forward, not a custom kernel
        "check.trials=1",
        "timing.budget_s=0.2",
        "timing.warmup_ms=5",
        "timing.min_reps=2",
        "timing.rounds=2",
        "timeouts.construct=60",
        "timeouts.check=20",
        "timeouts.time=30",
    ]


def trace_one_candidate(root: Path) -> set[tuple[str, ...]]:
    """The collapsed module stacks of one honest candidate's evaluation (api.evaluate: a session, the
    local executor, a lane, its judge and a worker process) on the CPU, timed so that the verdict
    compares times; its files (and the processes' scratch) under `root`."""
    for name in LAZY_IMPORTS:
        importlib.import_module(name)
    from harness import api
    from harness.core.config import load_config
    from harness.core.status import Status
    from tests.sources import scale_bias_relu

    config = load_config(overrides=fast_overrides(root))
    with pytest.MonkeyPatch.context() as env:
        env.setattr(tempfile, "tempdir", str(root))
        env.setenv("TMPDIR", str(root))
        with module_stacks() as tracer:
            record = api.evaluate(PROBLEM, scale_bias_relu(), config=config, name="honest")
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert record.timing.speedup is not None  # timed: verdict.settle called its comparison
    return tracer.stacks


def on_the_path(stacks: set[tuple[str, ...]], start: str = START) -> set[tuple[str, ...]]:
    """The stacks inside the candidate's path: each from its first `start` frame inward; stacks
    without one (the executor's queue and threads, the session) are left out."""
    return {stack[stack.index(start) :] for stack in stacks if start in stack}


def test_the_path_starts_at_the_evaluation_and_keeps_what_is_inside_it() -> None:
    stacks = {("api", "executor", "local", "evaluate", "verdict", "evaluate"), ("api", "executor", "local")}
    assert on_the_path(stacks, "evaluate") == {("evaluate", "verdict", "evaluate")}


@pytest.fixture(scope="module")
def one_candidate(tmp_path_factory) -> set[tuple[str, ...]]:
    return trace_one_candidate(tmp_path_factory.mktemp("path"))


@pytest.mark.slow
def test_the_trace_follows_the_candidate_through_its_path(one_candidate) -> None:
    seen = {module for stack in on_the_path(one_candidate) for module in stack}
    assert ON_THE_PATH <= seen, f"not traced: {sorted(ON_THE_PATH - seen)}"


@pytest.mark.slow
def test_one_candidate_enters_each_module_once(one_candidate) -> None:
    found = reentries(on_the_path(one_candidate))
    assert not found, "re-entries:\n" + "\n".join(" -> ".join(chain) for chain in sorted(found))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    with tempfile.TemporaryDirectory() as scratch:
        stacks = trace_one_candidate(Path(scratch))
    for chain in sorted(reentries(on_the_path(stacks))):
        print(" -> ".join(chain))
