"""What does the harness's data plane cost on big problems? Memory, scratch disk and time per problem.

    python3 benchmarks/dataplane.py [--device cuda|cpu] [--set KEY=VALUE ...] [--no-timing] [--timeout S]
                                    [--out DIR] [--keep] PROBLEM_FILE_OR_DIR...
    python3 benchmarks/dataplane.py --fetch-from KERNELBENCH_GIT_DIR_OR_CHECKOUT [PROBLEM_FILE_OR_DIR...]

Each problem file (a folder means every *.py under it, recursively, sorted) gets a scratch copy of
its own: problems/<level>/<name>.py, unchanged, and solutions/<name>/null.py, the problem itself
with `Model` renamed `ModelNew` (a candidate that is the reference, so it must come out correct with
a speedup near 1). `python3 run.py --problem <name>` then evaluates it in a subprocess with
TMPDIR set to an empty scratch folder, so every temporary file the run makes lands there. Every
0.25 s it samples:

  peak parent RSS   VmHWM of the run.py process (its workers not included)
  peak device       GPU memory.used (nvidia-smi, summed over GPUs) minus its value before the run
  peak scratch      bytes on disk under the run's TMPDIR (walked in a background thread)

After the run it reads the records (the candidate's status, speedup, wall and phase seconds; the
reference's wall seconds), the bytes left under TMPDIR (should be 0) and the size of the results
folder. It prints a markdown table, one row per problem, and with --out DIR writes table.md and
results.jsonl there after every problem, so a killed benchmark keeps what it measured.

--fetch-from copies the KernelBench problems listed in benchmarks/kernelbench.txt out of a git
directory (or a checkout) of the public KernelBench repository into benchmarks/kernelbench/.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.core.records import CandidateRecord, ReferenceRecord  # noqa: E402
from harness.core.schema import LineError, decode_line  # noqa: E402

KERNELBENCH_LIST = ROOT / "benchmarks" / "kernelbench.txt"
KERNELBENCH_DIR = ROOT / "benchmarks" / "kernelbench"
POLL_SECONDS = 0.25
MB = 1e6


@dataclasses.dataclass
class Result:
    problem: str
    exit: Optional[int] = None  # run.py's exit code; None when it was killed at the timeout
    status: str = ""  # the candidate's status ("timeout" or "no record" when there is none)
    reason: str = ""  # the candidate record's one-line reason
    wall_s: float = 0.0  # wall time of run.py
    reference_s: Optional[float] = None  # the reference's wall time in its judge
    candidate_s: Optional[float] = None  # the candidate's wall time, seen by the parent
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # the candidate worker's phases
    speedup: Optional[float] = None
    peak_rss_mb: float = 0.0
    peak_device_mb: Optional[float] = None
    peak_scratch_mb: float = 0.0
    scratch_left_mb: float = 0.0
    results_mb: float = 0.0


def disk_bytes(folder: Path) -> int:
    """Bytes on disk under `folder` (allocated blocks, so sparse files count for what they use)."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass  # removed while we walked
    return total


def peak_rss_bytes(pid: int) -> Optional[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def gpu_used_mb() -> Optional[float]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return float(sum(float(v) for v in out.split()))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


class DiskSampler(threading.Thread):
    """Walks a folder until stopped, keeping the largest total seen."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder, self.peak, self._done = folder, 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            self.peak = max(self.peak, disk_bytes(self.folder))

    def stop(self) -> int:
        self._done.set()
        self.join()
        self.peak = max(self.peak, disk_bytes(self.folder))
        return self.peak


def null_candidate(problem_text: str) -> str:
    """The problem file as a candidate: every `Model` (class, constructor and super() references) renamed `ModelNew`."""
    return re.sub(r"\bModel\b", "ModelNew", problem_text)


def problem_files(args: list[str]) -> list[Path]:
    files: list[Path] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.py") if not p.name.startswith("_"))
        elif path.suffix == ".py" and path.is_file():
            files.append(path)
        else:
            sys.exit(f"error: {arg}: not a problem file or folder")
    return files


def stage(problem: Path, scratch: Path) -> str:
    """Lay out problems/<level>/<name>.py and solutions/<name>/null.py under `scratch`; the problem's name."""
    level = problem.parent.name if re.fullmatch(r"level\d+", problem.parent.name) else "level0"
    (scratch / "problems" / level).mkdir(parents=True)
    shutil.copyfile(problem, scratch / "problems" / level / problem.name)
    (scratch / "solutions" / problem.stem).mkdir(parents=True)
    (scratch / "solutions" / problem.stem / "null.py").write_text(null_candidate(problem.read_text(encoding="utf-8")), encoding="utf-8")
    (scratch / "tmp").mkdir()
    return problem.stem


def read_outcome(result: Result, results_dir: Path) -> None:
    """Fill `result` from the run's records (the last candidate and reference records found; a line of an
    earlier schema version is read as today's)."""
    for records in sorted(results_dir.glob("*/records.jsonl")):
        for line in records.read_text(encoding="utf-8").splitlines():
            try:
                record = decode_line(line)
            except LineError:
                continue  # a half-written last line
            if isinstance(record, ReferenceRecord):
                result.reference_s = record.provenance.wall_seconds
            elif isinstance(record, CandidateRecord):
                result.status = record.decision.status.value
                result.reason = record.decision.reason
                result.speedup = record.timing.speedup
                result.candidate_s = record.provenance.wall_seconds
                result.phases = dict(record.provenance.phase_seconds)


def measure(problem: Path, device: str, overrides: list[str], timeout: float, keep: bool) -> Result:
    scratch = Path(tempfile.mkdtemp(prefix=f"dataplane-{problem.stem[:24]}-"))
    try:
        name = stage(problem, scratch)
        tmp, results_dir = scratch / "tmp", scratch / "results"
        command = [sys.executable, "run.py", "--problem", name, "--set", f"problems_dir={scratch / 'problems'}",
                   "--set", f"solutions_dir={scratch / 'solutions'}", "--results", str(results_dir), "--device", device, "--quiet"]
        for override in overrides:
            command += ["--set", override]
        result = Result(problem=name)
        gpu_before = gpu_used_mb() if device == "cuda" else None
        gpu_peak = gpu_before
        disk = DiskSampler(tmp)
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr_lines: list[str] = []
        drain = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        disk.start()
        rss, timed_out = 0, False
        while proc.poll() is None:
            rss = peak_rss_bytes(proc.pid) or rss
            if gpu_before is not None:
                used = gpu_used_mb()
                gpu_peak = max(gpu_peak or 0.0, used if used is not None else 0.0)
            if time.perf_counter() - started > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(POLL_SECONDS)
        result.wall_s = time.perf_counter() - started
        drain.join(timeout=5)
        result.exit = None if timed_out else proc.returncode
        result.peak_rss_mb = rss / MB
        result.peak_device_mb = None if gpu_before is None or gpu_peak is None else gpu_peak - gpu_before
        result.peak_scratch_mb = disk.stop() / MB
        result.scratch_left_mb = disk_bytes(tmp) / MB
        result.results_mb = disk_bytes(results_dir) / MB
        read_outcome(result, results_dir)
        if not result.status:
            result.status = "timeout" if timed_out else "no record"
            tail = "".join(stderr_lines[-5:]).strip()
            if tail:
                print(f"{name}: {tail}", file=sys.stderr)
        if keep:
            print(f"{name}: scratch kept at {scratch}", file=sys.stderr)
        return result
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


def _num(value: Optional[float], digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def table(results: list[Result]) -> str:
    head = ["problem", "exit", "status", "wall s", "reference s", "candidate load/construct/check/time s",
            "peak parent RSS MB", "peak device MB", "peak scratch MB", "scratch left MB", "results MB", "speedup"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|"]
    for r in results:
        phases = "/".join(_num(r.phases.get(p), 2) or "-" for p in ("load", "construct", "check", "time"))
        cells = [r.problem, "" if r.exit is None else str(r.exit), r.status, _num(r.wall_s), _num(r.reference_s), phases,
                 _num(r.peak_rss_mb, 0), _num(r.peak_device_mb, 0), _num(r.peak_scratch_mb), _num(r.scratch_left_mb),
                 _num(r.results_mb, 2), _num(r.speedup, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fetch_kernelbench(source: Path) -> None:
    """Copy the files listed in kernelbench.txt out of a KernelBench git directory or checkout."""
    listed = [line.strip() for line in KERNELBENCH_LIST.read_text().splitlines() if line.strip() and not line.startswith("#")]
    for relative in listed:
        target = KERNELBENCH_DIR / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        checkout = source / "KernelBench" / relative
        if checkout.is_file():
            shutil.copyfile(checkout, target)
        else:
            shown = subprocess.run(["git", "--git-dir", str(source), "show", f"HEAD:KernelBench/{relative}"], capture_output=True)
            if shown.returncode:
                sys.exit(f"error: {relative} is neither in {source}/KernelBench nor in its git HEAD: {shown.stderr.decode().strip()}")
            target.write_bytes(shown.stdout)
    print(f"copied {len(listed)} KernelBench problems to {KERNELBENCH_DIR}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", metavar="PROBLEM_FILE_OR_DIR")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if shutil.which("nvidia-smi") else "cpu")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="passed on to run.py")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only (timing.enabled=false)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per problem before run.py is killed")
    parser.add_argument("--out", metavar="DIR", help="write table.md and results.jsonl here")
    parser.add_argument("--keep", action="store_true", help="keep each problem's scratch folder")
    parser.add_argument("--fetch-from", metavar="GITDIR", help="first copy the problems listed in benchmarks/kernelbench.txt from a KernelBench git dir or checkout")
    args = parser.parse_args()
    if args.fetch_from:
        fetch_kernelbench(Path(args.fetch_from))
        if not args.problems:
            return 0
    elif not args.problems:
        parser.error("name at least one problem file or folder")
    overrides = args.set + (["timing.enabled=false"] if args.no_timing else [])
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.jsonl").write_text("")
    results: list[Result] = []
    for problem in problem_files(args.problems):
        print(f"{problem} ...", file=sys.stderr, flush=True)
        results.append(measure(problem, args.device, overrides, args.timeout, args.keep))
        if out:
            with open(out / "results.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(dataclasses.asdict(results[-1])) + "\n")
            (out / "table.md").write_text(table(results))
    print(table(results), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
