"""One run's resources: what a session opens when it starts and releases when it ends.

A run has a config and a device, a run folder (RunStore), a scratch folder (harness.parent.scratch),
a quiet host (harness.parent.quiet), a build pool (harness.parent.prebuild, or none) and an observer
that hears of its progress. `RunResources.open` makes them, `close` releases them (the build pool
stopped, whatever the quiet host stopped resumed, the scratch removed), however the run ends.

Nothing here is process-wide: each session opens its own, and what starts processes or writes
scratch files (lanes, their judges, sanitizer runs, builds) is handed them, never looks them up.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any, Callable, Mapping, Optional

from harness.core.config import Ahead, Config, Device, ExecutorKind, QuietMode
from harness.core.records import CandidateRecord
from harness.core.store import RunStore, new_run_id
from harness.parent import watchdog
from harness.parent.boundary import RunBoundary, open_boundary
from harness.parent.prebuild import BuildAhead, default_parallelism, gpu_arch
from harness.parent.quiet import QuietHost
from harness.parent.scratch import MIB, RunScratch, check_free_disk, default_base
from harness.sources.candidate import Candidate
from harness.sources.problem import Problem

__all__ = ["Observer", "RunResources", "lane_count", "quiet_mode", "start_builds", "visible_gpus"]


def _ignore(_: Any) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class Observer:
    """Where a run's progress goes (a progress display, a trainer's bookkeeping): `on_problem`
    when a problem's first candidate starts, `on_start` for each candidate, `on_record` for each
    record. Lane threads call them, one at a time."""

    on_problem: Callable[[Problem], None] = _ignore
    on_start: Callable[[Candidate], None] = _ignore
    on_record: Callable[[CandidateRecord], None] = _ignore


@dataclasses.dataclass(frozen=True)
class RunResources:
    """One run's config, device, run folder, scratch, quiet host, build pool and observer. A `with`
    block (or `close()`) releases them; closing twice does nothing more."""

    cfg: Config
    device: str  # cuda | cpu
    store: RunStore
    scratch: RunScratch
    quiet: QuietHost = dataclasses.field(default_factory=QuietHost)  # "off": touches nothing
    builds: Optional[BuildAhead] = None
    observer: Observer = Observer()
    boundary: RunBoundary = RunBoundary.none()  # what keeps candidates' processes from writing outside the scratch
    # continues the run if a candidate stopped it (harness.parent.watchdog); None where the layer refuses that signal
    watchdog: Optional["subprocess.Popen[bytes]"] = None

    @classmethod
    def open(
        cls,
        cfg: Config,
        device: str,
        store: Optional[RunStore] = None,
        *,
        observer: Observer = Observer(),
        echo: bool = False,
    ) -> "RunResources":
        """Check the free disk (limits.min_free_disk_mb), then make the scratch, the quiet host
        (timing.quiet; a note on stderr with `echo` when pinning was skipped), the run folder when
        `store` is None (a new one under results_dir) and the build pool (builds.ahead)."""
        results_dir = cfg.path(cfg.results_dir)
        check_free_disk([default_base(), results_dir], cfg.limits.min_free_disk_mb * MIB)
        scratch = RunScratch.create()
        for note in scratch.notes if echo else ():
            print(f"note: {note}", file=sys.stderr)
        host = QuietHost()
        try:
            quiet = quiet_mode(cfg, device)
            per_gpu = cfg.workers.lanes_per_gpu if device == Device.CUDA and cfg.executor == ExecutorKind.LOCAL else 1
            host = QuietHost(
                quiet,
                lane_count(cfg, device) if quiet != QuietMode.OFF or per_gpu > 1 else 1,
                lanes_per_gpu=per_gpu,
                card_memory=card_memory() if per_gpu > 1 else 0,
            )
            if echo and host.pin_note:
                print(f"note: timing.quiet={quiet}: {host.pin_note}", file=sys.stderr)
            store = store or RunStore(results_dir, new_run_id())
            boundary = open_boundary(cfg, scratch.path, results_run=store.dir)
            return cls(
                cfg,
                device,
                store,
                scratch,
                host,
                start_builds(cfg, device, host, boundary.env, boundary.cache_read_only),
                observer,
                boundary,
                None if boundary.refuses_signals else watchdog.start(),
            )
        except BaseException:
            host.close()
            scratch.close()
            raise

    def close(self) -> None:
        """Stop the build pool, resume whatever the quiet host stopped (a build left stopped would
        never finish), and remove the scratch folder."""
        try:
            watchdog.stop(self.watchdog)
            if self.builds is not None:
                self.builds.close()
        finally:
            try:
                self.quiet.close()
            finally:
                self.scratch.close()

    def __enter__(self) -> "RunResources":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def quiet_mode(cfg: Config, device: str) -> str:
    """The quiet host's mode for a run: timing.quiet on this machine's lanes (Ray lanes run in
    actors of their own: off), and no pinning on a CPU run, whose checks use every core."""
    mode = cfg.timing.quiet if cfg.executor == ExecutorKind.LOCAL else QuietMode.OFF
    if device == Device.CPU and mode in (QuietMode.PIN, QuietMode.BOTH):
        mode = QuietMode.PAUSE
    return mode


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES values: the variable's own entries
    when it is set, else 0 .. device_count - 1."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and value.strip():
        return [v.strip() for v in value.split(",") if v.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def card_memory() -> int:
    """The device memory of the smallest visible GPU in bytes, from nvidia-smi (the parent makes no CUDA
    context); 0 when it cannot tell."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    wanted = {v.strip() for v in visible.split(",") if v.strip()} if visible else None
    sizes = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit() and (wanted is None or parts[0] in wanted):
            sizes.append(int(parts[1]) << 20)
    return min(sizes) if sizes else 0


def lane_count(cfg: Config, device: str) -> int:
    """How many lanes this machine's run has: workers.lanes_per_gpu per chosen GPU on a CUDA run, one on the CPU."""
    if device != Device.CUDA:
        return 1
    return max(1, len(cfg.workers.gpus) or len(visible_gpus())) * cfg.workers.lanes_per_gpu


def start_builds(
    cfg: Config,
    device: str,
    quiet: QuietHost,
    env: Optional[Mapping[str, str]] = None,
    cache_read_only: bool = False,
) -> Optional[BuildAhead]:
    """A BuildAhead that builds each submitted candidate's extensions in a CPU pool, its builds
    background work for `quiet`; None when builds.ahead is never, or auto on a CPU run (where
    building would disturb the timings), or on Ray (builds run in its tasks). Its builds use a precompiled
    torch/extension.h with builds.precompiled_header, where the boundary keeps candidates from writing the
    build cache (`cache_read_only`)."""
    if (
        cfg.executor == ExecutorKind.RAY
        or cfg.builds.ahead == Ahead.NEVER
        or (cfg.builds.ahead == Ahead.AUTO and device != Device.CUDA)
    ):
        return None
    parallel, jobs = default_parallelism()
    return BuildAhead(
        cfg.path(cfg.build_cache_dir),
        gpu_arch() if device == Device.CUDA else Device.CPU,
        cfg.builds.parallel or parallel,
        cfg.builds.jobs_per_build or jobs,
        timeout=cfg.timeouts.load,
        quiet=quiet,
        env=env,
        nice=cfg.builds.nice,
        precompiled_header=cfg.builds.precompiled_header and cache_read_only,
    )
