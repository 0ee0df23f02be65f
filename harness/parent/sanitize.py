"""Memory safety under compute-sanitizer: one small forward of a correct candidate, in a process of
its own, run by the tool (memcheck by default; racecheck, initcheck, synccheck by config).

This module is the parent's side: `sanitize` finds the tool, runs `compute-sanitizer --tool T python
-m harness.worker.sanitized JOB` for each configured tool under its time limit, and reads the tool's
report: any error is the flag unsafe-memory, with the first error line as its reason. The forward
itself runs in `harness.worker.sanitized`, with the caching allocator off (set here), so every
tensor is an allocation of its own and a write past one lands outside any allocation, where
memcheck sees it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from harness.core import protocol as P
from harness.core.config import Device, SanitizerTool, Switch
from harness.core.records import SanitizerOutcome, SanitizerResult, to_dict
from harness.core.status import Code, Finding
from harness.parent.quiet import QuietHost
from harness.parent.scratch import RunScratch
from harness.parent.sessions import end_session
from harness.parent.spares import SpareSlot

ROOT = Path(__file__).resolve().parents[2]  # the folder the harness package sits in (on the child's PYTHONPATH)
ERRORS_EXIT = 86  # the tool's exit code when it found errors (--error-exitcode)
PADDING = 1 << 20  # bytes memcheck leaves unallocated after every allocation
_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY:.*?(\d+) errors?")
_PREFIX = "========= "
# About how many times slower a forward runs under memcheck than its timed call, as measured on an H200
# (docs/measurements.md): 130x to 360x over the corpus's slow kernels (l1_p34: a 370 ms forward in 134 s)
SLOWDOWN = 300


@dataclasses.dataclass(frozen=True)
class Cut:
    """The sizes a tool's forward runs at, when the candidate's timed call says the other-size trial's would be slow."""

    sizes: dict[str, Any]  # the module constants for the forward under the tool
    note: str = ""  # what was cut and why, or why nothing could be ("" when nothing was expected to be slow)
    cut: bool = False  # batch_size was cut


def bounded(sizes: dict[str, Any], call_ms: float, max_forward_s: float) -> Cut:
    """The other-size trial's `sizes`, with batch_size cut in proportion when the candidate's timed call
    (`call_ms`, at the problem's own size) times SLOWDOWN would pass `max_forward_s` under the tool; a
    note says so, or says why nothing could be cut. 0 for either: the sizes as they are."""
    expected_s = SLOWDOWN * call_ms / 1e3
    if max_forward_s <= 0 or call_ms <= 0 or expected_s <= max_forward_s:
        return Cut(dict(sizes))
    why = (
        f"its {call_ms:.3g} ms timed call x {SLOWDOWN} would take about {expected_s:.3g} s under the tool "
        f"(sanitizer.max_forward_s={max_forward_s:g})"
    )
    batch = sizes.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 1:
        return Cut(dict(sizes), f"not cut: {why}, and the trial's sizes have no batch_size above 1 to cut")
    smaller = max(1, int(batch * max_forward_s / expected_s))
    return Cut({**sizes, "batch_size": smaller}, f"at batch_size={smaller}, cut from {batch}: {why}", cut=True)


def find_tool(path: str) -> Optional[str]:
    """The compute-sanitizer executable: `path` when set, else on PATH, in $CUDA_HOME/bin, or in
    /usr/local/cuda/bin; None when there is none."""
    if path:
        return path if os.access(path, os.X_OK) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        candidate = Path(home, "bin", "compute-sanitizer") if home else None
        if candidate is not None and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def sanitize(
    tool: Optional[str],
    tools: tuple[str, ...],
    timeout: float,
    job: P.SanitizeJob,
    env: dict[str, str],
    scratch: Path,
    spare: Optional["Prestarted"] = None,
    runner: Optional["ToolRunner"] = None,
) -> tuple[tuple[SanitizerResult, ...], list[Finding]]:
    """Run each of `tools` over one forward of the candidate `job` describes (the first tool's
    run on `spare` when it is that tool's and still alive), through `runner` (which a stopped run
    kills). Returns the runs and the unsafe-memory findings (the first error line of each tool that
    found any)."""
    runner = runner if runner is not None else ToolRunner()
    if tool is None:
        return tuple(
            SanitizerResult(
                t,
                SanitizerOutcome.SKIPPED,
                "compute-sanitizer was not found (sanitizer.path, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)",
            )
            for t in tools
        ), []
    job_path = scratch / "sanitize-job.json"
    job_path.write_text(json.dumps(to_dict(job)))
    runs, found = [], []
    for index, name in enumerate(tools):
        ready = spare is not None and index == 0 and spare.name == name and spare.proc.poll() is None
        run = (
            spare.run(job, timeout)
            if ready and spare is not None
            else runner.run(tool, name, timeout, job_path, env, scratch)
        )
        runs.append(run)
        if run.outcome is SanitizerOutcome.ERRORS:
            found.append((Code.UNSAFE_MEMORY, f"compute-sanitizer {name}: {run.detail}"))
    return tuple(runs), found


def _start_tool(
    tool: str, name: str, job: str, env: dict[str, str], scratch: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    """`compute-sanitizer --tool name` over the forward (`harness.worker.sanitized`), its output to a log in `scratch`.
    `job`: the job file's path, or "-": the child readies torch and the device under the tool,
    then reads its job from stdin (a prestarted run, `Prestarted`)."""
    # memcheck: a padding after every allocation, so a write just past one buffer does not land
    # unseen in its neighbour
    padding = ["--padding", str(PADDING)] if name == SanitizerTool.MEMCHECK else []
    command = [
        tool,
        "--tool",
        name,
        *padding,
        "--error-exitcode",
        str(ERRORS_EXIT),
        "--print-limit",
        "20",
        sys.executable,
        "-m",
        "harness.worker.sanitized",
        job,
    ]
    full_env = {
        **os.environ,
        **env,
        "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    log_path = scratch / f"sanitize-{name}.log"
    with open(log_path, "wb") as log:
        stdin = subprocess.PIPE if job == "-" else subprocess.DEVNULL
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            cwd=scratch,
            env=full_env,
            start_new_session=True,
        )
    return proc, log_path


def _finish_tool(
    name: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float, started: float
) -> SanitizerResult:
    """Wait for a tool run (its job already given) up to `timeout`, and read its report."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return SanitizerResult(
            name,
            SanitizerOutcome.TIMEOUT,
            f"no verdict within sanitizer.timeout={timeout:g} s",
            round(time.monotonic() - started, 2),
        )
    except BaseException:
        _kill(proc)
        raise
    seconds = round(time.monotonic() - started, 2)
    return read_report(name, code, log_path.read_text(errors="replace"), seconds)


class ToolRunner:
    """Starts tool runs and keeps them until they end: `kill()` ends every one still running (a
    stopped run). They are never stopped while a lane times: compute-sanitizer stopped with SIGSTOP
    and continued did not finish (measured on an H100 and an H200, docs/performance.md)."""

    def __init__(self) -> None:
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._killed = False

    def run(
        self, tool: str, name: str, timeout: float, job_path: Path, env: dict[str, str], scratch: Path
    ) -> SanitizerResult:
        started = time.monotonic()
        proc, log_path = _start_tool(tool, name, str(job_path), env, scratch)
        with self._lock:
            self._running.add(proc)
            if self._killed:
                _kill(proc)
        try:
            return _finish_tool(name, proc, log_path, timeout, started)
        finally:
            with self._lock:
                self._running.discard(proc)

    def kill(self) -> None:
        with self._lock:
            self._killed = True
            running = list(self._running)
        for proc in running:
            _kill(proc)


@dataclasses.dataclass
class Prestarted:
    """A run of the first tool started before its candidate: the tool, Python, torch and the CUDA
    context come up under it while the lane does other work (background for the quiet host), and
    the candidate's job goes to its stdin when a candidate passes its checks. It has run no
    candidate code, and serves one job."""

    name: str  # the tool
    proc: subprocess.Popen[bytes]
    log_path: Path
    scratch: Path  # its working folder, removed with it
    quiet: QuietHost  # the run's quiet host, which pins it with the background work while it waits (never stops it)

    @classmethod
    def start(
        cls, tool: str, name: str, env: dict[str, str], scratch: RunScratch, quiet: Optional[QuietHost] = None
    ) -> "Prestarted":
        """Start it in a folder of the run's `scratch`, as background work for `quiet` that is never
        stopped (a compute-sanitizer run stopped and continued did not finish)."""
        host = quiet if quiet is not None else QuietHost()
        folder = scratch.make(f"sanitize-spare-{name}-")
        proc, log_path = _start_tool(tool, name, "-", env, folder)
        host.register_background(proc, stoppable=False)
        return cls(name, proc, log_path, folder, host)

    def run(self, job: P.SanitizeJob, timeout: float) -> SanitizerResult:
        """Hand it `job` and wait for its report (the limit counts from now)."""
        self.quiet.unregister(self.proc)
        if self.proc.stdin is None:
            raise RuntimeError("a prestarted sanitizer run has no stdin")
        started = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(to_dict(job)).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:  # it ended while it waited: read what it said
            pass
        try:
            return _finish_tool(self.name, self.proc, self.log_path, timeout, started)
        finally:
            self.discard()

    def discard(self) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)


def read_report(name: str, code: int, text: str, seconds: float = 0.0) -> SanitizerResult:
    """A tool run's outcome from its exit code and output: errors (with the first error and where
    it happened), clean, or failed (the candidate's forward did not complete under the tool)."""
    counts = [int(m.group(1)) for m in _SUMMARY.finditer(text)]
    if code == ERRORS_EXIT or any(counts):
        return SanitizerResult(name, SanitizerOutcome.ERRORS, first_error(text), seconds)
    if code == 0 and "[sanitize] forward ran" in text:
        return SanitizerResult(name, SanitizerOutcome.CLEAN, f"{counts[0] if counts else 0} errors", seconds)
    tail = next(
        (line.strip() for line in reversed(text.splitlines()) if line.strip() and not line.startswith(_PREFIX)), ""
    )
    return SanitizerResult(
        name, SanitizerOutcome.FAILED, f"exit code {code}: {tail[:200]}" if tail else f"exit code {code}", seconds
    )


def first_error(text: str) -> str:
    """The tool's first reported error, with the kernel it happened in: one line."""
    lines = [line[len(_PREFIX) :].strip() for line in text.splitlines() if line.startswith(_PREFIX)]
    for i, line in enumerate(lines):
        if not line or line.startswith(
            (
                "COMPUTE-SANITIZER",
                "ERROR SUMMARY",
                "RACECHECK SUMMARY",
                "Saved host backtrace",
                "Host Frame",
                "Program hit",
            )
        ):
            continue
        where = next((later for later in lines[i + 1 : i + 4] if later.startswith("at ")), "")
        return " ".join(f"{line} {where}".split())[:300]
    return "errors reported (no error line found in the tool's output)"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    end_session(proc.pid)
    proc.wait()


class LaneSanitizer:
    """compute-sanitizer for one problem on one lane: one eval forward of a candidate under each
    tool, at the other-size trial's sizes; a source run again on the same inputs (a resubmission)
    gets the earlier runs, since the tools would say the same. Its runs work in folders of the
    run's `scratch`; a run started ahead is background work for the run's quiet host `quiet`, kept in
    `spares`: the lane's slot (its launcher's), which outlives this problem, else one of its own."""

    def __init__(
        self,
        cfg: Any,
        device: str,
        env: dict[str, str],
        prestart: bool = False,
        *,
        scratch: RunScratch,
        quiet: Optional[QuietHost] = None,
        spares: Optional[SpareSlot[Prestarted]] = None,
    ) -> None:
        # cfg: the problem's harness.core.config.Config
        self.cfg, self.device, self.env = cfg, device, env
        self.scratch, self.quiet = scratch, quiet
        # a source's sanitizer runs, for a resubmission
        self.runs: dict[tuple[Any, ...], tuple[tuple[SanitizerResult, ...], list[Finding]]] = {}
        self.prestart_runs = prestart  # keep the first tool's next run started ahead (workers.prestart)
        self._own_slot = spares is None  # a slot of its own ends with it; the lane's outlives it
        self.slot: SpareSlot[Prestarted] = spares if spares is not None else SpareSlot()
        self.runner = ToolRunner()  # its runs, which a stopped run kills

    def _spare_key(self, tool: str) -> tuple[Any, ...]:
        """What a run started ahead must have been started for to serve this lane's next candidate."""
        return (tool, self.cfg.sanitizer.tools[0], tuple(sorted(self.env.items())))

    def prestart(self) -> None:
        """Start the first tool's next run ahead, when prestarting and none is waiting (a CUDA lane
        with the sanitizer on and the tool found)."""
        cfg = self.cfg.sanitizer
        if not self.prestart_runs or self.device != Device.CUDA or not self.wanted() or not cfg.tools:
            return
        tool = find_tool(cfg.path)
        if tool is not None:
            name, env, scratch, quiet = cfg.tools[0], self.env, self.scratch, self.quiet
            self.slot.fill(self._spare_key(tool), lambda: Prestarted.start(tool, name, env, scratch, quiet))

    def close(self) -> None:
        """End a run started ahead and never used, when the slot is this problem's own (the lane's
        serves the lane's next problem)."""
        if self._own_slot:
            self.slot.discard()

    def kill(self) -> None:
        """End every run of this lane now, the one started ahead too (a stopped run)."""
        self.runner.kill()
        self.slot.discard()

    def wanted(self) -> bool:
        setting = self.cfg.sanitizer.enabled
        return setting == Switch.ON or (setting == Switch.AUTO and self.device == Device.CUDA)

    def run(
        self, job: P.SanitizeJob, source_hash: str, name: str, call_ms: float = 0.0
    ) -> tuple[tuple[SanitizerResult, ...], list[Finding]]:
        """The runs over candidate `name` (the forward `job` describes, harness.parent.setting) and
        their unsafe-memory findings. `call_ms`: the candidate's timed call, which may cut the forward's
        batch_size (`bounded`); a cut forward that fails to run is run again at the job's own sizes."""
        cfg = self.cfg.sanitizer
        if self.device != Device.CUDA:
            return tuple(
                SanitizerResult(t, SanitizerOutcome.SKIPPED, "compute-sanitizer checks CUDA runs only")
                for t in cfg.tools
            ), []
        cut = bounded(job.sizes, call_ms, cfg.max_forward_s)
        if not cut.note:
            return self._run(job, source_hash, name)
        runs, found = self._run(dataclasses.replace(job, sizes=cut.sizes), source_hash, name)
        if cut.cut and any(r.outcome is SanitizerOutcome.FAILED for r in runs):
            failed = next(r for r in runs if r.outcome is SanitizerOutcome.FAILED)
            runs, found = self._run(job, source_hash, name)
            return _noted(runs, f"the forward {cut.note} failed ({failed.detail[:120]}); run again uncut"), found
        return _noted(runs, cut.note), found

    def _run(
        self, job: P.SanitizeJob, source_hash: str, name: str
    ) -> tuple[tuple[SanitizerResult, ...], list[Finding]]:
        """`run` at the job's sizes."""
        cfg = self.cfg.sanitizer
        key = (source_hash, json.dumps(job.sizes, sort_keys=True), job.seed, tuple(cfg.tools))
        if key in self.runs:  # the same source, on the same inputs: the tools would say the same
            runs, found = self.runs[key]
            return tuple(
                dataclasses.replace(r, detail=f"{r.detail} (the same source's run earlier on this lane)", seconds=0.0)
                for r in runs
            ), found
        cwd = self.scratch.make(f"sanitize-{name[:20]}-")
        tool = find_tool(cfg.path)
        spare = self.slot.take(self._spare_key(tool)) if tool is not None and cfg.tools else None
        try:
            result = sanitize(tool, cfg.tools, cfg.timeout, job, self.env, cwd, spare, self.runner)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
            if spare is not None:
                spare.discard()
            self.prestart()  # the next candidate's
        # a timeout or a failed run is tried again
        if all(r.outcome in (SanitizerOutcome.CLEAN, SanitizerOutcome.ERRORS) for r in result[0]):
            self.runs[key] = result
        return result


def _noted(runs: tuple[SanitizerResult, ...], note: str) -> tuple[SanitizerResult, ...]:
    """`runs`, each detail followed by `note` (at which sizes the forward ran, and why)."""
    return tuple(dataclasses.replace(r, detail=f"{r.detail}; {note}") for r in runs)
