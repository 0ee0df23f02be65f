"""The evaluation API: one verdict per call for loops (search, RL rewards, best-of-n), and what the
command line and the HTTP service (`python run.py serve`) are built on.

    from harness import api

    record = api.evaluate("1_Scale_Bias_ReLU", source)    # one candidate, a session of its own
    with api.Session() as session:                         # many: lanes, judges and builds stay warm
        futures = [session.submit("1_Scale_Bias_ReLU", s) for s in sources]
        records = [f.result() for f in futures]

A record is the same `CandidateRecord` a `python run.py` run writes, from the same isolation and
checks: each candidate runs in a fresh worker process, against the lane's judge. A session keeps
each lane's judge running between candidates (`workers.warm_problems` problems per lane), the
next worker prestarted and the build pool going, so a candidate after the first pays for its
own build, checks and timing only. `submit` is safe from any thread; a session writes its records
to a run folder (`results/<run id>/`) as a run does, and one session is open per process at a time.

A session's resources (harness.parent.resources.RunResources: its run folder, scratch folder, quiet
host and build pool) are opened with it and released when it closes, however it ends.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from harness.core import nullfloor, unrun
from harness.core.config import (
    Config,
    Device,
    ExecutorKind,  # the config choice (local, ray); Executor is the protocol
    load_config,
    with_overrides,
)
from harness.core.errors import UserError
from harness.core.records import CandidateRecord, ReferenceRecord, RunEnd, RunHeader, RunSummary
from harness.core.store import RunStore
from harness.parent.executor import Executor
from harness.parent.prebuild import BuildAhead
from harness.parent.quiet import QuietHost
from harness.parent.resources import Observer, RunResources
from harness.sources.candidate import Candidate, check_name
from harness.sources.extract import extract_code
from harness.sources.problem import Problem, resolve_problem

__all__ = ["Session", "evaluate", "load"]

ConfigLike = Config | str | Path | None


def load(config: ConfigLike = None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> Config:
    """A Config from a Config, a YAML file layered over configs/default.yaml, or None (the default),
    with `overrides` as `KEY=VALUE` strings or a {key: value} mapping on top."""
    if isinstance(overrides, Mapping):
        overrides = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(config, Config):
        return with_overrides(config, list(overrides)) if overrides else config
    return load_config(config, list(overrides))


def evaluate(
    problem: str | Path | Problem,
    source: str,
    *,
    config: ConfigLike = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    name: Optional[str] = None,
) -> CandidateRecord:
    """One candidate's record, from a session opened and closed around it. `source` is the
    candidate's Python source or a raw completion (its code is extracted as `run.py ingest` does).
    In a loop, keep a Session instead: this call pays for the reference and the workers each time."""
    with Session(config, overrides=overrides) as session:
        return session.evaluate(problem, source, name=name)


# One session per process is a rule about the machine, not a place for a run's resources (each
# session has its own): two sessions would time on the same GPUs at once, and pin their lanes to the
# same CPUs.
_open_session: Optional["Session"] = None
_open_lock = threading.Lock()


class Session:
    """Lanes, their judges and the build pool, kept for many submissions; see the module's doc.
    `resources` (RunResources) are opened with it and released by `close()`.

    `store`: the run folder to write into (default: a new one under results_dir). The callbacks
    run in lane threads, one at a time: `on_problem(problem)` when a problem's first candidate
    starts, `on_start(candidate)`, `on_record(record)`."""

    def __init__(
        self,
        config: ConfigLike = None,
        *,
        overrides: Sequence[str] | Mapping[str, Any] = (),
        store: Optional[RunStore] = None,
        argv: Sequence[str] = (),
        echo: bool = False,
        on_problem: Callable[[Problem], None] = lambda p: None,
        on_start: Callable[[Candidate], None] = lambda c: None,
        on_record: Callable[[CandidateRecord], None] = lambda r: None,
    ) -> None:
        self.cfg = load(config, overrides)
        self.device = resolve_device(self.cfg)
        self._claim()
        self._lock = threading.Lock()
        self._names: dict[tuple[str, str], str] = {}  # (problem, candidate name) -> source hash
        self._problems: dict[str, Problem] = {}
        self._closed = False
        self._sealed = False  # seal(): nothing more will be submitted
        self._summary: RunSummary  # what the run wrote, set by the first close()
        resources: Optional[RunResources] = None
        try:
            resources = RunResources.open(
                self.cfg, self.device, store, observer=Observer(on_problem, on_start, on_record), echo=echo
            )
            self.resources = resources
            self.store.append(
                run_header(self.store.run_id, self.cfg, argv, resources.quiet, resources.boundary.describe())
            )
            self.executor: Executor = make_executor(resources)
        except BaseException:
            if resources is not None:
                resources.close()
            self._release()
            raise

    @property
    def run_id(self) -> str:
        return self.store.run_id

    @property
    def store(self) -> RunStore:
        """The run folder the session writes its records to."""
        return self.resources.store

    @property
    def builds(self) -> Optional[BuildAhead]:
        """The build pool, or None."""
        return self.resources.builds

    def problem(self, problem: str | Path | Problem) -> Problem:
        """A problem by name (as `--problem` takes it, in the config's problems_dir), path or object."""
        if isinstance(problem, Problem):
            return problem
        key = str(problem)
        with self._lock:
            if key not in self._problems:
                found = resolve_problem(key, self.cfg.path(self.cfg.problems_dir))
                _ = found.settings  # a malformed HARNESS_* declaration is a usage error now, not in a lane
                self._problems[key] = found
            return self._problems[key]

    def submit(
        self, problem: str | Path | Problem, source: str, *, name: Optional[str] = None
    ) -> "concurrent.futures.Future[CandidateRecord]":
        """Queue one candidate (its source, or a raw completion); its record arrives in the future.
        `name` (default: `candidate_<hash>`) names it in records and logs; a name is kept for one
        source per problem. Bad input (an unknown problem, a bad name) raises UserError here."""
        chosen = self.problem(problem)
        return self.submit_candidate(chosen, self._candidate(chosen, source, name))

    def submit_candidate(self, problem: Problem, candidate: Candidate) -> "concurrent.futures.Future[CandidateRecord]":
        """Queue a candidate file (as the command line does)."""
        return self.submit_all([(problem, candidate)])[0]

    def submit_all(
        self, jobs: Sequence[tuple[Problem, Candidate]], last: bool = False
    ) -> "list[concurrent.futures.Future[CandidateRecord]]":
        """Queue candidate files together (the command line's whole run): on Ray, a problem's
        candidates then share one batch and one reference. `last`: these are the last, and the session is sealed
        in the same step (`seal`)."""
        if self._closed:
            raise UserError("the session is closed")
        if self._sealed:
            raise UserError("the session was sealed: it takes no more submissions")
        if self.builds is not None:
            for problem, candidate in jobs:
                if candidate.extraction_failure is None:
                    # building while the lanes are busy
                    self.builds.submit(candidate.path, problem.path if self.cfg.builds.construct else None)
        self._sealed = self._sealed or last
        return self.executor.submit_all(jobs, last)

    def evaluate(
        self, problem: str | Path | Problem, source: str, *, name: Optional[str] = None, timeout: Optional[float] = None
    ) -> CandidateRecord:
        """`submit` and wait for the record."""
        return self.submit(problem, source, name=name).result(timeout)

    def pending(self) -> int:
        """Candidates queued and not yet started."""
        return self.executor.pending()

    def seal(self) -> None:
        """Nothing more will be submitted: what is queued runs on, and the lanes start no judge or worker ahead for
        work that will not come (a one-problem run prestarts no judge for a second problem). A submission after it
        raises UserError."""
        self._sealed = True
        self.executor.seal()

    def stop(self) -> None:
        """End running evaluations (their processes) and cancel queued ones: Ctrl-C's path."""
        self.executor.stop()

    def close(self) -> RunSummary:
        """Finish what is queued, end the lanes and the build pool, write the run's last record, and
        return what the session wrote: its reference and candidate records and its end. Safe to
        call twice (the second returns the same summary)."""
        with self._lock:
            if self._closed:
                return self._summary
            self._closed = True
        try:
            self.executor.close()
        finally:
            try:
                self.resources.close()
            finally:
                self._release()
        written = self.store.written
        end = finish_run(self.store, self.device, self.cfg.timing.null_tolerance, written)
        self._summary = RunSummary(
            tuple(r for r in written if isinstance(r, ReferenceRecord)),
            tuple(r for r in written if isinstance(r, CandidateRecord)),
            end,
        )
        return self._summary

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            self.stop()
        self.close()

    # -- inside ---------------------------------------------------------------------------------

    def _claim(self) -> None:
        global _open_session
        with _open_lock:
            if _open_session is not None:
                raise UserError(
                    "a Session is already open in this process (one at a time: it owns the lanes and the quiet "
                    "host); close it first, or submit to it"
                )
            _open_session = self

    def _release(self) -> None:
        global _open_session
        with _open_lock:
            if _open_session is self:
                _open_session = None

    def _candidate(self, problem: Problem, source: str, name: Optional[str]) -> Candidate:
        """The source as a file in the run folder (sources/<problem>/<name>.py), its code extracted
        from a raw completion; an extraction that fails keeps the text and gets that verdict."""
        if not isinstance(source, str):
            raise UserError(f"a candidate's source must be text, not {type(source).__name__}")
        digest = hashlib.sha256(source.encode()).hexdigest()
        name = name if name is not None else f"candidate_{digest[:12]}"
        check_name(name)
        with self._lock:
            known = self._names.setdefault((problem.name, name), digest)
        if known != digest:
            raise UserError(
                f"candidate name {name!r} is already used for another source of {problem.name} in this session"
            )
        folder = self.store.dir / "sources" / problem.name
        folder.mkdir(parents=True, exist_ok=True)
        extraction = extract_code(source)
        if extraction.code is None:
            path = folder / f"{name}.txt"
            path.write_text(source, encoding="utf-8")
            return Candidate(name, path, extraction_failure=extraction.reason)
        path = folder / f"{name}.py"
        path.write_text(extraction.code, encoding="utf-8")
        return Candidate(name, path)


# -- the parts a session is made of (the command line uses them too) -------------------------------


def resolve_device(cfg: Config) -> str:
    if cfg.executor == ExecutorKind.RAY:  # the cluster's GPUs count, not this machine's
        from harness.parent.ray_executor import cluster_device

        return cluster_device(cfg)
    import torch

    if cfg.device == Device.CUDA and not torch.cuda.is_available():
        raise UserError("device cuda was asked for, but torch sees no CUDA device (use --device cpu or auto)")
    if cfg.device == Device.AUTO:
        return Device.CUDA if torch.cuda.is_available() else Device.CPU
    return cfg.device


def run_header(run_id: str, cfg: Config, argv: Sequence[str], quiet: QuietHost, boundary: str = "") -> RunHeader:
    from harness.device.environment import collect_environment

    return RunHeader(
        run_id=run_id,
        started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        argv=tuple(argv),
        config=cfg.to_dict(),
        environment={**collect_environment(), "quiet_host": quiet.describe(), "boundary": boundary},
    )


def make_executor(resources: RunResources) -> Executor:
    """The local executor (this machine's lanes) or, with executor: ray, the Ray executor, on the
    run's `resources`; both are an `Executor` (harness.parent.executor): `submit(problem, candidate)
    -> Future` and the rest."""
    cfg = resources.cfg
    if cfg.executor == ExecutorKind.RAY:
        from harness.parent.ray_executor import RayExecutor

        return RayExecutor(resources)
    from harness.parent.local import LocalExecutor

    return LocalExecutor(resources, warm=cfg.workers.warm_problems)


def finish_run(
    store: RunStore, device: str, null_tolerance: float = nullfloor.DEFAULT_TOLERANCE, written: Optional[list] = None
) -> RunEnd:
    """Append the run's last record: the GPU's state now, whether its clocks moved between timings,
    and each problem whose null floor lies outside 1.00 +/- `null_tolerance` (or whose null candidate
    failed). `written`: the run's records so far (default: what `store` appended in this process)."""
    from harness.device.environment import gpu_state
    from harness.parent.verdict import CLOCK_TOLERANCE

    timings = []
    references = []
    written_records = list(written if written is not None else store.written)
    for record in written_records:
        if isinstance(record, CandidateRecord) and record.timing.stats is not None:
            timings.append((record.identity.problem, record.identity.candidate, record.timing.stats))
        if isinstance(record, ReferenceRecord):
            problem = record.identity.problem
            if record.timing.stats is not None:
                timings.append((problem, "reference", record.timing.stats))
            timings += [(problem, b.name, b.timing) for b in record.timing.baselines if b.timing is not None]
            references.append(record)
    clocks = [(p, c, t.sm_clock_mhz) for p, c, t in timings if t.sm_clock_mhz]
    warnings = []
    if clocks:
        low, high = min(clocks, key=lambda x: x[2]), max(clocks, key=lambda x: x[2])
        if high[2] > low[2] * (1 + CLOCK_TOLERANCE):
            warnings.append(
                f"SM clocks moved during the run: {low[2]:.0f} MHz after timing {low[0]}/{low[1]}, {high[2]:.0f} MHz "
                f"after {high[0]}/{high[1]}; timings taken at different clocks are not comparable (check cooling, "
                "power and other GPU users)"
            )
    warnings += nullfloor.warnings(references, null_tolerance)
    warnings += unrun.run_summary(r for r in written_records if isinstance(r, CandidateRecord))
    end = RunEnd(
        run_id=store.run_id,
        finished_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu_end=gpu_state() if device == Device.CUDA else {},
        sm_clocks_mhz=tuple(c for _, _, c in clocks),
        warnings=tuple(warnings),
    )
    store.append(end)
    return end
