"""Parent side of a worker: start it, watch its phases, enforce limits, collect its report.

The worker's stdout and stderr go through a pipe into a bounded log (head and tail kept), so a
candidate that prints megabytes cannot fill memory or disk. Results arrive only on the
authenticated channel. A phase that runs past its limit, a worker over its memory limit, or a
forged message ends the worker's whole process group; every ending becomes a status.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from harness.core import protocol as P
from harness.core.channel import ChannelReader, ForgedMessage, new_key
from harness.core.config import ROOT, Ahead, Config, Device
from harness.core.protocol import Failure, WorkerOutcome
from harness.core.records import to_dict
from harness.core.status import Status
from harness.parent.quiet import QuietHost
from harness.parent.sessions import end_session
from harness.parent.spares import SpareSlot
from harness.parent.zygote import Zygote, ZygoteUnavailable, judge_env

POLL_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Reply:
    """What the parent answers a worker's message with: one JSON line on the worker's stdin."""

    data: dict[str, Any]


class BoundedLog:
    """Keeps the first and last `limit/2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1024)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {omitted} bytes of output omitted ...]\n".encode() if omitted > 0 else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", errors="replace")


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def default_memory_limit() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
    except (ValueError, OSError):
        return 1 << 62


@dataclasses.dataclass
class Started:
    """A worker process up and waiting for its job on stdin (its interpreter and torch loaded)."""

    proc: subprocess.Popen[bytes]
    read_fd: int  # the parent's end of the result channel
    write_fd: int  # the number the worker knows its end by


def start_worker(env_overrides: Optional[dict[str, str]] = None) -> Started:
    """Start `python -m harness.worker`; it imports torch, then waits for a job on stdin."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env.update(env_overrides or {})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        start_new_session=True,
        cwd=ROOT,
        env=env,
    )
    os.close(write_fd)
    return Started(proc, read_fd, write_fd)


@dataclasses.dataclass(frozen=True)
class Backlog:
    """What a lane may still be given, once nothing more can be submitted: problems it has no judge for yet,
    and jobs not yet taken. A launcher starts no more processes ahead than these (a judge or a worker started
    for work that never comes takes CPU, and a CUDA context, beside the timings)."""

    problems: int
    jobs: int


def unknown_backlog() -> Optional[Backlog]:
    """More may be submitted at any time (an open session): every spare is kept."""
    return None


class LauncherClosed(RuntimeError):
    """A worker was asked of a launcher the run had already closed or killed (an interrupted run)."""


class Launcher:
    """Hands out fresh worker processes, one per job. With `prestart`, the next one is started as
    soon as one is taken, so its interpreter and torch import (about 2 s) overlap the job before
    it instead of delaying the next; with `prewarm="cuda"` it also creates its CUDA context and
    starts the profiler's CUPTI once (seconds more) while it waits. A prestarted worker has run no
    model code: every job still gets a process of its own. `env` (e.g. CUDA_VISIBLE_DEVICES)
    applies to every worker.

    For the run's quiet host (`quiet`, harness.parent.quiet) the spare is background work while it waits
    (stopped while a lane times, kept on the builds' CPUs); a worker handed out is a timing process of
    lane `lane_index`: pinned to that lane's CPUs, and running even if a hold had stopped it."""

    def __init__(
        self,
        prestart: bool = False,
        env: Optional[dict[str, str]] = None,
        lane_index: int = 0,
        prewarm: str = "",
        spares: int = 1,
        judges: bool = False,
        quiet: Optional[QuietHost] = None,
        worker_env: Optional[Mapping[str, str]] = None,
        judges_ahead: int = 1,
        zygote: bool = False,
    ) -> None:
        self.quiet = quiet if quiet is not None else QuietHost()
        self.wants_zygote = zygote  # judges forked from a zygote that imported torch once (harness.parent.zygote)
        self.zygote: Optional[Zygote] = None  # started with the run (start_zygote), or with the lane's first judge
        # the run's boundary (harness.parent.boundary): workers only, not judges
        self.worker_env = dict(worker_env or {})
        self.prestart = prestart
        self.judges = judges  # with prestart: also the next problems' judges (take_judge)
        self.judges_ahead = max(1, judges_ahead)  # judges kept started ahead: more when problems come fast
        self.prewarm = prewarm  # "cuda": the spare readies the CUDA context and the profiler while it waits
        self.spares = max(1, spares)  # workers kept ready: more than one when jobs come faster than a worker readies
        self.env = dict(env or {})
        self.lane_index = lane_index
        self.active: set[subprocess.Popen[bytes]] = set()  # handed out, not yet ended
        self._spares: list[Started] = []  # oldest (most likely ready) first
        self._judge_spares: list[tuple[JudgeClient, Path]] = []  # prestarted judges and their folders, oldest first
        # compute-sanitizer's next run started ahead (sanitizer.prestart), kept across the lane's problems
        self.sanitizer_spares: SpareSlot[Any] = SpareSlot()
        self._judges_started = 0
        # what the lane may still be given (the executor's, once it was sealed); None: more may come
        self.backlog: Callable[[], Optional[Backlog]] = unknown_backlog
        self._closed = False
        self._lock = threading.Lock()

    @property
    def _spare(self) -> Optional[Started]:
        return self._spares[0] if self._spares else None

    def take(self) -> Started:
        """A worker for the next job. Refused (`LauncherClosed`) once the launcher was closed or killed:
        a lane that reaches here after Ctrl-C must not start a worker that nothing would end."""
        host = self.quiet
        with self._lock:  # against kill_all from another thread: no worker taken after it, none it misses
            if self._closed:
                raise LauncherClosed("the run was stopped: no new worker")
            while self._spares and self._spares[0].proc.poll() is not None:  # a spare that died waiting
                self._discard_one(self._spares.pop(0))
            started = self._spares.pop(0) if self._spares else start_worker({**self.env, **self.worker_env})
            self.active.add(started.proc)
        host.register_timing(started.proc, self.lane_index)  # pinned to the lane, then continued if stopped
        self._fill_workers()
        return started

    def _fill_workers(self, current: int = 0) -> None:
        """With `prestart`, start workers until `spares` wait (background work for the quiet host), never more
        than the jobs still to come (`backlog`) and the `current` one the lane took but has no worker for yet."""
        if self.prestart:
            backlog = self.backlog()
            self._fill(
                lambda: self._spares,
                self.spares if backlog is None else min(self.spares, backlog.jobs + current),
                lambda: start_worker({**self._spare_env(), **self.worker_env}),
                lambda spare: self.quiet.register_background(spare.proc),
                self._discard_one,
            )

    def _fill(
        self,
        waiting: Callable[[], list[Any]],
        count: int,
        start: Callable[[], Any],
        keep: Callable[[Any], None],
        discard: Callable[[Any], None],
    ) -> None:
        """Start processes (`start`) until `count` wait in `waiting()`, each `keep`-ed as it joins; one started as
        kill_all closed the launcher from another thread is `discard`-ed: nothing started after it is left running."""
        while not self._closed and len(waiting()) < count:
            started = start()
            with self._lock:
                closed = self._closed
                if not closed:
                    keep(started)
                    waiting().append(started)
            if closed:
                discard(started)

    def release(self, proc: subprocess.Popen[bytes]) -> None:
        self.active.discard(proc)
        self.quiet.unregister(proc)

    def take_judge(self, log_path: Path, make_dir: Callable[[str], Path]) -> tuple[JudgeClient, Path]:
        """A judge for the next problem of this lane, and its working folder (`make_dir(prefix)`
        makes one in the run's scratch). With `prestart` and `judges`, the oldest judge prestarted ahead that
        is still alive: its interpreter, torch and (prewarm "cuda") its CUDA context and CUPTI are ready, or
        nearly, so a problem's reference pass no longer waits for them. It has run no problem code: every
        problem still gets a judge process of its own. Then judges are prestarted until `judges_ahead` wait,
        or as many as problems are still to come (`backlog`; those waiting beyond that are ended), each with a
        log beside `log_path`'s folder that it is renamed from. Refused (`LauncherClosed`) once
        the launcher was closed or killed, as `take` is: a lane that restarts its judge after Ctrl-C must not
        start one that runs a whole reference pass for nothing."""
        with self._lock:
            if self._closed:
                raise LauncherClosed("the run was stopped: no new judge")
        self.start_zygote(log_path.parent.parent)
        taken: Optional[tuple[JudgeClient, Path]] = None
        # a restart (the problem's log exists) appends to its log: a fresh judge, and the spares wait on
        while taken is None and self._judge_spares and not log_path.exists():
            spare = self._judge_spares.pop(0)
            try:
                if spare[0].running():
                    spare[0].adopt(log_path, self.lane_index)
                    taken = spare
            except OSError:
                pass
            if taken is None:  # died while it waited
                self._discard_judge(spare)
        if taken is None:
            folder = make_dir("judge-")
            taken = (
                JudgeClient(
                    log_path=log_path,
                    cwd=folder,
                    env=self.env,
                    lane_index=self.lane_index,
                    quiet=self.quiet,
                    zygote=self.zygote,
                ),
                folder,
            )
        if self.prestart and self.judges:
            backlog = self.backlog()
            wanted = self.judges_ahead if backlog is None else min(self.judges_ahead, backlog.problems)
            with self._lock:  # a judge started ahead for a problem that will not come is ended now
                surplus, self._judge_spares = self._judge_spares[wanted:], self._judge_spares[:wanted]
            for spare in reversed(surplus):
                self._discard_judge(spare)
            self._fill(
                lambda: self._judge_spares,
                wanted,
                lambda: self._start_judge_spare(log_path, make_dir),
                lambda judge: None,
                self._discard_judge,
            )
        self._fill_workers(current=1)  # the lane's first worker, too, readies while its first reference pass runs
        return taken

    def _start_judge_spare(self, log_path: Path, make_dir: Callable[[str], Path]) -> tuple[JudgeClient, Path]:
        """A judge started ahead, as background work, logging beside `log_path`'s folder until adopted
        (not *.log: no worker's log until then)."""
        self._judges_started += 1
        spare_log = log_path.parent.parent / f".judge-spare-{self.lane_index}-{self._judges_started}.out"
        folder = make_dir("judge-spare-")
        client = JudgeClient(
            log_path=spare_log,
            cwd=folder,
            env=self._spare_env(),
            lane_index=self.lane_index,
            spare=True,
            quiet=self.quiet,
            zygote=self.zygote,
        )
        return client, folder

    def _spare_env(self) -> dict[str, str]:
        """A prestarted process's environment: the lane's, and what it readies while it waits."""
        return {**self.env, "HARNESS_PREWARM": self.prewarm} if self.prewarm else self.env

    def kill_all(self) -> None:
        """End the spares and every worker handed out and still running (an interrupted run)."""
        with self._lock:
            self._closed = True
            active = list(self.active)
        self._discard()
        self._discard_judge()
        self.sanitizer_spares.close()
        for proc in active:
            _kill_session(proc)
            self.quiet.unregister(proc)
        self._close_zygote()

    def close(self) -> None:
        self._closed = True
        self._discard()
        self._discard_judge()
        self.sanitizer_spares.close()
        self._close_zygote()

    def start_zygote(self, logs: Path) -> None:
        """With `wants_zygote`, start the lane's judge zygote once (a run does as it starts, so its imports overlap the
        first builds; else the first judge does), logging into `logs` as a spare does; never once the launcher is
        closed (kill_all from another thread: nothing started after it is left running). Until it has imported
        torch, judges start on their own."""
        with self._lock:
            if self.wants_zygote and self.zygote is None and not self._closed:
                self.zygote = Zygote(self.env, logs / f".judge-zygote-{self.lane_index}.out", self.quiet)

    def _close_zygote(self) -> None:
        """End the lane's judge zygote and remove its log; the judges it forked are their clients' to end."""
        with self._lock:
            zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.close()
            zygote.log_path.unlink(missing_ok=True)

    def _discard_judge(self, spare: Optional[tuple[JudgeClient, Path]] = None) -> None:
        """End a prestarted judge (every one of the lane's, when none is named) and remove its folder and log."""
        if spare is None:
            with self._lock:
                spares, self._judge_spares = self._judge_spares, []
        else:
            spares = [spare]
        for client, folder in spares:
            client.kill()
            client.close()
            shutil.rmtree(folder, ignore_errors=True)
            client.log_path.unlink(missing_ok=True)

    def _discard(self) -> None:
        while self._spares:
            self._discard_one(self._spares.pop())

    def _discard_one(self, spare: Started) -> None:
        _kill_session(spare.proc)
        spare.proc.wait()
        self.quiet.unregister(spare.proc)
        for stream in (spare.proc.stdin, spare.proc.stdout):
            if stream is not None:
                stream.close()
        os.close(spare.read_fd)


def start_run(
    job: P.WorkerJob,
    *,
    timeouts: Any,
    memory_limit: int,
    log_path: Path,
    log_limit: int,
    cwd: Path,
    launcher: Optional[Launcher] = None,
) -> "WorkerRun":
    """Start one worker on `job` (from `launcher`, possibly prestarted, else started now), working
    in `cwd`; its pass reads its messages from the returned run (`WorkerRun`)."""
    key = new_key()
    started = time.perf_counter()
    worker = launcher.take() if launcher is not None else start_worker()
    assert worker.proc.stdin is not None
    try:
        worker.proc.stdin.write(
            json.dumps({"job": to_dict(job), "cwd": str(cwd), "result_fd": worker.write_fd, "key": key}).encode()
            + b"\n"
        )
        worker.proc.stdin.flush()
    except BrokenPipeError:
        pass  # it died before reading its job; the ending below says how
    watch = _Watch(
        worker,
        ChannelReader(key),
        BoundedLog(log_limit),
        timeouts,
        memory_limit,
        launcher.quiet.lane_clock(launcher.lane_index) if launcher is not None else time.monotonic,
    )
    return WorkerRun(watch, launcher, log_path, started)


class WorkerRun:
    """One worker on its job, watched until it ends. Its pass reads, in order, each verified message
    other than Phase, Failed and Done (typed: harness.core.protocol) from `messages()`, and answers
    each with `answer()` before it reads the next: None lets the worker go on, a Reply is sent to
    it (it waits for one), a Failure stops it. A message that is not one a worker sends ends it as
    a forged result. Once the messages are read, `outcome` is what the run came to. Used as a
    context manager: an exception in the pass (Ctrl-C, a judge that failed) ends the worker's
    process group before it propagates."""

    def __init__(self, watch: "_Watch", launcher: Optional[Launcher], log_path: Path, started: float) -> None:
        self.watch, self.launcher, self.log_path, self.started = watch, launcher, log_path, started
        self.outcome: Optional[WorkerOutcome] = None

    def __enter__(self) -> "WorkerRun":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is not None:  # the worker's process group must not outlive us
            _kill_session(self.watch.proc)

    def messages(self) -> Iterator[Any]:
        """The worker's messages that need an answer, until it ends; then `outcome` is set."""
        yield from self.watch.run()
        self.outcome = self._outcome()

    def answer(self, verdict: Optional[Failure | Reply]) -> None:
        """The answer to the message just read."""
        self.watch.answered = verdict

    def _outcome(self) -> WorkerOutcome:
        watch = self.watch
        returncode = watch.end(self.launcher)
        failure = watch.failure
        if failure is None:
            if watch.reported is not None:
                failure = watch.reported
            elif watch.done is None:
                failure = _ending_without_report(returncode, watch.phase)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(watch.log.text())
        return WorkerOutcome(
            failure=failure,
            done=watch.done if failure is None else None,
            messages=tuple(watch.messages),
            phase=watch.phase,
            returncode=returncode,
            wall_seconds=time.perf_counter() - self.started,
            log_bytes=watch.log.total,
        )


class _Watch:
    """One running worker, watched until it ends: its output into the log, its verified messages
    (phases move its time limit; `run` yields the rest, each answered in `answered` before the
    watch goes on), its phase time limit and its memory.
    The limit runs on its lane's clock (`clock`, harness.parent.quiet.QuietHost.lane_clock): time another
    lane's turn on their GPU kept it stopped is not counted."""

    def __init__(
        self,
        worker: Any,
        reader: ChannelReader,
        log: BoundedLog,
        timeouts: Any,
        memory_limit: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.P = P
        self.proc, self.reader, self.log, self.timeouts, self.memory_limit = (
            worker.proc,
            reader,
            log,
            timeouts,
            memory_limit,
        )
        self.answered: Optional[Failure | Reply] = None  # the pass's answer to the message last yielded
        self.clock = clock
        self.open_fds = {worker.read_fd: "result", worker.proc.stdout.fileno(): "output"}
        self.messages: list[Any] = []
        self.phase, self.phase_limit = "load", float(timeouts.load)
        self.deadline = self.clock() + self.phase_limit
        self.failure: Optional[Failure] = None  # why the parent stopped it
        self.done: Any = None  # its Done message
        self.reported: Optional[Failure] = None  # the failure it reported itself (a Failed message)

    def stop(self, status: Status, reason: str) -> None:
        self.failure = Failure(status, reason)
        _kill_session(self.proc)

    def run(self) -> Iterator[Any]:
        """The messages that need an answer, until the worker ends or is stopped."""
        while self.open_fds and self.failure is None:
            now = self.clock()
            if now >= self.deadline:
                self.stop(Status.TIMEOUT, f"phase {self.phase} ran past its {self.phase_limit:g} s limit")
                break
            ready, _, _ = select.select(list(self.open_fds), [], [], min(POLL_SECONDS, self.deadline - now))
            for fd in ready:
                yield from self.read(fd)
                if self.failure is not None:
                    break
            if self.failure is None and self.memory_limit and _rss_bytes(self.proc.pid) > self.memory_limit:
                self.stop(
                    Status.OUT_OF_MEMORY, f"worker used over {self.memory_limit >> 20} MiB of host memory (limit)"
                )
            if self.failure is None and (self.done or self.reported) and self.proc.poll() is not None:
                break  # reported and exited; a child it left holding the pipes must not keep us waiting

    def read(self, fd: int) -> Iterator[Any]:
        data = os.read(fd, 1 << 16)
        if not data:
            if self.open_fds.pop(fd) == "result":
                os.close(fd)  # ours alone (stdout is closed with the process's pipe object)
            return
        if self.open_fds[fd] == "output":
            self.log.write(data)
            return
        try:
            lines = self.reader.feed(data)
        except ForgedMessage as exc:
            self.stop(Status.FORGED_RESULT, str(exc))
            return
        for line in lines:
            try:
                message = self.P.decode_worker(line)
            except ValueError as exc:
                self.stop(
                    Status.FORGED_RESULT, f"the worker sent {str(exc).splitlines()[0]} on the result channel"[:300]
                )
                return
            self.messages.append(message)
            yield from self.handle(message)
            if self.failure is not None:
                return

    def handle(self, message: Any) -> Iterator[Any]:
        P = self.P
        if isinstance(message, P.Phase):
            self.phase = str(message.phase)
            self.phase_limit = float(getattr(self.timeouts, self.phase))
            self.deadline = self.clock() + self.phase_limit
        elif isinstance(message, P.Failed):
            self.reported = Failure(message.status, str(message.reason))
        elif isinstance(message, P.Done):
            self.done = message
        else:
            yield message
            verdict, self.answered = self.answered, None
            if isinstance(verdict, Reply):
                try:
                    self.proc.stdin.write(json.dumps(verdict.data).encode() + b"\n")
                    self.proc.stdin.flush()
                except (BrokenPipeError, ValueError):
                    pass  # it ended meanwhile; the ending below says how
            elif verdict is not None:
                self.stop(verdict.status, verdict.reason)

    def end(self, launcher: Optional[Launcher]) -> int:
        """Collect the rest of its output, wait for it to exit (its group is killed), close the
        pipes, and check the channel ended cleanly. Returns its exit code."""
        proc = self.proc
        _drain(self.open_fds, self.log)
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            returncode = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            returncode = proc.wait()
        _kill_session(proc)  # children the model left behind
        if launcher is not None:
            launcher.release(proc)
        for fd in self.open_fds:
            if self.open_fds[fd] == "result":
                os.close(fd)
        proc.stdout.close()
        if self.failure is None:
            try:
                self.reader.finish()
            except ForgedMessage as exc:
                self.failure = Failure(Status.FORGED_RESULT, str(exc))
        return returncode


def _drain(open_fds: dict[int, str], log: BoundedLog, seconds: float = 1.0) -> None:
    """Collect output still buffered in the pipe after the worker reported (bounded in time)."""
    output = [fd for fd, kind in open_fds.items() if kind == "output"]
    end = time.monotonic() + seconds
    while output and time.monotonic() < end:
        ready, _, _ = select.select(output, [], [], 0.05)
        if not ready:
            return
        data = os.read(output[0], 1 << 16)
        if not data:
            return
        log.write(data)


def _ending_without_report(returncode: int, phase: str) -> Failure:
    if returncode < 0:
        signum = -returncode
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        if signum == signal.SIGKILL:
            return Failure(
                Status.OUT_OF_MEMORY,
                f"worker killed by SIGKILL in phase {phase} (most often the kernel's out-of-memory killer)",
            )
        return Failure(Status.CRASHED, f"worker killed by {name} (exit {128 + signum}) in phase {phase}")
    if returncode == 0:
        return Failure(Status.EXITED_EARLY, f"worker exited with code 0 in phase {phase} without reporting a result")
    return Failure(Status.CRASHED, f"worker exited with code {returncode} in phase {phase} without reporting a result")


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process's session: it, and whatever it started, in its group or in groups of their own."""
    end_session(proc.pid)


def _start_judge(
    zygote: Optional[Zygote], log_path: Path, cwd: Path, env: dict[str, str], pipes: tuple[int, int]
) -> Any:
    """A judge process on `pipes` (its request read end, its reply write end), printing to `log_path`: forked from
    the lane's `zygote` when it has one that can (harness.parent.zygote), else started as a process of its own."""
    with open(log_path, "ab") as log:
        if zygote is not None:
            try:
                return zygote.spawn(cwd, env, (*pipes, log.fileno()))
            except ZygoteUnavailable as exc:
                log.write(f"[harness] not forked from the judge zygote ({exc}): started on its own\n".encode())
                log.flush()
        return subprocess.Popen(
            [sys.executable, "-m", "harness.judge.service", *(str(fd) for fd in pipes)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=pipes,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )


class JudgeFailed(Exception):
    """The judge ended, hung past its limit, or reported a fault; it is gone and must be restarted."""


class JudgeClient:
    """Parent side of a lane's judge (harness.judge.service): starts it, sends typed requests, waits for
    typed replies under time limits. What the judge prints goes to `log_path`. A judge that hangs
    past a limit or ends is killed with its process group and reported as JudgeFailed. It is a
    timing process of lane `lane_index` for the run's quiet host (`quiet`): pinned to its CPUs."""

    def __init__(
        self,
        *,
        log_path: Path,
        cwd: Path,
        env: Optional[dict[str, str]] = None,
        lane_index: int = 0,
        spare: bool = False,
        quiet: Optional[QuietHost] = None,
        zygote: Optional[Zygote] = None,
    ) -> None:
        self.quiet = quiet if quiet is not None else QuietHost()
        request_read, self._request_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.proc = _start_judge(zygote, log_path, cwd, judge_env(env), (request_read, reply_write))
        self.clock = self.quiet.lane_clock(lane_index)
        if spare:  # prestarted: background work while it waits (harness.parent.supervise.Launcher.take_judge)
            self.quiet.register_background(self.proc)
        else:
            self.quiet.register_timing(self.proc, lane_index)
        os.close(request_read)
        os.close(reply_write)
        self._buffer = b""
        self.alive = True

    def adopt(self, log_path: Path, lane_index: int) -> None:
        """A prestarted judge taken for a problem: its log becomes `log_path` (renamed, so what it
        printed while it waited is kept, and what it prints next goes there too), and it becomes a
        timing process of lane `lane_index`. OSError when the log cannot be moved there."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.log_path, log_path)
        self.log_path = log_path
        self.quiet.register_timing(self.proc, lane_index)
        self.clock = self.quiet.lane_clock(lane_index)

    def request(self, message: Any, limit: float, phase_limits: Any = None) -> Any:
        """Send `message`; return the judge's reply. `Phase` replies on the way (the judge's
        start) restart the clock with that phase's limit from `phase_limits`."""
        if not self.alive:
            raise JudgeFailed("the judge is not running")
        data = (P.dumps(message) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._request_write, data) :]
        except OSError:
            self._end()
            raise JudgeFailed(f"the judge ended (exit {self.proc.poll()})") from None
        clock = self.clock  # another lane's turn that stopped this judge does not count against its limit
        deadline, phase = clock() + limit, "request"
        while True:
            while b"\n" not in self._buffer:
                remaining = deadline - clock()
                if remaining <= 0:
                    self._end()
                    raise JudgeFailed(f"the judge ran past its {limit:g} s limit in {phase}")
                ready, _, _ = select.select([self._reply_read], [], [], min(remaining, 1.0))
                if not ready:
                    if self.proc.poll() is not None:
                        self._end()
                        raise JudgeFailed(f"the judge ended ({_describe_exit(self.proc.returncode)}) in {phase}")
                    continue
                chunk = os.read(self._reply_read, 1 << 16)
                if not chunk:
                    self._end()
                    raise JudgeFailed(f"the judge ended ({_describe_exit(self.proc.wait())}) in {phase}")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            reply = P.decode(json.loads(line))
            if isinstance(reply, P.Phase):
                phase = f"phase {reply.phase}" if reply.phase else "request"
                if reply.phase and phase_limits is not None:
                    limit = float(getattr(phase_limits, reply.phase))
                    deadline = clock() + limit
                continue
            if isinstance(reply, P.Fault):
                self._end()
                raise JudgeFailed(reply.reason)
            return reply

    def running(self) -> bool:
        return self.alive and self.proc.poll() is None

    def kill(self) -> None:
        """End the judge's process group now, from any thread; a request waiting on it raises
        JudgeFailed within a second."""
        if self.alive:
            _kill_session(self.proc)

    def describe_exit(self) -> str:
        return _describe_exit(self.proc.poll())

    def close(self) -> None:
        """Let the judge finish (end of its requests), then make sure its group is gone."""
        if self.alive:
            self._close_requests()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._end()

    def _end(self) -> None:
        if not self.alive:
            return
        self.alive = False
        _kill_session(self.proc)
        self.proc.wait()
        self.quiet.unregister(self.proc)
        self._close_requests()
        if self._reply_read >= 0:
            os.close(self._reply_read)
            self._reply_read = -1

    def _close_requests(self) -> None:
        """Close our end of the judge's requests, once: closing a descriptor number twice could end
        a pipe another thread opened under that number meanwhile (another judge's, a worker's)."""
        if self._request_write >= 0:
            try:
                os.close(self._request_write)
            except OSError:
                pass
            self._request_write = -1


def _describe_exit(returncode: Optional[int]) -> str:
    if returncode is not None and returncode < 0:
        signum = -returncode
        return f"killed by {signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum}"
    return f"exit {returncode}"


# -- lanes -------------------------------------------------------------------------------------------------
# A lane: where one evaluation runs at a time, one GPU (its workers see only that GPU, through
# CUDA_VISIBLE_DEVICES) or the CPU, with its launcher. Two timings never share a lane.


@dataclasses.dataclass
class Lane:
    label: str  # "cuda:1" (the GPU's CUDA_VISIBLE_DEVICES value), "" on a CPU run
    gpu: str  # the CUDA_VISIBLE_DEVICES value its workers get ("" = inherit the parent's)
    launcher: Launcher

    @classmethod
    def single(
        cls,
        cfg: Config,
        device: str,
        gpu: str = "",
        label: str = "",
        index: int = 0,
        quiet: Optional[QuietHost] = None,
        worker_env: Optional[Mapping[str, str]] = None,
    ) -> "Lane":
        """`index`: the lane's place among the run's lanes, which picks its CPUs on the run's quiet
        host `quiet` (none: an `off` host, which touches nothing)."""
        # nvidia-smi (clocks, identity) numbers GPUs in PCI order; CUDA must number them the same way
        env = (
            {"CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
            if gpu
            else {}
        )
        prewarm = Device.CUDA if device == Device.CUDA else ""
        launcher = Launcher(
            wants_prestart(cfg, device),
            env,
            index,
            prewarm,
            cfg.workers.spares,
            cfg.workers.prestart_judge,
            quiet,
            worker_env,
            cfg.workers.judges_ahead,
            cfg.workers.judge_zygote,
        )
        return cls(label, gpu, launcher)

    @property
    def index(self) -> int:
        return self.launcher.lane_index


def wants_prestart(cfg: Config, device: str) -> bool:
    """Prestarted workers import torch while another worker runs: on by default for CUDA runs only,
    where the GPU is timed; on a CPU run that import would share the CPU with a timing."""
    return cfg.workers.prestart == Ahead.ALWAYS or (cfg.workers.prestart == Ahead.AUTO and device == Device.CUDA)
