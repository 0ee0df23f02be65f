"""Builds ahead of evaluation: each candidate's inline extensions are compiled in a CPU pool, in
their own processes, into the same content-addressed cache the worker uses. The worker then
loads the finished build instead of compiling while the GPU waits. While a lane times, the builds
are stopped or kept off its CPUs (harness.parent.quiet, `timing.quiet`).

A build process (`python -m harness.worker.build`, untrusted like the worker) imports the candidate
module (that is what triggers `load_inline`), exactly as the worker's load phase would; a candidate
that compiles in its constructor instead is constructed once on the CPU from its problem's init
inputs. It never runs a forward, and it needs no CUDA device: it is given the target architecture
(`TORCH_CUDA_ARCH_LIST`) and sees no GPU (`CUDA_VISIBLE_DEVICES` empty), so nvcc builds without a
context and inside the run's boundary, and a hundred builds never touch the GPU being timed. A build
that fails is left to the worker, which reports it; its outcome (`AheadBuild`) goes into the
candidate's record. Builds start in the order they are submitted, the order the lanes take candidates in.
With a precompiled torch/extension.h (harness.parent.pch), looked for as the pool starts and made once a build
waits for a slot, each build that starts once it is ready compiles its main.cpp against it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterable, Mapping, Optional

from harness.core import buildbook
from harness.core.config import ROOT, Device
from harness.core.records import AheadBuild, AheadOutcome
from harness.parent.pch import PrecompiledHeader
from harness.parent.quiet import QuietHost, communicate_unpaused
from harness.parent.sessions import end_session


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a taskset, a container's or a batch job's CPU
    set), not the machine's count, which on a 2-GPU host pinned to 16 of 32 cores ran 16 builds of 2 jobs
    each on 16 cores."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def default_parallelism() -> tuple[int, int]:
    """(concurrent builds, ninja jobs per build) for this process's usable cores and the machine's memory
    (`parallelism_for`)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 8 << 30
    return parallelism_for(usable_cores(), memory)


def parallelism_for(cores: int, memory: int) -> tuple[int, int]:
    """(concurrent builds, ninja jobs per build): three builds per four cores and one per 4 GiB of `memory`
    (an nvcc build of a torch extension peaks near 2-3 GiB), at most 32, each with MAX_JOBS=2 (main.cpp
    compiles beside the .cu). A build's wall is mostly nvcc's serial chain (cudafe++, cicc, the host
    compiler): on an H200 host a cold build took about 72 CPU-s over 57 to 61 s of wall, about 1.25 cores, so
    three per four cores keep the host busy without oversubscribing it (docs/measurements.md); one per two
    cores left about a third of them idle while the lane waited for builds."""
    return max(1, min(cores * 3 // 4, memory // (4 << 30), 32)), max(1, min(2, cores))


def gpu_arch() -> str:
    """Compute capability of the first visible GPU ("9.0"), read without a CUDA context; "" if unknown."""
    from harness.device.environment import query_gpu

    return (query_gpu(["compute_cap"]) or [""])[0]


class BuildAhead:
    """A pool that builds candidates' extensions in the background; `wait` blocks until a given
    candidate's build has finished (or failed, or run past `timeout`). Its build processes are
    background work for `quiet`, the run's quiet host."""

    def __init__(
        self,
        cache_dir: Path,
        arch: str,
        builds: int,
        jobs_per_build: int,
        timeout: float,
        quiet: Optional[QuietHost] = None,
        env: Optional[Mapping[str, str]] = None,
        nice: int = 0,
        precompiled_header: bool = False,
    ) -> None:
        self.cache_dir = cache_dir
        self.nice = nice  # nice levels each build process lowers its CPU priority by (build_command)
        self.env = dict(env or {})  # the run's boundary (harness.parent.boundary), for every build process
        self.quiet = quiet if quiet is not None else QuietHost()
        self.arch = arch
        self.jobs_per_build = jobs_per_build
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(max_workers=builds, thread_name_prefix="build")
        self.futures: dict[Path, Future] = {}
        self._by_content: dict[str, Future] = {}  # a file's sha256 -> its build: the same source is built once
        self._lock = threading.Lock()  # submissions come from any thread (harness.api)
        self.builds = builds
        # looked for at once; made (one core for about 40 s, at the builds' priority) once a build waits for a slot
        self.header = PrecompiledHeader(cache_dir, arch, nice, self.quiet) if precompiled_header else None
        self._header_made = False
        if self.header is not None:
            self.header.start_find()

    def submit(self, path: Path, problem: Optional[Path] = None) -> None:
        """Build `path` in the pool, unless a file with the same contents was submitted already:
        its extensions are then the same (the build cache is keyed by their sources), and a build
        process would only import torch to find them built. With `problem`, a candidate that builds
        in its constructor is constructed with the problem's init inputs. The first build that has to
        wait for a slot starts the precompiled header's make, when none was found."""
        if path.suffix != ".py":
            return
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = f"unreadable:{path}"
        with self._lock:
            if path in self.futures:
                return
            if digest not in self._by_content:
                self._by_content[digest] = self.pool.submit(self._build, path, problem)
            self.futures[path] = self._by_content[digest]
            make_header = (
                self.header is not None
                and not self._header_made
                and sum(not future.done() for future in self._by_content.values()) > self.builds
            )  # counted only until it is started: thousands of submissions do not each walk every build
            self._header_made = self._header_made or make_header
        if make_header and self.header is not None:  # a build waits for a slot: later ones can use the header
            self.header.start_make()

    def wait(self, path: Path) -> AheadBuild:
        """How the build of `path` ended, once it has (skipped when it was never submitted)."""
        with self._lock:
            future = self.futures.get(path)
        if future is None:
            return AheadBuild(AheadOutcome.SKIPPED, "it was never submitted to the build pool")
        try:
            return future.result()
        except Exception as exc:  # a build process that could not run at all: the worker builds and reports
            return AheadBuild(AheadOutcome.FAILED, f"the build process could not run: {type(exc).__name__}: {exc}")

    def done(self, path: Path) -> bool:
        """Whether `wait(path)` would return at once: its build has ended, or it was never submitted."""
        with self._lock:
            future = self.futures.get(path)
        return future is None or future.done()

    def wait_any(self, paths: Iterable[Path], timeout: float) -> None:
        """Return once the build of one of `paths` has ended (at once if one has, or one was never submitted), or
        after `timeout` seconds."""
        with self._lock:
            futures = [self.futures.get(path) for path in paths]
        if not futures:
            time.sleep(timeout)
        elif all(future is not None and not future.done() for future in futures):
            wait([f for f in futures if f is not None], timeout=timeout, return_when=FIRST_COMPLETED)

    def counts(self) -> tuple[int, int]:
        """(finished builds, submitted builds)."""
        with self._lock:
            futures = list(self.futures.values())
        return sum(f.done() for f in futures), len(futures)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.header is not None:
            self.header.close()

    def _build(self, path: Path, problem: Optional[Path] = None) -> AheadBuild:
        """Run one build process to its end; how it ended. The process is background work
        for the run's quiet host while it runs: pinned to the builds' CPUs before its
        compilers start, stopped while a lane times. Time it spends stopped does not count against
        `timeout`."""
        env = build_env(self.env, self.arch, self.jobs_per_build)
        host = self.quiet
        started = time.perf_counter()
        # its own folder, in the run's scratch: the only one it may write, where it compiles and names
        # the builds it used
        own = Path(tempfile.mkdtemp(prefix="build-", dir=env.get("TMPDIR") or None))
        keys = own / "keys.json"
        header = self.header.folder() if self.header is not None else None
        proc = subprocess.Popen(
            build_command(path, self.cache_dir, self.arch, keys, own, problem, self.nice, header),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        host.register_background(proc)  # children (ninja, the compilers) inherit its CPUs
        paused_before = host.paused_seconds
        try:
            output = communicate_unpaused(proc, host, self.timeout)  # the limit moves on while it is stopped
            if output is None:
                _end_session(proc)
                shutil.rmtree(own, ignore_errors=True)
                ended = f"ended after {self.timeout:g} s"
                return AheadBuild(AheadOutcome.TIMEOUT, ended, round(self.timeout, 3), header is not None)
            stdout, stderr = output
        except BaseException:
            _end_session(proc)
            shutil.rmtree(own, ignore_errors=True)
            raise
        finally:
            host.unregister(proc)
        seconds = round(time.perf_counter() - started - (host.paused_seconds - paused_before), 3)
        outcome = dataclasses.replace(
            ahead_outcome(stdout, stderr, proc.returncode, seconds), header=header is not None
        )
        # the process has ended: what it compiled goes into the cache under its source's digest, by the
        # parent's hand (harness.core.buildbook), failed compiles included
        publish_own(own, self.cache_dir, path)
        return outcome


def publish_own(own: Path, cache: Path, source: Path) -> list[str]:
    """Publish the builds a finished build process compiled in its own folder `own` (under the digest
    of `source`, the candidate it built), then remove the folder; the keys published."""
    try:
        owner = buildbook.owner_of(source.read_text(encoding="utf-8", errors="replace"))
        return buildbook.publish(own / "builds", cache, owner)
    except OSError:
        return []
    finally:
        shutil.rmtree(own, ignore_errors=True)


def build_command(
    path: Path,
    cache: Path,
    arch: str,
    keys: Path,
    own: Path,
    problem: Optional[Path] = None,
    nice: int = 0,
    header: Optional[Path] = None,
) -> list[str]:
    """The command line of a build process (harness.worker.build) for candidate `path`. With `nice`, the
    process lowers its own CPU priority by that many levels before it does anything else, so ninja and
    the compilers inherit it: when the CPUs are short, the lane's judge, workers and memcheck (at the
    run's priority) get them first, and the builds take what is left. With `header`, the folder of a
    precompiled torch/extension.h (harness.parent.pch), its compilers look there first."""
    return [
        sys.executable,
        "-m",
        "harness.worker.build",
        str(path),
        str(cache),
        arch,
        str(keys),
        *(["--problem", str(problem)] if problem is not None else []),
        "--own",
        str(own),
        *(["--nice", str(nice)] if nice else []),
        *(["--pch", str(header)] if header is not None else []),
    ]


def build_env(boundary_env: Mapping[str, str], arch: str, jobs: int) -> dict[str, str]:
    """A build process's environment: the run's boundary, `jobs` compiler jobs, the target architecture
    and no GPU (the build needs none, and a context on the GPU a lane times would disturb it)."""
    env = {**os.environ, **boundary_env, "MAX_JOBS": str(jobs), "CUDA_VISIBLE_DEVICES": ""}
    if arch not in ("", Device.CPU):
        env["TORCH_CUDA_ARCH_LIST"] = arch
    return env


def ahead_outcome(stdout: str, stderr: str, returncode: int, seconds: float) -> AheadBuild:
    """A build process's outcome from its output: its last line is `ok [(extension, cached|built), ...]`
    or `STATUS REASON` (harness.worker.build); anything else (a process that could not enter the
    boundary, or died) is a failure named by its last line of stderr."""
    last = (stdout.strip().splitlines() or [""])[-1].strip()
    if last.startswith("ok "):
        built = last != "ok []"
        return AheadBuild(AheadOutcome.BUILT if built else AheadOutcome.NOTHING, last[3:] if built else "", seconds)
    if last:
        return AheadBuild(AheadOutcome.FAILED, last[:300], seconds)
    why = (stderr.strip().splitlines() or ["no output"])[-1].strip()
    return AheadBuild(AheadOutcome.FAILED, f"the build process exited {returncode}: {why}"[:300], seconds)


def _end_session(proc: subprocess.Popen) -> None:
    """Kill a build's session (the build, ninja, and the compilers ninja put in groups of their own) and reap it."""
    end_session(proc.pid)
    try:
        proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ValueError, OSError):  # a child outside the session (setsid) holds the pipes
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
