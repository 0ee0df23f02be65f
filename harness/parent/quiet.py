"""A quiet host while a lane times: background work is stopped, or kept on CPUs of its own.

Two kinds of processes share the host during a run. *Background* processes do work that can
wait: the build pool's compiles (harness.parent.prebuild, with their ninja and compiler children) and the
spare prestarted worker (harness.parent.supervise.Launcher), which imports torch while it waits for a
job. *Timing* processes are a lane's judge and the worker that was handed a job.

`timing.quiet` says what the run does about it:
- `pause`: while any lane holds the host (`with host.hold(): ...` around timed rounds),
  every background process group is stopped (SIGSTOP) and continued (SIGCONT) when the last
  holder leaves. A background process registered during a hold is stopped at once; one that is
  unregistered (a build that ended, a spare handed out for a job) is continued first.
- `pin`: this process's CPUs are split: each lane gets `CPUS_PER_LANE` CPUs of its own, taken
  from the end of the sorted list, for its judge and its workers; background processes get the
  rest. Children inherit their parent's CPUs, so a build's compilers stay on the builds' CPUs.
  With too few CPUs for that, nothing is pinned and `pin_note` says why.
- `both` (the default) does both; `off` touches nothing.

Lanes may share a GPU (`workers.lanes_per_gpu`): lane `i` is on GPU group `i // lanes_per_gpu`. Then
a lane's hold (`host.hold(lane_index)`) is the GPU's alone: it waits while another lane of its group
holds, and it stops that group's other lanes' processes (their judges and workers, whatever they are
checking) for as long as it lasts, whatever `timing.quiet` says. Their checks overlap; their timings
take turns. A stopped process's kernels already on the GPU finish on their own; the hold waits
`DRAIN_S` after stopping any, so what they left in flight is done before the first timed call.

Each run has a host of its own (harness.parent.resources.RunResources), handed to what starts its
processes; code given none (tests, Ray actors) uses an `off` host, which touches nothing. The run
calls `close()` on every exit path: a background process left stopped would never finish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from harness.core.config import QuietMode

CPUS_PER_LANE = 2  # a lane's judge and worker, each with a CPU of its own
DRAIN_S = 0.05  # after stopping processes that use the GPU: kernels they had launched finish before the hold goes on
MIN_BACKGROUND_CPUS = 2  # pinning is not worth it with fewer left for builds and prestarts

Process = Union[int, Any]  # a pid, or anything with `.pid` (subprocess.Popen); `.returncode` is honoured when present


def cpu_ranges(cpus: Iterable[int]) -> str:
    """`0-13`, `0,2,4-5`: a CPU list the way /proc and taskset write it."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start: int | None = None
    previous: int | None = None
    for cpu in ordered + [None]:
        if start is not None:
            assert previous is not None  # set together with start
            if cpu is None or cpu != previous + 1:
                parts.append(str(start) if start == previous else f"{start}-{previous}")
                start = None
        if cpu is not None:
            if start is None:
                start = cpu
            previous = cpu
    return ",".join(parts)


def task_ids(pid: int) -> list[int]:
    """The thread ids of a process (/proc/<pid>/task); just `pid` where /proc cannot tell."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit()]
    except OSError:
        return [pid]


def pin(pid: int, cpus: Iterable[int]) -> bool:
    """Restrict every thread of process `pid` to `cpus` (sched_setaffinity on a pid changes only
    that one thread); threads and children made later inherit it. Threads that end meanwhile are
    skipped; threads started while this runs are caught by a second pass. False when no thread
    could be pinned (the process is gone, or not ours)."""
    wanted = set(cpus)
    done: set[int] = set()
    pinned = False
    for _ in range(3):
        fresh = [tid for tid in task_ids(pid) if tid not in done]
        if not fresh:
            break
        for tid in fresh:
            done.add(tid)
            try:
                os.sched_setaffinity(tid, wanted)
                pinned = True
            except OSError:  # ended (ESRCH), not ours, or a CPU the cpuset no longer allows
                continue
    return pinned


def _pid(proc: Process) -> int:
    return proc if isinstance(proc, int) else int(proc.pid)


def _send(pid: int, proc: Process, leads: bool, signum: int) -> bool:
    """Signal the process's group (the process alone when it shares a group); False when it has
    exited or cannot be signalled."""
    if _exited(proc):
        return False
    try:
        if leads:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _exited(proc: Process) -> bool:
    return not isinstance(proc, int) and getattr(proc, "returncode", None) is not None


@dataclasses.dataclass(frozen=True)
class CpuPlan:
    """Which CPUs each lane's timing processes get, and which the background work gets."""

    lanes: tuple[tuple[int, ...], ...] = ()  # per lane index: its CPUs (none: nothing is pinned)
    background: tuple[int, ...] = ()  # builds and prestarted workers
    note: str = ""  # why pinning was skipped, when it was asked for

    @classmethod
    def partition(cls, cpus: list[int], lanes: int, per_lane: int) -> "CpuPlan":
        """The last `per_lane` CPUs for each lane, the rest for the background; no pinning (a
        note) when fewer than MIN_BACKGROUND_CPUS would be left."""
        needed = lanes * per_lane + MIN_BACKGROUND_CPUS
        if len(cpus) < needed:
            asked = "1 lane needs" if lanes == 1 else f"{lanes} lanes need"
            return cls(
                note=(
                    f"pinning skipped: {len(cpus)} CPU{'s' if len(cpus) != 1 else ''} available, {asked} {needed} "
                    f"({per_lane} per lane, {MIN_BACKGROUND_CPUS} for builds)"
                )
            )
        end = len(cpus)
        taken = []
        for _ in range(lanes):
            taken.append(tuple(cpus[end - per_lane : end]))
            end -= per_lane
        return cls(tuple(taken), tuple(cpus[:end]))

    def describe(self, pausing: bool) -> str:
        if self.lanes:
            name = "pause+pin" if pausing else "pin"
            return (
                f"{name}: lanes on CPUs {cpu_ranges([cpu for cpus in self.lanes for cpu in cpus])}, builds on "
                f"{cpu_ranges(self.background)}"
            )
        if self.note:
            return f"{'pause' if pausing else 'off'}; {self.note}"
        return "pause"


class QuietHost:
    """A run's registry of background and timing processes, and the holds of the lanes that are
    timing. Thread-safe: several lanes may hold at once."""

    def __init__(
        self,
        quiet_mode: str = QuietMode.OFF,
        lanes: int = 1,
        *,
        cpus: Optional[Iterable[int]] = None,
        cpus_per_lane: int = CPUS_PER_LANE,
        lanes_per_gpu: int = 1,
    ) -> None:
        if quiet_mode not in QuietMode.words():
            raise ValueError(f"quiet mode must be one of {list(QuietMode.words())}, got {quiet_mode!r}")
        self.quiet_mode = quiet_mode
        self.lanes = max(1, int(lanes))
        self.lanes_per_gpu = max(1, int(lanes_per_gpu))
        self.sharing = self.lanes_per_gpu > 1  # lanes share a GPU: a hold is the GPU's alone
        self.cpus_per_lane = max(1, int(cpus_per_lane))
        self.pausing = quiet_mode in (QuietMode.PAUSE, QuietMode.BOTH)
        self.cpus = (
            CpuPlan.partition(
                sorted(set(cpus if cpus is not None else os.sched_getaffinity(0))), self.lanes, self.cpus_per_lane
            )
            if quiet_mode in (QuietMode.PIN, QuietMode.BOTH)
            else CpuPlan()
        )
        self.pin_note = self.cpus.note
        self._lock = threading.RLock()
        self._work = BackgroundWork()  # the background processes, and which a hold stopped
        self._timing: dict[int, int] = {}  # pid -> lane index
        self._holders = 0
        self._held_since: Optional[float] = None
        self._paused = 0.0
        self._closed = False
        self._turns = GpuTurns(self._lock, self.lanes_per_gpu)  # whose turn it is on each shared GPU

    # -- what it knows --------------------------------------------------------------------------

    @property
    def pinning(self) -> bool:
        """Whether processes are pinned (mode pin or both, and enough CPUs)."""
        return bool(self.cpus.lanes)

    def lane_cpus(self, lane_index: int) -> Optional[tuple[int, ...]]:
        """The CPUs of lane `lane_index`; None when nothing is pinned (or there is no such lane)."""
        if 0 <= lane_index < len(self.cpus.lanes):
            return self.cpus.lanes[lane_index]
        return None

    @property
    def background_cpus(self) -> Optional[tuple[int, ...]]:
        return self.cpus.background if self.pinning else None

    @property
    def holders(self) -> int:
        """How many holds are active now (over all lanes)."""
        with self._lock:
            return self._holders

    @property
    def held(self) -> bool:
        return self.holders > 0

    @property
    def paused_seconds(self) -> float:
        """Total time background work was paused so far (a hold going on counts up to now)."""
        with self._lock:
            ongoing = time.monotonic() - self._held_since if self._held_since is not None else 0.0
            return self._paused + ongoing

    def lane_clock(self, lane_index: int) -> Callable[[], float]:
        """A clock for the limits of lane `lane_index`'s judge and workers: time.monotonic, less the
        time another lane's turn on their shared GPU kept them stopped. It runs on through the lane's
        own holds, so a call that hangs while it is timed still runs out of time."""

        def clock() -> float:
            with self._lock:
                return time.monotonic() - self._turns.stopped_seconds(lane_index)

        return clock

    @property
    def background_pids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._work.processes)

    @property
    def timing_pids(self) -> dict[int, int]:
        """pid -> lane index of the timing processes registered now."""
        with self._lock:
            return dict(self._timing)

    def describe(self) -> str:
        """One line for logs and records, e.g. `pause+pin: lanes on CPUs 14-15, builds on 0-13`."""
        line = QuietMode.OFF if self.quiet_mode == QuietMode.OFF else self.cpus.describe(self.pausing)
        return f"{line}; {self.lanes_per_gpu} lanes per GPU, one timing at a time on each" if self.sharing else line

    # -- registering ----------------------------------------------------------------------------

    def register_background(self, proc: Process) -> None:
        """`proc` (best: the leader of its own process group, start_new_session=True) is background
        work: pinned to the builds' CPUs, and stopped with its group at once if a lane holds."""
        if self.quiet_mode == QuietMode.OFF:
            return
        pid = _pid(proc)
        with self._lock:
            if self._closed or _exited(proc):
                return
            try:
                group = os.getpgid(pid)
            except OSError:
                return  # already gone
            self._work.processes[pid] = (proc, group == pid and group != os.getpgrp())  # never signal our own group
            if self.pinning:
                pin(pid, self.cpus.background)
            if self._holders and self.pausing:
                self._work.stop(pid)

    def register_timing(self, proc: Process, lane_index: int = 0) -> None:
        """`proc` times for lane `lane_index` (its judge, or the worker handed a job): pinned to the
        lane's CPUs, never stopped. A background process (a spare worker taken for a job) stops being
        background: it is pinned first, then continued if a hold had stopped it."""
        if self.quiet_mode == QuietMode.OFF and not self.sharing:
            return
        pid = _pid(proc)
        with self._lock:
            if self._closed:
                return
            cpus = self.lane_cpus(lane_index)
            if cpus is not None and not _exited(proc):
                pin(pid, cpus)
            self._work.drop(pid)
            if not _exited(proc):
                self._timing[pid] = lane_index
                self._turns.registered(pid, lane_index)

    def unregister(self, proc: Process) -> None:
        """Forget `proc` (it ended, or is no longer background); a process a hold stopped is
        continued first. Unknown processes are ignored."""
        if self.quiet_mode == QuietMode.OFF and not self.sharing:
            return
        pid = _pid(proc)
        with self._lock:
            self._work.drop(pid)
            lane = self._timing.pop(pid, None)
            if lane is not None:
                self._turns.forget(pid, lane)

    # -- holding --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, lane_index: Optional[int] = None) -> Iterator["QuietHost"]:
        """While inside, background work is paused (mode pause or both). Holds nest and may come
        from several threads: the first one in stops the background, the last one out resumes it.
        A lane's hold (`lane_index`) on a shared GPU is also that GPU's alone: it waits for the
        group's other lanes to leave theirs, and stops their processes until it leaves."""
        drained = self._enter(lane_index)
        if drained:
            time.sleep(DRAIN_S)
        try:
            yield self
        finally:
            self._leave(lane_index)

    def _enter(self, lane_index: Optional[int]) -> bool:
        """Take the hold; whether it stopped another lane's processes, which may have work on the GPU."""
        with self._lock:
            if self._closed:
                return False
            stopped = (
                self._turns.take(lane_index, self._timing, lambda: self._closed)
                if self.sharing and lane_index is not None
                else 0
            )
            self._holders += 1
            if self._holders == 1 and self.pausing:
                self._held_since = time.monotonic()
                self._work.stop_all()
            return stopped > 0

    def _leave(self, lane_index: Optional[int]) -> None:
        with self._lock:
            if self._closed or self._holders == 0:
                return
            if self.sharing and lane_index is not None:
                self._turns.give(lane_index)
            self._holders -= 1
            if self._holders == 0:
                self._resume_all()

    def _resume_all(self) -> None:
        if self._held_since is not None:
            self._paused += time.monotonic() - self._held_since
            self._held_since = None
        self._turns.resume_all()
        self._work.resume_all()

    def close(self) -> None:
        """Resume everything this host stopped and forget every process; later holds and
        registrations do nothing. Safe to call twice, and while another thread holds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._holders = 0
            self._resume_all()
            self._turns.close()
            self._work.processes.clear()
            self._timing.clear()

    def __repr__(self) -> str:
        return f"QuietHost({self.describe()!r}, holders={self._holders}, background={len(self._work.processes)})"


class BackgroundWork:
    """The background processes of a quiet host, and those a hold stopped; under the host's lock."""

    def __init__(self) -> None:
        self.processes: dict[int, tuple[Process, bool]] = {}  # pid -> (process, leads its own group)
        self.stopped: set[int] = set()  # pids sent SIGSTOP and not yet SIGCONT

    def stop(self, pid: int) -> None:
        """Stop one (its group)."""
        entry = self.processes.get(pid)
        if entry is not None and pid not in self.stopped and self._signal(pid, entry, signal.SIGSTOP):
            self.stopped.add(pid)

    def stop_all(self) -> None:
        for pid in list(self.processes):
            self.stop(pid)

    def drop(self, pid: int) -> None:
        """Forget one (it ended, or is no longer background), continued first if it was stopped."""
        entry = self.processes.pop(pid, None)
        if entry is not None and pid in self.stopped:
            self.stopped.discard(pid)
            self._signal(pid, entry, signal.SIGCONT)

    def resume_all(self) -> None:
        for pid in list(self.stopped):
            self.stopped.discard(pid)
            entry = self.processes.get(pid)
            if entry is not None:
                self._signal(pid, entry, signal.SIGCONT)

    def _signal(self, pid: int, entry: tuple[Process, bool], signum: int) -> bool:
        """Signal the process (`_send`); one that has exited is dropped silently."""
        if _send(pid, *entry, signum):
            return True
        self.processes.pop(pid, None)
        self.stopped.discard(pid)
        return False


class GpuTurns:
    """Whose turn it is on each GPU that lanes share (lane `i` is on group `i // lanes_per_gpu`):
    the lane holding a group's GPU, how deeply, and the other lanes' processes it stopped. Every
    method runs under the quiet host's lock (`lock`), which `take` waits on."""

    def __init__(self, lock: Any, lanes_per_gpu: int) -> None:
        self.lanes_per_gpu = lanes_per_gpu
        self._free = threading.Condition(lock)  # a group's turn ended
        self._holder: dict[int, tuple[int, int]] = {}  # group -> (lane holding it, how deep)
        self._stopped: dict[int, set[int]] = {}  # group -> pids of its other lanes its holder stopped
        self._turn_since: dict[int, float] = {}  # group -> when its holder's turn began
        self._waited: dict[int, float] = {}  # lane -> seconds other lanes' ended turns kept its processes stopped

    def group(self, lane_index: int) -> int:
        return lane_index // self.lanes_per_gpu

    def take(self, lane_index: int, timing: dict[int, int], closed: Any) -> int:
        """Wait until no other lane of `lane_index`'s group holds its GPU (or `closed()`), take it, and
        stop the group's other lanes' processes (`timing`: pid -> lane); how many were stopped."""
        group = self.group(lane_index)
        while not closed() and self._holder.get(group, (lane_index, 0))[0] != lane_index:
            self._free.wait()
        depth = self._holder.get(group, (lane_index, 0))[1]
        self._holder[group] = (lane_index, depth + 1)
        if depth:
            return 0
        self._turn_since[group] = time.monotonic()
        stopped = self._stopped.setdefault(group, set())
        for pid, lane in list(timing.items()):
            if lane != lane_index and self.group(lane) == group and pid not in stopped:
                self._stop(pid, group)
        return len(stopped)

    def registered(self, pid: int, lane_index: int) -> None:
        """A new process of lane `lane_index`: stopped at once when another lane holds its GPU."""
        holder = self._holder.get(self.group(lane_index))
        if holder is not None and holder[0] != lane_index:
            self._stop(pid, self.group(lane_index))

    def forget(self, pid: int, lane_index: int) -> None:
        """A process that ends or leaves: continued first if a turn had stopped it."""
        stopped = self._stopped.get(self.group(lane_index))
        if stopped is not None and pid in stopped:
            stopped.discard(pid)
            _send(pid, pid, _leads(pid), signal.SIGCONT)

    def give(self, lane_index: int) -> None:
        """Lane `lane_index` leaves its turn (the outermost hold): the processes it stopped go on."""
        group = self.group(lane_index)
        holder = self._holder.get(group)
        if holder is None or holder[0] != lane_index:
            return
        if holder[1] > 1:
            self._holder[group] = (lane_index, holder[1] - 1)
            return
        del self._holder[group]
        turn = time.monotonic() - self._turn_since.pop(group, time.monotonic())
        for lane in self._group_lanes(group):
            if lane != lane_index:
                self._waited[lane] = self._waited.get(lane, 0.0) + turn
        self._resume(group)
        self._free.notify_all()

    def stopped_seconds(self, lane_index: int) -> float:
        """How long other lanes' turns have kept lane `lane_index`'s processes stopped, up to now."""
        group = self.group(lane_index)
        holder = self._holder.get(group)
        ongoing = (
            time.monotonic() - self._turn_since[group]
            if holder is not None and holder[0] != lane_index and group in self._turn_since
            else 0.0
        )
        return self._waited.get(lane_index, 0.0) + ongoing

    def _group_lanes(self, group: int) -> range:
        return range(group * self.lanes_per_gpu, (group + 1) * self.lanes_per_gpu)

    def resume_all(self) -> None:
        for group in list(self._stopped):
            self._resume(group)

    def close(self) -> None:
        self.resume_all()
        self._holder.clear()
        self._free.notify_all()

    def _stop(self, pid: int, group: int) -> None:
        if _send(pid, pid, _leads(pid), signal.SIGSTOP):
            self._stopped.setdefault(group, set()).add(pid)

    def _resume(self, group: int) -> None:
        for pid in self._stopped.pop(group, set()):
            _send(pid, pid, _leads(pid), signal.SIGCONT)


def _leads(pid: int) -> bool:
    """Whether `pid` leads a process group of its own (not ours)."""
    try:
        group = os.getpgid(pid)
    except OSError:
        return False
    return group == pid and group != os.getpgrp()


@dataclasses.dataclass(frozen=True)
class LaneQuiet:
    """A run's quiet host as one lane holds it: `hold()` is `host.hold(lane)`."""

    host: QuietHost
    lane_index: int

    def hold(self) -> Any:
        return self.host.hold(self.lane_index)
