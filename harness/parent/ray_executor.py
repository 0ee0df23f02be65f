"""The Ray executor (`executor: ray`): evaluations on a Ray cluster, builds in CPU tasks.

- Each lane is a Ray actor that holds one GPU (`num_gpus=1`; Ray pins its CUDA_VISIBLE_DEVICES)
  or, on a CPU run, one CPU. Inside it, evaluation is exactly the local one: a ProblemEvaluation
  on that lane, with its own judge (which runs the reference) and a fresh worker process per candidate.
- Each candidate's evaluation is one actor call, handed to whichever lane is free next. The
  problem and candidate files travel as text, so nodes need the harness but not the files.
- Each candidate's build is a CPU task (`num_cpus=ray.build_cpus`) that runs the prebuild into a
  scratch cache and returns the finished build directories as a tarball; the lane unpacks them
  into its node's content-addressed cache before the worker loads them. All builds are
  submitted at the start, so the GPUs never wait for a build that could have started earlier.
- The lanes send their records and logs back; the driver writes them into the run folder, so a
  Ray run has the same records and leaderboards as a local one (plus each record's lane).

Needs the optional extra: `pip install .[ray]`. docs/scale.md has the multi-node set-up.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from harness.core import buildbook
from harness.core.config import ROOT, Config, Device
from harness.core.errors import UserError, one_line
from harness.core.plan import Plan
from harness.core.records import CandidateRecord, ReferenceRecord
from harness.core.schema import decode_line, encode_line
from harness.core.status import Status
from harness.core.store import RunStore
from harness.parent import pch
from harness.parent.boundary import open_boundary
from harness.parent.evaluate import ProblemEvaluation
from harness.parent.executor import UNREADY_POLL_S, Job, QueuedExecutor
from harness.parent.prebuild import build_command, build_env
from harness.parent.resources import RunResources
from harness.parent.scratch import RunScratch, end_processes_in
from harness.parent.supervise import Lane
from harness.sources.candidate import Candidate
from harness.sources.problem import Problem


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "executor ray needs Ray, an optional extra: pip install '.[ray]' (or pip install ray)"
        ) from None
    return ray


def connect(cfg: Config) -> bool:
    """Join (or start) the Ray instance the config names; True when this call started it."""
    ray = _ray()
    if ray.is_initialized():
        return False
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    options: dict[str, Any] = {"include_dashboard": False} if not cfg.ray.address else {}
    try:
        ray.init(
            address=cfg.ray.address or None,
            runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
            log_to_driver=False,
            configure_logging=False,
            **options,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(
            f"cannot reach the Ray cluster at {cfg.ray.address or '(a new local instance)'}: {str(exc).splitlines()[0]}"
        ) from None
    return True


def cluster_device(cfg: Config) -> str:
    """cuda when the cluster has GPUs (auto, cuda), else cpu; asking for cuda without any is an error."""
    connect(cfg)
    gpus = int(_ray().cluster_resources().get("GPU", 0))
    if cfg.device == Device.CPU:
        return Device.CPU
    if gpus == 0:
        if cfg.device == Device.CUDA:
            raise UserError("device cuda was asked for, but the Ray cluster has no GPU")
        return Device.CPU
    return Device.CUDA


def pack_builds(cache_dir: Path, owner: str, keys: list[str]) -> bytes:
    """The finished builds `keys` of `owner` in `cache_dir` as a gzipped tarball (b"" when none)."""
    folder = buildbook.owner_folder(cache_dir, owner)
    entries = [folder / key for key in keys if any((folder / key).glob("*.so"))]
    if not entries:
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for entry in entries:
            tar.add(entry, arcname=f"{folder.name}/{entry.name}")
    return buffer.getvalue()


def unpack_builds(blob: bytes, cache_dir: Path) -> list[str]:
    """Add the builds in `blob` to `cache_dir` (each under its owner), never over a build already
    there, and record their digests (harness.core.buildbook); their keys."""
    if not blob:
        return []
    added = []
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        members = tar.getmembers()
        for owner, key in sorted({tuple(m.name.split("/")[:2]) for m in members if m.name.count("/") >= 1}):
            folder = buildbook.owner_folder(cache_dir, owner)
            if folder.name != owner or (folder / key).is_dir() and any((folder / key).glob("*.so")):
                continue
            folder.mkdir(parents=True, exist_ok=True)
            unpacked = Path(tempfile.mkdtemp(dir=folder, prefix=".unpack-"))
            chosen = [m for m in members if m.name.split("/")[:2] == [owner, key]]
            tar.extractall(unpacked, members=chosen, filter="data")
            try:
                (unpacked / owner / key).rename(folder / key)  # atomic: a reader sees all of it or none
                buildbook.record(cache_dir, owner, key)
                added.append(key)
            except OSError:
                pass  # another lane on this node got there first
            shutil.rmtree(unpacked, ignore_errors=True)
    return added


@dataclasses.dataclass(frozen=True)
class _Batch:
    """One problem's candidates on their way to the lanes: what each lane's call carries."""

    problem: Problem
    source: str  # the problem file's text
    plan: Plan  # the secret inputs every lane checks on
    sources: dict[Path, str]  # each candidate's text
    builds: dict[Path, Any]  # each candidate's build task (a Ray object ref)
    by_name: dict[str, Candidate]


def take_built_first(queue: list[Candidate], built: Callable[[Candidate], bool]) -> Candidate:
    """Take from `queue` (its end is its oldest) the oldest candidate whose build has ended, else the oldest (the
    dispatcher calls it once some build has ended, so its lane does not wait for one)."""
    for index in range(len(queue) - 1, -1, -1):
        if built(queue[index]):
            return queue.pop(index)
    return queue.pop()


def build_remote(cfg_data: dict[str, Any], file_name: str, source: str, arch: str, jobs: int, timeout: float) -> bytes:
    """A CPU task: build one candidate's inline extensions into this node's content-addressed
    cache (a build already there is reused) and return the builds it uses as a tarball. The build
    process enters the boundary this node offers (sandbox.layer), as a local build ahead does, and
    sees no GPU; under the hash layer, a build that wrote into the trees ships nothing (what it
    wrote is undone, and the lane's worker, which imports the candidate again, is judged for it). It
    compiles against a precompiled torch/extension.h that a run on this node made before (harness.parent.pch),
    under the layers that keep candidates from writing the cache; a task makes none."""
    from harness.core.config import build

    cfg: Config = build(Config, cfg_data, prefix="")
    cache = cfg.path(cfg.build_cache_dir)
    with tempfile.TemporaryDirectory(prefix="harness-ray-build-") as folder:
        path = Path(folder) / file_name
        path.write_text(source)
        boundary = open_boundary(cfg, Path(folder) / "scratch")
        own = Path(folder) / "scratch" / "build"  # its own folder: the only one it may write
        own.mkdir()
        keys_file = own / "keys.json"
        env = build_env(boundary.env, arch, jobs)
        owner = buildbook.owner_of(path.read_text(encoding="utf-8", errors="replace"))
        header = pch.known(cache, arch) if cfg.builds.precompiled_header and boundary.cache_read_only else None
        try:
            subprocess.run(
                build_command(path, cache, arch, keys_file, own, nice=cfg.builds.nice, header=header),
                capture_output=True,
                cwd=ROOT,
                env=env,
                timeout=timeout,
                start_new_session=True,
            )
            keys = json.loads(keys_file.read_text()) if keys_file.is_file() else []
        except (subprocess.TimeoutExpired, ValueError):
            return b""  # the lane's worker builds it, under its own limit, and reports
        finally:
            end_processes_in(Path(folder))  # what the candidate's import left running (this task's process lives on)
        if boundary.watch is not None and boundary.watch.check():
            return b""
        buildbook.publish(own / "builds", cache, owner)  # by this task's hand, once the process has ended
        return pack_builds(cache, owner, keys)


class LaneStore(RunStore):
    """A lane actor's store: the workers' logs in its own folder, its records kept in memory until
    the driver takes them (the driver writes them into the run's records)."""

    def __init__(self, results_dir: Path, run_id: str) -> None:
        super().__init__(results_dir, run_id)
        self._kept: list[Any] = []

    def append(self, record: Any) -> None:
        with self._lock:
            self._kept.append(record)

    def take(self) -> list[str]:
        """The records appended since the last take, as the records file's lines (oldest first)."""
        with self._lock:
            kept, self._kept = self._kept, []
        return [encode_line(record) for record in kept]


class LaneActor:
    """One lane on a Ray node: evaluates the candidates it is handed, one at a time."""

    def __init__(self, cfg_data: dict[str, Any], device: str, run_id: str) -> None:
        from harness.core.config import build

        self.cfg: Config = build(Config, cfg_data, prefix="")
        self.device = device
        # The lane's own resources: its scratch (harness.parent.scratch), removed by close(), and, when Ray
        # kills the actor (an interrupted run), swept by the next run on this node, since its owner is
        # gone; its store; an `off` quiet host (the actor holds its GPU alone) and no build pool (builds
        # arrive from Ray's tasks).
        own = RunScratch.create()
        self.folder = own.make("ray-lane-")
        self.store = LaneStore(self.folder / "results", run_id)
        # the boundary this node can enter (sandbox.layer), around this lane's workers and sanitizer runs,
        # as a local run's: candidate code on a Ray node is as untrusted as anywhere
        boundary = open_boundary(self.cfg, own.path, results_run=self.store.dir)
        self.resources = RunResources(self.cfg, device, self.store, own, boundary=boundary)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if device == Device.CUDA else ""
        self.lane = Lane.single(
            self.cfg,
            device,
            label=f"{socket.gethostname()}/cuda:{gpu}" if gpu else f"{socket.gethostname()}/cpu",
            quiet=self.resources.quiet,
            worker_env=self.resources.boundary.env,
        )
        self.evaluation: Optional[ProblemEvaluation] = None
        self.evaluation_key: Any = None
        self.sent: set[str] = set()

    def boundary(self) -> str:
        """The layer this lane's candidate processes enter, as its run's header would say it."""
        return self.resources.boundary.describe()

    def arch(self) -> str:
        from harness.parent.prebuild import gpu_arch

        return gpu_arch() if self.device == Device.CUDA else Device.CPU

    def evaluate(
        self,
        problem_file: str,
        problem_source: str,
        plan: Plan,
        candidate_name: str,
        candidate_source: str,
        builds: bytes,
    ) -> dict[str, Any]:
        """One candidate on this lane (after the problem's reference, when the problem or the plan
        is new here): the records it wrote and the logs not sent before."""
        problem_path = self.folder / "problems" / problem_file
        problem_path.parent.mkdir(parents=True, exist_ok=True)
        if not problem_path.is_file() or problem_path.read_text() != problem_source:
            problem_path.write_text(problem_source)
        problem = Problem(problem_path.stem, "", problem_path)
        candidate_path = self.folder / "solutions" / problem.name / f"{candidate_name}.py"
        candidate_path.parent.mkdir(parents=True, exist_ok=True)
        candidate_path.write_text(candidate_source)
        unpack_builds(builds, self.cfg.path(self.cfg.build_cache_dir))
        key = (problem.name, problem.hash, plan)
        # a new problem: its reference runs on this lane first
        if self.evaluation is None or self.evaluation_key != key:
            if self.evaluation is not None:
                self.evaluation.close()
            self.evaluation = ProblemEvaluation(
                problem, [], self.cfg, self.device, self.store, lane=self.lane, plan=plan, resources=self.resources
            )
            self.evaluation_key = key
        self.evaluation.evaluate(Candidate(candidate_name, candidate_path))
        logs = {}
        for log in sorted((self.store.dir / "logs").rglob("*.log")):
            name = str(log.relative_to(self.store.dir))
            if name not in self.sent:  # each worker's log once: the reference's, the baselines', the candidate's
                logs[name] = log.read_text(errors="replace")
                self.sent.add(name)
        return {"records": self.store.take(), "logs": logs}

    def close(self) -> None:
        if self.evaluation is not None:
            self.evaluation.close()
        self.lane.launcher.close()
        self.resources.close()


class RayExecutor(QueuedExecutor):
    """Evaluations on Ray actors (lanes), builds in Ray CPU tasks; records written here. A
    dispatcher thread hands the queued candidates of the oldest job's problem to the lanes
    together (one plan, one batch), and the records to their futures."""

    def __init__(self, resources: RunResources) -> None:
        observer = resources.observer
        super().__init__(on_record=observer.on_record, on_start=observer.on_start, on_problem=observer.on_problem)
        ray = _ray()
        self.ray = ray
        self.resources = resources
        cfg, device, store = resources.cfg, resources.device, resources.store
        self.cfg, self.device, self.store = cfg, device, store
        self.started_ray = connect(cfg)
        cluster = ray.cluster_resources()
        gpus, cpus = int(cluster.get("GPU", 0)), int(cluster.get("CPU", 1))
        lanes = cfg.ray.lanes or (gpus if device == Device.CUDA else 1)
        if device == Device.CUDA and gpus < 1:
            raise UserError("the Ray cluster has no GPU for a CUDA run")
        options = {"num_gpus": 1, "num_cpus": 0} if device == Device.CUDA else {"num_cpus": 1}
        actor = ray.remote(**options)(LaneActor)
        self.actors = [actor.remote(cfg.to_dict(), device, store.run_id) for _ in range(lanes)]
        self.arch = ray.get(self.actors[0].arch.remote())
        self.layers = sorted(set(ray.get([a.boundary.remote() for a in self.actors])))  # what each lane entered
        widest = max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=cpus)
        # CPU lanes hold one each
        self.build_cpus = max(1, min(cfg.ray.build_cpus, widest - (0 if device == Device.CUDA else 1)))
        self.builder = ray.remote(num_cpus=self.build_cpus)(build_remote)

    def describe(self) -> str:
        return (
            f"ray: {len(self.actors)} lane(s) ({'one GPU' if self.device == Device.CUDA else 'one CPU'} each), "
            f"builds in tasks of {self.build_cpus} CPU(s); boundary around the lanes' candidates: "
            f"{', '.join(self.layers)}"
        )

    def _servers(self) -> list[tuple[str, Callable[[], None]]]:
        return [("ray-dispatch", self._dispatch)]

    def _dispatch(self) -> None:
        while True:
            # the oldest job's problem
            batch = self.queue.take(lambda jobs: [job for job in jobs if job.key == jobs[0].key])
            if not batch:
                return
            batch = self._claim(batch)
            if not batch:
                continue
            problem = batch[0].problem
            self._announce(problem)

            def run_batch(problem: Problem = problem, batch: list[Job] = batch) -> list[CandidateRecord]:
                return self._run_batch(problem, [job.candidate for job in batch])

            self._settle(batch, run_batch)

    def _run_batch(self, problem: Problem, candidates: list[Candidate]) -> list[CandidateRecord]:
        """Each candidate goes to the next free lane. A lane that fails (its actor dies, a Ray error)
        gives that candidate a `harness error` record (which --resume redoes), never a crash."""
        # the driver's own evaluation of the problem: it screens the candidates and writes the records
        # of those that cannot run or whose lane failed; nothing runs on its lane
        lane = Lane.single(self.cfg, self.device, quiet=self.resources.quiet, worker_env=self.resources.boundary.env)
        screen = ProblemEvaluation(
            problem,
            candidates,
            self.cfg,
            self.device,
            self.store,
            resources=self.resources,
            lane=lane,
            on_record=self.on_record,
            on_start=self.on_start,
        )
        try:
            return self._to_lanes(problem, screen)
        finally:
            screen.close()
            lane.launcher.close()

    def _to_lanes(self, problem: Problem, screen: ProblemEvaluation) -> list[CandidateRecord]:
        """The screened candidates of `screen` to the lanes, each to the next free one: a candidate whose build has
        ended before one whose build still runs (take_built_first)."""
        records, runnable = screen.screen()
        if not runnable:
            return records
        sources = {c.path: c.path.read_text() for c in runnable}
        cfg_data = self.cfg.to_dict()  # its paths (the build cache) resolved on each node against its own checkout
        builds = {
            c.path: self.builder.remote(
                cfg_data, c.path.name, sources[c.path], self.arch, self.build_cpus, self.cfg.timeouts.load
            )
            for c in runnable
        }
        by_name = {c.name: c for c in runnable}
        batch = _Batch(problem, problem.path.read_text(), Plan.fresh(screen.cfg), sources, builds, by_name)
        queue, idle = list(reversed(runnable)), list(self.actors)
        pending: dict[Any, tuple[Any, Candidate]] = {}
        finished: dict[str, CandidateRecord] = {}

        def failed(candidate: Candidate, why: str) -> None:
            if self.queue.stopping:  # its lane ended with the run: no record (cancelled; --resume redoes it)
                return
            finished[candidate.name] = screen.failed(candidate, Status.HARNESS_ERROR, why)

        while queue or pending:
            while queue and idle:
                built = self._built([builds[c.path] for c in queue], wait=not pending)
                if not built:  # a free lane waits, below, for a build or a record, whichever comes first
                    break
                actor = idle.pop()
                candidate = take_built_first(queue, lambda c: builds[c.path] in built)  # noqa: B023 - used at once
                ref = self._evaluate_on(actor, batch, candidate)
                pending[ref] = (actor, candidate)
            if not pending:  # every lane is gone (or the run stopped while none was built)
                for candidate in reversed(queue):
                    self.on_start(candidate)
                    failed(candidate, "no Ray lane is left to evaluate it (every actor failed)")
                break
            waits = list(pending) + ([builds[c.path] for c in queue] if idle else [])
            (ref,), _ = self.ray.wait(waits, num_returns=1)
            if ref not in pending:  # a build ended while a lane was free
                continue
            actor, candidate = pending.pop(ref)
            if self._returned(ref, actor, candidate, batch, finished, failed):
                idle.append(actor)
        return records + [finished[c.name] for c in runnable if c.name in finished]

    def _returned(
        self,
        ref: Any,
        actor: Any,
        candidate: Candidate,
        batch: _Batch,
        finished: dict[str, CandidateRecord],
        failed: Callable[[Candidate, str], None],
    ) -> bool:
        """Write what the lane `actor` returned for `candidate` (`ref`) into `finished`, or give the candidate
        `failed`'s record when the call failed; whether the lane lives on."""
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            failed(candidate, f"the Ray lane failed: {one_line(exc, 280)}")
            if isinstance(exc, self.ray.exceptions.RayActorError):
                self.actors = [a for a in self.actors if a is not actor]
                return False
            return True
        self._write(result, batch.problem, batch.by_name, finished)
        return True

    def _evaluate_on(self, actor: Any, batch: _Batch, candidate: Candidate) -> Any:
        """Start `candidate`'s evaluation on the lane `actor` (its build handed over as Ray resolves it): its ref."""
        self.on_start(candidate)
        return actor.evaluate.remote(
            batch.problem.path.name,
            batch.source,
            batch.plan,
            candidate.name,
            batch.sources[candidate.path],
            batch.builds[candidate.path],
        )

    def _built(self, refs: list[Any], wait: bool) -> set[Any]:
        """Of the builds `refs`, those that have ended; with `wait`, once one has (none if the run stops first)."""
        while True:
            ended = set(self.ray.wait(refs, num_returns=len(refs), timeout=0)[0])
            if ended or not wait or self.queue.stopping:
                return ended
            self.ray.wait(refs, num_returns=1, timeout=UNREADY_POLL_S)

    def _write(
        self,
        result: dict[str, Any],
        problem: Problem,
        by_name: dict[str, Candidate],
        finished: dict[str, CandidateRecord],
    ) -> None:
        """A lane's logs and records into this run's folder, with the driver's file paths."""
        for text, log in result["logs"].items():
            path = self.store.dir / text
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(log)
        for line in result["records"]:
            record = decode_line(line)
            if isinstance(record, ReferenceRecord):
                identity = dataclasses.replace(record.identity, problem_path=str(problem.path))
                self.store.append(dataclasses.replace(record, identity=identity))
            elif isinstance(record, CandidateRecord):
                candidate = by_name[record.identity.candidate]
                record = dataclasses.replace(
                    record, identity=dataclasses.replace(record.identity, candidate_path=str(candidate.path))
                )
                self.store.append(record)
                self.on_record(record)
                finished[candidate.name] = record

    def _interrupt(self) -> None:
        """End every lane (its actor and the processes under it). The queue is stopping by now (stop()):
        a lane the kill ends is not a failed lane, and its candidate gets no `harness error` record."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []

    def _release(self) -> None:
        for actor in self.actors:
            try:
                self.ray.get(actor.close.remote(), timeout=60)
            except Exception:
                pass
            self.ray.kill(actor)
        self.actors = []
        if self.started_ray:
            self.ray.shutdown()
