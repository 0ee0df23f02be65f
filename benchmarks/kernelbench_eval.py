"""KernelBench's own eval on the corpus draw of benchmarks/kbcorpus.py, run the way KernelBench's
scripts/eval_from_generations.py runs it, with its verdicts per GPU-hour and the kernels whose verdict differs
from ours.

    python3 benchmarks/kernelbench_eval.py [--corpus DIR] [--fraction F --seed N] [--problems l1_p1 ...]
        [--out DIR] [--results FILE] [--report FILE] [--builds DIR] [--eval-src DIR] [--budget-s S]
        [--timeout-s 180] [--workers N] [--gpu-arch auto|Hopper|...|none] [--ours STATE.jsonl [--ours-profile loop]]
        [--list | --report-only]

KernelBench's code is not part of this repository: benchmarks/kernelbench_fetch.sh copies the modules that
`eval_kernel_against_ref` needs (ScalingIntelligence/KernelBench, src/kernelbench/, the commit in
EVAL_SRC/COMMIT) into the git-ignored benchmarks/kernelbench/eval_src/ (--eval-src), and they run unchanged.
Third-party modules they import but the eval does not use (pydantic, requests, dotenv, tqdm, openai, litellm)
are replaced by stand-ins where missing (stand_ins(): each line names those used).

The draw: kbcorpus.py's own corpus_kernels and select (the same arguments draw the same kernels; the wrapper's
`--fraction 0.23 --seed 7` is 61 kernels of 46 problems). A kernel's reference is
CORPUS/problems/kb_l<L>/l<L>_p<N>.py, its source CORPUS/solutions/l<L>_p<N>/<name>.py.

One call does what KernelBench's pipeline does, for the selected kernels the results file has no verdict for:
1. build phase: every kernel's compile cache is built first, in a pool of --workers CPU processes (spawned and
   reused, as compile.batch_compile's pool is), each with KernelBench's build_compile_cache(source,
   build_dir=BUILDS/<problem>/<name>); TORCH_CUDA_ARCH_LIST is the GPU's named architecture (set_gpu_arch's
   names; --gpu-arch auto asks nvidia-smi). Timed as a phase;
2. eval phase: each kernel in a fresh Python process on cuda:0, eval_kernel_against_ref(reference, source,
   num_correct_trials=5, num_perf_trials=100, measure_performance=True, timing_method="cuda_event",
   build_dir=the same folder, device=cuda:0), bounded by --timeout-s (KernelBench's default 180 s). That call
   also times the reference (its excessive-speedup check: ref_runtime); a version that does not is timed with
   timing.measure_ref_program_time. An exception is recorded as evaluate_single_sample records it (compiled
   false, cuda_error or other_error), a kernel past its timeout as "Evaluation timed out" (its build folder
   removed, as KernelBench does). The worker's output is OUT/logs/<problem>/<name>.log (the build's
   <name>.build.log).

Resumable and bounded: --budget-s bounds the call's two phases together. The build phase stops its pool when the
budget ends; a kernel is not started with less than --min-start-s left, and one stopped by the budget gets no
line, so the next call (same --results) does it again. Builds live in BUILDS (default
$TMPDIR/kernelbench-eval-builds), kept for a later call on the same machine; remove it for a cold measurement.
The build locks that builds stopped by the budget left there are removed when the next build phase starts.

The results file (--results, default OUT/results.jsonl) has a line per evaluated kernel (kind "sample", the last
line of a kernel wins: problem, kernel, verdict, judged, compiled, correctness, reason, runtime_ms,
ref_runtime_ms, speedup, seconds, build, rebuilt_in_eval, error metadata, ...) and one per call (kind "call":
its build and eval phases' seconds and epochs, counts, how it stopped). The report (--report, default
OUT/report.md; printed too): kernels judged, the wall time (every call's build phase plus eval phase),
verdicts per GPU-hour (judged over wall hours), the verdicts, and with --ours (a state file of
benchmarks/kbcorpus.py, lines of --ours-profile) the kernels whose verdict (correct or not) differs between
KernelBench's eval and ours. The eval needs CUDA: on a CPU-only machine only --list and --report-only are
useful.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib.util
import inspect
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
EVAL_SRC = ROOT / "benchmarks" / "kernelbench" / "eval_src"
STAND_IN_MODULES = ("dotenv", "tqdm", "openai", "litellm", "requests", "pydantic")
# set_gpu_arch's names by compute capability (torch's cpp_extension knows the same names)
GPU_ARCHS = {
    "7.0": "Volta",
    "7.5": "Turing",
    "8.0": "Ampere",
    "8.6": "Ampere",
    "8.7": "Ampere",
    "8.9": "Ada",
    "9.0": "Hopper",
    "10.0": "Blackwell",
    "10.3": "Blackwell",
    "12.0": "Blackwell",
    "12.1": "Blackwell",
}
TIMED_OUT = "Evaluation timed out"  # KernelBench's metadata for a sample past its timeout
ERROR_KEYS = ("compilation_error", "runtime_error", "cuda_error", "other_error", "gpu_error", "error")


def corpus_module() -> Any:
    """benchmarks/kbcorpus.py (imported on first use: the build and eval processes do without it)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import kbcorpus

    return kbcorpus


# ---------------------------------------------------------------- the draw


@dataclasses.dataclass(frozen=True)
class Sample:
    kernel: str  # l1_p1/claude35sonnet_b14c70 (kbcorpus's kernel id)
    problem: str  # kb_l1/l1_p1
    level: int
    reference: Path
    source: Path
    corpus_verdict: str = "?"  # kb_verdicts.json: KernelBench's verdict when the corpus was made

    @property
    def folder(self) -> str:
        """<problem>/<name>: where its build and logs go."""
        return self.kernel

    def build_dir(self, builds: Path) -> Path:
        return builds / self.kernel


def draw(corpus: Path, fraction: float = 1.0, seed: int = 0, problems: Iterable[str] = ()) -> list[Sample]:
    """The kernels benchmarks/kbcorpus.py selects with the same arguments, in its order."""
    kbc = corpus_module()
    chosen = kbc.select(kbc.corpus_kernels(corpus), fraction, seed, list(problems))
    return [
        Sample(
            k.id,
            k.problem_key,
            k.level,
            corpus / "problems" / f"kb_l{k.level}" / f"{k.problem}.py",
            k.path,
            k.kernelbench,
        )
        for k in chosen
    ]


# ---------------------------------------------------------------- the results file


def read_results(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Sample lines by kernel (the last wins) and call lines in order; a half-written line is skipped."""
    samples: dict[str, dict[str, Any]] = {}
    calls: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(line, dict):
            continue
        if line.get("kind") == "sample" and line.get("kernel"):
            samples[line["kernel"]] = line
        elif line.get("kind") == "call":
            calls.append(line)
    return samples, calls


def append_line(path: Path, line: dict[str, Any]) -> None:
    """One JSON line, flushed and fsync'ed (benchmarks/kernelbench_levels.py's, in the folder made first)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from kernelbench_levels import append_line as append

    path.parent.mkdir(parents=True, exist_ok=True)
    append(path, line)


def pending(samples: list[Sample], done: dict[str, dict[str, Any]]) -> list[Sample]:
    """The samples without a verdict yet (no line, or a line that is not judged)."""
    return [s for s in samples if not (done.get(s.kernel) or {}).get("judged")]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


# ---------------------------------------------------------------- stand-ins for KernelBench's unused imports


class _StandInModel:
    """pydantic.BaseModel as KernelExecResult uses it: annotated fields with defaults, keyword construction."""

    def __init__(self, **data: Any) -> None:
        for cls in reversed(type(self).__mro__):
            for name in inspect.get_annotations(cls):
                if name in cls.__dict__:
                    setattr(self, name, copy.deepcopy(cls.__dict__[name]))
        for name, value in data.items():
            setattr(self, name, value)

    def model_dump(self) -> dict[str, Any]:
        return dict(vars(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class _StandInTqdm:
    def __init__(self, iterable: Any = None, *args: Any, **kwargs: Any) -> None:
        self.iterable = [] if iterable is None else iterable

    def __iter__(self) -> Any:
        return iter(self.iterable)

    def __enter__(self) -> _StandInTqdm:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _unavailable(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a stand-in here (benchmarks/kernelbench_eval.py): the eval does not use it")

    return call


STAND_INS: dict[str, Callable[[], dict[str, Any]]] = {
    "dotenv": lambda: {"load_dotenv": lambda *a, **k: False},
    "tqdm": lambda: {"tqdm": _StandInTqdm},
    "openai": lambda: {"OpenAI": _unavailable("openai.OpenAI")},
    "litellm": lambda: {"completion": _unavailable("litellm.completion")},
    "requests": dict,
    "pydantic": lambda: {"BaseModel": _StandInModel},
}


def stand_ins() -> list[str]:
    """A stand-in module for each of KernelBench's third-party imports that the eval does not need and this
    Python lacks; the names stood in."""
    used = []
    for name in STAND_IN_MODULES:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        module = types.ModuleType(name)
        module.__dict__.update(STAND_INS[name]())
        sys.modules[name] = module
        used.append(name)
    return used


def import_kernelbench(eval_src: Path) -> tuple[Any, list[str]]:
    """KernelBench's eval module from eval_src (its package kernelbench/), and the stand-ins used."""
    used = stand_ins()
    if str(eval_src) not in sys.path:
        sys.path.insert(0, str(eval_src))
    return importlib.import_module("kernelbench.eval"), used


def kernelbench_commit(eval_src: Path) -> str:
    try:
        return (eval_src / "COMMIT").read_text().split()[0]
    except (OSError, IndexError):
        return "unknown"


def jsonable(value: Any, limit: int = 4000) -> Any:
    """Metadata as JSON: exceptions and other objects as their text, long text cut."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, limit) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def result_fields(result: Any) -> dict[str, Any]:
    """A KernelExecResult's fields (a version without ref_runtime gives -1.0 for it)."""
    return {
        "compiled": bool(getattr(result, "compiled", False)),
        "correctness": bool(getattr(result, "correctness", False)),
        "metadata": jsonable(getattr(result, "metadata", None) or {}),
        "runtime": float(getattr(result, "runtime", -1.0)),
        "runtime_stats": jsonable(getattr(result, "runtime_stats", None) or {}),
        "ref_runtime": float(getattr(result, "ref_runtime", -1.0)),
        "ref_runtime_stats": jsonable(getattr(result, "ref_runtime_stats", None) or {}),
    }


# ---------------------------------------------------------------- the build phase (CPU pool)


@dataclasses.dataclass
class Build:
    ok: Optional[bool]  # None: not finished within --timeout-s
    seconds: float
    error: str = ""


def _own_session() -> None:
    """A build worker leads its own process group, so its compiler processes can be stopped with it."""
    try:
        os.setsid()
    except OSError:
        pass


def build_one(task: tuple[str, str, str, str]) -> tuple[Optional[bool], str, float]:
    """One sample's compile cache, in a pool worker: KernelBench's build_compile_cache (timed alone: a worker's
    first task also imports torch and KernelBench), the worker's output (the compiler's included) in the
    sample's build log."""
    source_path, build_dir, eval_src, log_path = task
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    seconds = 0.0
    with open(log_path, "ab") as log, open(log_path, "a", encoding="utf-8") as text:
        os.dup2(log.fileno(), 1)  # the compilers' output
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):  # Python's
                kb_eval, _ = import_kernelbench(Path(eval_src))
                source = Path(source_path).read_text(encoding="utf-8")
                started = time.monotonic()
                ok, _output, error = kb_eval.build_compile_cache(
                    custom_model_src=source, verbose=False, build_dir=build_dir
                )
                seconds = time.monotonic() - started
        except Exception as e:  # compile_single_sample's last-level catch
            ok, error = False, f"{type(e).__name__}: {e}"
        finally:
            text.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return ok, str(error or "")[:2000], seconds


def spawn_pool(workers: int) -> Any:
    return multiprocessing.get_context("spawn").Pool(workers, initializer=_own_session)


def stop_pool(pool: Any) -> None:
    """Stop a pool at once: each worker's process group (its compilers), then the pool. A worker killed while
    idle dies holding the task queue's lock (it waits for a task with the lock taken), and Pool.terminate then
    waits on that lock for ever (the 2026-11-28 build phase that ran 120 s past its budget): the lock is
    given back first."""
    killed = [w for w in getattr(pool, "_pool", []) if getattr(w, "pid", None)]  # processes; the pool replaces them
    for worker in killed:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + 5
    while time.monotonic() < end and any(w.is_alive() for w in killed):
        time.sleep(0.05)
    lock = getattr(getattr(pool, "_inqueue", None), "_rlock", None)
    if lock is not None:  # free now, or held by a worker that is dead: either way it is free after this
        lock.acquire(block=False)
        lock.release()
    pool.terminate()
    pool.join()


def remove_stale_locks(samples: list[Sample], builds: Path) -> list[Path]:
    """Remove the files `lock` under the samples' build folders: torch's build baton (FileBaton), in the
    extension's folder (TORCH_EXTENSIONS_DIR/<name>), that a build killed at the budget left, and that a later
    build of the folder waits on for ever. None of our builds runs when this is called."""
    removed = []
    for sample in samples:
        for root, _, files in os.walk(sample.build_dir(builds)):
            if "lock" in files:
                path = Path(root) / "lock"
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def build_phase(
    samples: list[Sample],
    args: argparse.Namespace,
    deadline: float,
    pool_factory: Callable[[int], Any] = spawn_pool,
    builder: Callable[[tuple[str, str, str, str]], tuple[Optional[bool], str, float]] = build_one,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Build], bool, dict[str, float]]:
    """Every sample's build, in a pool of args.workers processes, all submitted at once (batch_compile's
    way); a build past --timeout-s is left to run and marked (ok None). The builds finished, whether the
    budget stopped the phase, and the builds it stopped in flight with the seconds each had run: their work is
    lost, and a later call builds them again."""
    if not samples:
        return {}, False, {}
    stale = remove_stale_locks(samples, args.builds)
    if stale:
        print(f"removed {len(stale)} stale build lock(s) left by an interrupted call", file=sys.stderr, flush=True)
    builds: dict[str, Build] = {}
    size = max(1, min(args.workers, len(samples)))
    pool = pool_factory(size)
    stopped = False
    try:
        jobs = {}
        for sample in samples:
            log = args.out / "logs" / f"{sample.folder}.build.log"
            task = (str(sample.source), str(sample.build_dir(args.builds)), str(args.eval_src), str(log))
            jobs[sample.kernel] = pool.apply_async(builder, (task,))
        submitted = clock()
        order = list(jobs)
        freed: list[float] = []  # when a worker came free (a build returned): the pool takes tasks in order

        def started(kernel: str) -> Optional[float]:
            index = order.index(kernel) - size
            return submitted if index < 0 else (freed[index] if index < len(freed) else None)

        waiting = list(order)
        late: list[str] = []  # past their timeout, still running: their worker comes free later
        lost: dict[str, float] = {}
        while waiting:
            if clock() >= deadline:
                stopped = True
                now_s = clock()
                for kernel in [*waiting, *late]:  # had a worker (late ones ran past their timeout): stopped now
                    start = started(kernel)
                    if start is not None:
                        lost[kernel] = round(now_s - start, 2)
                break
            for kernel in [k for k in late if jobs[k].ready()]:
                freed.append(clock())
                late.remove(kernel)
            for kernel in list(waiting):
                job, start = jobs[kernel], started(kernel)
                if job.ready():
                    try:
                        ok, error, seconds = job.get()
                    except Exception as e:  # the task itself failed (a pickling error, a dead worker)
                        ok, error, seconds = False, f"{type(e).__name__}: {e}", clock() - (start or submitted)
                    builds[kernel] = Build(ok, round(seconds, 2), error)
                    freed.append(clock())
                    waiting.remove(kernel)
                elif start is not None and clock() - start > args.timeout_s:  # left running, as batch_compile does
                    builds[kernel] = Build(None, round(clock() - start, 2), "build timed out")
                    waiting.remove(kernel)
                    late.append(kernel)
            if waiting:
                time.sleep(0.1)
    except BaseException:  # interrupted: the builds in flight are stopped, not waited for
        stop_pool(pool)
        raise
    if stopped or any(b.ok is None for b in builds.values()):
        stop_pool(pool)
    else:
        pool.close()
        pool.join()
    return builds, stopped, lost


# ---------------------------------------------------------------- the eval phase (a fresh process per sample)


@dataclasses.dataclass
class Outcome:
    payload: Optional[dict[str, Any]]  # what the worker wrote (None: it wrote nothing)
    seconds: float
    exit: Optional[int]  # None: stopped at its limit
    timed_out: bool = False  # stopped at --timeout-s: KernelBench's "Evaluation timed out"
    cut: bool = False  # stopped because the budget ended: no verdict, done again next call
    log: str = ""
    log_tail: str = ""


def so_files(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.glob("**/*.so")} if folder.is_dir() else {}


def worker_main(job_path: Path, out_path: Path) -> int:
    """The eval of one sample (a fresh process): evaluate_single_sample's call and its last-level catch."""
    job = json.loads(job_path.read_text())
    payload: dict[str, Any] = {"result": None}
    kb_eval, payload["stand_ins"] = import_kernelbench(Path(job["eval_src"]))
    import torch

    device = torch.device(job["device"])
    payload["torch"] = torch.__version__
    payload["device_name"] = torch.cuda.get_device_name(device) if torch.cuda.is_available() else ""
    reference = Path(job["reference"]).read_text(encoding="utf-8")
    source = Path(job["source"]).read_text(encoding="utf-8")
    build_dir = Path(job["build_dir"])
    before = so_files(build_dir)
    try:
        result = kb_eval.eval_kernel_against_ref(
            original_model_src=reference,
            custom_model_src=source,
            num_correct_trials=job["num_correct_trials"],
            num_perf_trials=job["num_perf_trials"],
            measure_performance=True,
            timing_method="cuda_event",
            verbose=False,
            build_dir=str(build_dir),
            device=device,
        )
    except Exception as e:  # evaluate_single_sample's last-level catch
        key = "cuda_error" if "CUDA error" in str(e) else "other_error"
        name = f"{type(e).__module__}.{type(e).__name__}"
        text = f"CUDA Error: {e}" if key == "cuda_error" else f"error: {e}"
        metadata = {key: text, f"{key}_name": name, "device": str(device)}
        result = types.SimpleNamespace(compiled=False, correctness=False, metadata=metadata, runtime=-1.0)
    payload["rebuilt_in_eval"] = so_files(build_dir) != before and bool(so_files(build_dir))
    if result is not None:
        payload["result"] = result_fields(result)
        payload["ref_timing"] = "eval_kernel_against_ref" if payload["result"]["ref_runtime"] > 0 else ""
        if payload["result"]["correctness"] and payload["result"]["ref_runtime"] <= 0:
            timing = importlib.import_module("kernelbench.timing")
            if hasattr(timing, "measure_ref_program_time"):  # a version whose eval does not time the reference
                stats = timing.measure_ref_program_time(
                    job["problem"], reference, num_trials=job["num_perf_trials"], device=device
                )
                if stats:
                    payload["result"]["ref_runtime"] = float(stats["mean"])
                    payload["result"]["ref_runtime_stats"] = jsonable(stats)
                    payload["ref_timing"] = "timing.measure_ref_program_time"
    out_path.write_text(json.dumps(payload))
    return 0


def evaluate(sample: Sample, args: argparse.Namespace, limit: float) -> Outcome:
    """One sample in a fresh Python process on the GPU, stopped (its process group) after `limit` s."""
    jobs = args.out / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    stem = sample.kernel.replace("/", "__")
    job_path, out_path = jobs / f"{stem}.json", jobs / f"{stem}.out.json"
    out_path.unlink(missing_ok=True)
    job = {
        "problem": sample.problem,
        "reference": str(sample.reference),
        "source": str(sample.source),
        "build_dir": str(sample.build_dir(args.builds)),
        "eval_src": str(args.eval_src),
        "device": "cuda:0",
        "num_correct_trials": args.num_correct_trials,
        "num_perf_trials": args.num_perf_trials,
    }
    job_path.write_text(json.dumps(job))
    log_path = args.out / "logs" / f"{sample.folder}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    scratch = args.out / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(job_path), str(out_path)]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=scratch, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            code: Optional[int] = proc.wait(timeout=max(limit, 0.1))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            else:  # what the worker left running in its group (a compiler)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    seconds = time.monotonic() - started
    payload = None
    if out_path.is_file():
        try:
            payload = json.loads(out_path.read_text())
        except json.JSONDecodeError:
            payload = None
    text = log_path.read_text(encoding="utf-8", errors="replace")
    tail = " | ".join([s for s in text.strip().splitlines() if s.strip()][-6:])[-600:]
    timed_out = code is None and limit >= args.timeout_s
    return Outcome(
        payload,
        round(seconds, 2),
        code,
        timed_out=timed_out,
        cut=code is None and not timed_out,
        log=str(log_path.relative_to(args.out)),
        log_tail=tail,
    )


def reason(metadata: dict[str, Any]) -> str:
    """Why KernelBench's eval did not pass a sample, in one line, from its metadata."""
    for key in ERROR_KEYS:
        if metadata.get(key):
            name = metadata.get(f"{key}_name") or ""
            text = " ".join(str(metadata[key]).split())
            return f"{key}: {name + ': ' if name else ''}{text}"[:200]
    if metadata.get("correctness_issue"):
        text = str(metadata["correctness_issue"])
        if metadata.get("max_difference"):
            text += f" (max difference {', '.join(str(d) for d in metadata['max_difference'])})"
        if metadata.get("correctness_trials"):
            text += f", trials passed {metadata['correctness_trials']}"
        return text[:200]
    if metadata.get("error_during_performance"):
        return f"error during performance: {metadata['error_during_performance']}"[:200]
    return ""


def sample_line(sample: Sample, outcome: Outcome, build: Optional[Build]) -> Optional[dict[str, Any]]:
    """The results line of one evaluated sample; None when the budget cut it (it is done again later)."""
    if outcome.cut:
        return None
    payload = outcome.payload or {}
    result = payload.get("result")
    line: dict[str, Any] = {
        "kind": "sample",
        "kernel": sample.kernel,
        "problem": sample.problem,
        "level": sample.level,
        "corpus_verdict": sample.corpus_verdict,
    }
    if outcome.timed_out:  # batch_eval's timeout: a failed result
        result = {"compiled": False, "correctness": False, "metadata": {"error": TIMED_OUT}, "runtime": -1.0}
        verdict = "timed out"
    elif result is None and outcome.exit == 0:  # eval returned None: the lock-file case, "please retry"
        verdict = "no result"
    elif result is None:  # the worker died (KernelBench's pool would wait out its timeout)
        metadata = {"error": f"the eval process exited {outcome.exit} without a result: {outcome.log_tail[-300:]}"}
        result = {"compiled": False, "correctness": False, "metadata": metadata, "runtime": -1.0}
        verdict = "crashed"
    elif result["compiled"] and result["correctness"]:
        verdict = "correct"
    elif not result["compiled"]:
        verdict = "compile failed"
    else:
        verdict = "incorrect"
    result = result or {}
    metadata = result.get("metadata") or {}
    runtime = result.get("runtime", -1.0)
    ref_runtime = result.get("ref_runtime", -1.0)
    line.update(
        verdict=verdict,
        judged=verdict != "no result",
        compiled=bool(result.get("compiled")),
        correctness=bool(result.get("correctness")),
        reason=reason(metadata) if verdict not in ("correct", "no result") else "",
        runtime_ms=runtime if runtime and runtime > 0 else None,
        ref_runtime_ms=ref_runtime if ref_runtime and ref_runtime > 0 else None,
        speedup=round(ref_runtime / runtime, 4)
        if runtime and runtime > 0 and ref_runtime and ref_runtime > 0
        else None,
        excessive_speedup=bool(metadata.get("excessive_speedup")),
        correctness_trials=metadata.get("correctness_trials"),
        runtime_stats=result.get("runtime_stats") or {},
        ref_runtime_stats=result.get("ref_runtime_stats") or {},
        ref_timing=payload.get("ref_timing", ""),
        metadata=metadata,
        seconds=outcome.seconds,
        exit=outcome.exit,
        build=dataclasses.asdict(build) if build else None,
        rebuilt_in_eval=payload.get("rebuilt_in_eval"),
        device_name=payload.get("device_name", ""),
        torch=payload.get("torch", ""),
        stand_ins=payload.get("stand_ins", []),
        log=outcome.log,
        finished_at=now(),
    )
    return line


def eval_phase(
    samples: list[Sample],
    builds: dict[str, Build],
    args: argparse.Namespace,
    deadline: float,
    evaluator: Callable[[Sample, argparse.Namespace, float], Outcome] = evaluate,
    clock: Callable[[], float] = time.monotonic,
    lines: Optional[list[dict[str, Any]]] = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Each sample in turn (a sample past its timeout loses its build folder, as KernelBench removes it); the
    lines written (appended to `lines` as they come), and whether the budget stopped the phase."""
    lines = [] if lines is None else lines
    for sample in samples:
        left = deadline - clock()
        if left < args.min_start_s:
            return lines, True
        outcome = evaluator(sample, args, min(args.timeout_s, left))
        line = sample_line(sample, outcome, builds.get(sample.kernel))
        if line is None:
            return lines, True
        append_line(args.results, line)
        lines.append(line)
        if outcome.timed_out:
            shutil.rmtree(sample.build_dir(args.builds), ignore_errors=True)
        print(
            f"{sample.kernel}: {line['verdict']} in {outcome.seconds:.1f} s"
            + (f" ({line['reason'][:120]})" if line["reason"] else "")
            + (f", {line['speedup']:.2f}x" if line["speedup"] else ""),
            file=sys.stderr,
            flush=True,
        )
    return lines, False


# ---------------------------------------------------------------- one call


def gpu_arch(choice: str) -> Optional[str]:
    """The named architecture for TORCH_CUDA_ARCH_LIST (set_gpu_arch's names): --gpu-arch, or with auto the
    one of GPU 0 by nvidia-smi (None: leave torch to pick, as for an unknown GPU or `none`)."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return GPU_ARCHS.get(found.stdout.strip())


def run_call(
    args: argparse.Namespace,
    samples: list[Sample],
    builder: Optional[Callable[..., Any]] = None,
    pool_factory: Optional[Callable[[int], Any]] = None,
    evaluator: Callable[[Sample, argparse.Namespace, float], Outcome] = evaluate,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The build phase, then the eval phase, over the samples without a verdict, within the budget; the call's
    line (also appended to the results)."""
    started = clock()
    deadline = started + args.budget_s if args.budget_s else float("inf")
    done, _ = read_results(args.results)
    todo = pending(samples, done)
    call: dict[str, Any] = {
        "kind": "call",
        "started_at": now(),
        "budget_s": args.budget_s,
        "kernelbench": kernelbench_commit(args.eval_src),
        "gpu_arch": os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
        "build_workers": args.workers,
        "selected": len(samples),
        "pending": len(todo),
        "stopped": "interrupted",
    }
    print(
        f"{len(todo)} of {len(samples)} selected kernel(s) without a verdict; budget {args.budget_s or 'none'} s",
        file=sys.stderr,
        flush=True,
    )
    builds: dict[str, Build] = {}
    lost: dict[str, float] = {}
    lines: list[dict[str, Any]] = []
    epochs: dict[str, list[float]] = {}  # each phase's [start, end] (time.time(): NVML's samples are split by them)
    seconds = {"build": 0.0, "eval": 0.0}

    def phase(name: str, run: Callable[[], Any]) -> Any:
        epochs[name], begun = [time.time(), 0.0], clock()
        try:
            return run()
        finally:
            epochs[name][1], seconds[name] = time.time(), clock() - begun

    try:
        kwargs: dict[str, Any] = {"clock": clock}
        if builder is not None:
            kwargs["builder"] = builder
        if pool_factory is not None:
            kwargs["pool_factory"] = pool_factory
        builds, stopped, lost = phase("build", lambda: build_phase(todo, args, deadline, **kwargs))
        print(
            f"build phase: {len(builds)} of {len(todo)} in {seconds['build']:.0f} s ("
            f"{sum(b.ok is True for b in builds.values())} ok, {sum(b.ok is False for b in builds.values())} failed, "
            f"{sum(b.ok is None for b in builds.values())} not finished)",
            file=sys.stderr,
            flush=True,
        )
        if not stopped:
            built = [s for s in todo if s.kernel in builds]
            lines, stopped = phase("eval", lambda: eval_phase(built, builds, args, deadline, evaluator, clock, lines))
        call["stopped"] = "budget" if stopped else "done"
    finally:
        call.update(
            build_s=round(seconds["build"], 1),
            eval_s=round(seconds["eval"], 1),
            wall_s=round(seconds["build"] + seconds["eval"], 1),
            built_ok=sum(b.ok is True for b in builds.values()),
            build_failed=sum(b.ok is False for b in builds.values()),
            build_unfinished=sum(b.ok is None for b in builds.values()),
            build_median_s=round(statistics.median(b.seconds for b in builds.values()), 1) if builds else None,
            build_lost=len(lost),
            build_lost_s=round(sum(lost.values()), 1),
            evaluated=len(lines),
            judged=sum(1 for line in lines if line["judged"]),
            build_epoch=epochs.get("build"),
            eval_epoch=epochs.get("eval"),
            finished_at=now(),
        )
        append_line(args.results, call)
    return call


# ---------------------------------------------------------------- the report


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def fmt_x(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}x"


def kb_correct(line: dict[str, Any]) -> bool:
    return bool(line.get("compiled") and line.get("correctness"))


def differences(
    samples: dict[str, dict[str, Any]], ours: dict[tuple[str, str], dict[str, Any]], profile: str
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], int, list[str], list[str]]:
    """The (KernelBench line, our line) pairs whose verdicts (correct or not) differ, the number judged by both,
    and the kernels judged by KernelBench's eval only, and by ours only."""
    kbc = corpus_module()
    mine = {k: line for (p, k), line in ours.items() if p == profile and kbc.judged(line)}
    judged = {k: line for k, line in samples.items() if line.get("judged")}
    both = sorted(set(judged) & set(mine))
    differ = [(judged[k], mine[k]) for k in both if kb_correct(judged[k]) != kbc.ours_correct(mine[k])]
    return differ, len(both), sorted(set(judged) - set(mine)), sorted(set(mine) - set(judged))


def report(
    samples: dict[str, dict[str, Any]],
    calls: list[dict[str, Any]],
    ours: Optional[dict[tuple[str, str], dict[str, Any]]] = None,
    ours_label: str = "",
    profile: str = "loop",
    selection: str = "",
) -> str:
    """The markdown report over every line of a results file (and, given our state, the verdicts that differ)."""
    judged = [line for line in samples.values() if line.get("judged")]
    wall = sum(c.get("wall_s") or 0.0 for c in calls)
    build = sum(c.get("build_s") or 0.0 for c in calls)
    evals = sum(c.get("eval_s") or 0.0 for c in calls)
    commits = sorted({c.get("kernelbench", "unknown") for c in calls}) or ["unknown"]
    devices = sorted({line.get("device_name") or "" for line in judged} - {""})
    used = sorted({name for line in samples.values() for name in line.get("stand_ins") or []})
    out = ["# KernelBench's own eval on the corpus draw", ""]
    out.append(
        f"- KernelBench {', '.join(commits)}: eval_kernel_against_ref, 5 correctness trials, 100 timed trials "
        "(cuda_event), the reference timed by the same call; build phase in a CPU pool, then one fresh process per "
        "kernel on cuda:0"
    )
    if selection:
        out.append(f"- selection: {selection}")
    out.append(
        f"- devices: {', '.join(devices) or 'none recorded'}; "
        f"stand-ins for missing imports: {', '.join(used) or 'none'}"
    )
    out.append(f"- kernels with a line: {len(samples)}; judged: {len(judged)}")
    out.append(
        f"- wall time over {len(calls)} call(s): build phase {build:.0f} s + eval phase {evals:.0f} s = {wall:.0f} s"
    )
    lost = sum(c.get("build_lost") or 0 for c in calls)
    if lost:
        out.append(
            f"- builds a call's budget stopped in flight, built again by a later call: {lost} "
            f"({sum(c.get('build_lost_s') or 0.0 for c in calls):.0f} build-seconds lost; a single call would not "
            "lose them, so the rate over several calls is lower than one call's)"
        )
    if wall > 0:
        rate = f"{len(judged) / (wall / 3600):.0f}"
        eval_only = f"{len(judged) / (evals / 3600):.0f}" if evals > 0 else "n/a"
        out.append(
            f"- **verdicts per GPU-hour: {rate}** ({len(judged)} judged / {wall / 3600:.3f} h; "
            f"eval phase alone {eval_only})"
        )
    else:
        out.append("- verdicts per GPU-hour: n/a (no call timed)")
    counts: dict[str, int] = {}
    for line in samples.values():
        counts[line.get("verdict", "?")] = counts.get(line.get("verdict", "?"), 0) + 1
    out.append(
        "- verdicts: "
        + (", ".join(f"{v} {n}" for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))) or "none")
    )
    seconds = [line["seconds"] for line in judged if line.get("seconds") is not None]
    build_seconds = [line["build"]["seconds"] for line in judged if line.get("build")]
    rebuilt = sum(1 for line in judged if line.get("rebuilt_in_eval"))
    if seconds:
        out.append(
            f"- per kernel: eval process median {statistics.median(seconds):.1f} s (max {max(seconds):.1f}); "
            + (f"build median {statistics.median(build_seconds):.1f} s" if build_seconds else "build median n/a")
            + f"; rebuilt during its eval (the cached build not found): {rebuilt}"
        )
    flagged = [line["kernel"] for line in judged if line.get("excessive_speedup")]
    out.append(f"- excessive speedup flagged (metadata only, not a verdict): {', '.join(flagged) or 'none'}")
    moved = [line["kernel"] for line in judged if line.get("corpus_verdict") == "correct" and not kb_correct(line)]
    out.append(f"- correct in the corpus (KernelBench's eval when it was made), not correct now: {len(moved)}")

    if ours is not None:
        differ, both, kb_only, ours_only = differences(samples, ours, profile)
        kbc = corpus_module()
        out += ["", f"## Against ours ({cell(ours_label)}, profile {profile})", ""]
        looser = sum(1 for kb, _ in differ if not kb_correct(kb))
        out.append(
            f"- judged by both: {both}; agree {both - len(differ)}; differ {len(differ)} (KernelBench's eval correct, "
            f"ours not: {len(differ) - looser}; ours correct, KernelBench's eval not: {looser})"
        )
        out.append(f"- judged by KernelBench's eval only: {len(kb_only)}; by ours only: {len(ours_only)}")
        if differ:
            header = [
                "problem",
                "kernel",
                "KernelBench eval",
                "ours",
                "our code",
                "speedup (KernelBench)",
                "speedup (ours)",
            ]
            out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            for kb, mine in differ:
                kb_text = kb["verdict"] + (f": {kb['reason']}" if kb.get("reason") else "")
                flags = kbc.failing_flags(mine)
                our_text = str(mine.get("status")) + (f" (!{', !'.join(flags)})" if flags else "")
                code = "" if kbc.ours_correct(mine) else kbc.our_code(mine)
                row = [kb["problem"], kb["kernel"].split("/", 1)[1], kb_text, our_text, code]
                out.append(
                    "| "
                    + " | ".join(cell(c) for c in row + [fmt_x(kb.get("speedup")), fmt_x(mine.get("speedup"))])
                    + " |"
                )

    out += [
        "",
        "## Calls",
        "",
        "| started | budget s | build s | built ok | build failed | unfinished | eval s | judged | stopped |",
    ]
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in calls:
        row = [c.get("started_at"), c.get("budget_s") or "", c.get("build_s"), c.get("built_ok"), c.get("build_failed")]
        row += [c.get("build_unfinished"), c.get("eval_s"), c.get("judged"), c.get("stopped")]
        out.append("| " + " | ".join(cell("" if v is None else v) for v in row) + " |")

    header = ["problem", "kernel", "verdict", "reason", "runtime ms", "reference ms", "speedup", "eval s", "build s"]
    out += ["", "## Kernels", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for kernel in sorted(samples, key=sort_key):
        line = samples[kernel]
        row = [line.get("problem"), kernel.split("/", 1)[-1], line.get("verdict"), line.get("reason") or ""]
        row += [line.get("runtime_ms") or "", line.get("ref_runtime_ms") or "", fmt_x(line.get("speedup"))]
        row += [line.get("seconds"), (line.get("build") or {}).get("seconds", "")]
        out.append("| " + " | ".join(cell("" if v is None else v) for v in row) + " |")
    return "\n".join(out) + "\n"


def sort_key(kernel: str) -> tuple[int, int, str]:
    problem = kernel.split("/", 1)[0]
    level, _, number = problem.partition("_p")
    try:
        return int(level.lstrip("l")), int(number), kernel
    except ValueError:
        return 99, 0, kernel


def write_report(args: argparse.Namespace, samples: list[Sample]) -> str:
    done, calls = read_results(args.results)
    ours = corpus_module().read_state(args.ours) if args.ours else None
    problems = len({s.problem for s in samples})
    selection = f"--fraction {args.fraction} --seed {args.seed}" + (
        f" --problems {' '.join(args.problems)}" if args.problems else ""
    )
    selection += f": {len(samples)} kernels of {problems} problems from {args.corpus}"
    text = report(done, calls, ours, str(args.ours or ""), args.ours_profile, selection)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print(text.split("\n## Calls", 1)[0].rstrip() + f"\n\nreport: {args.report}; results: {args.results}", flush=True)
    return text


# ---------------------------------------------------------------- main


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    default_corpus = Path(os.environ.get("KBCORPUS") or ROOT / ".kbcorpus")
    parser.add_argument(
        "--corpus", type=Path, default=default_corpus, help="the corpus (default $KBCORPUS or .kbcorpus)"
    )
    parser.add_argument("--fraction", type=float, default=1.0, help="kbcorpus.py's draw: this share of each level")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed")
    parser.add_argument("--problems", nargs="+", default=[], metavar="NAME", help="only these problems (l1_p1)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "kernelbench-eval", help="logs, jobs, report")
    parser.add_argument("--results", type=Path, help="the results file (default OUT/results.jsonl)")
    parser.add_argument("--report", type=Path, help="the markdown report (default OUT/report.md)")
    tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    parser.add_argument("--builds", type=Path, default=tmp / "kernelbench-eval-builds", help="build folders")
    parser.add_argument("--eval-src", type=Path, default=EVAL_SRC, help="KernelBench's modules (kernelbench_fetch.sh)")
    parser.add_argument("--budget-s", type=float, help="the call's limit for its two phases together")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="per kernel, build or eval (KernelBench's 180)")
    parser.add_argument("--min-start-s", type=float, default=15.0, help="no kernel is started with less budget left")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="build processes (default: CPUs)")
    parser.add_argument("--gpu-arch", default="auto", help="TORCH_CUDA_ARCH_LIST by name (auto: GPU 0's; none)")
    parser.add_argument("--num-correct-trials", type=int, default=5)
    parser.add_argument("--num-perf-trials", type=int, default=100)
    parser.add_argument("--ours", type=Path, help="our state file (benchmarks/kbcorpus.py) to compare verdicts with")
    parser.add_argument("--ours-profile", default="loop", help="the profile of our lines to compare (default loop)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="print the selection; run nothing")
    what.add_argument("--report-only", action="store_true", help="write the report from the results; run nothing")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.results = (args.results or args.out / "results.jsonl").resolve()
    args.report = (args.report or args.out / "report.md").resolve()
    args.builds = args.builds.resolve()
    args.eval_src = args.eval_src.resolve()
    args.corpus = args.corpus.resolve()
    return args


def on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("terminated")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"] and len(argv) == 3:
        return worker_main(Path(argv[1]), Path(argv[2]))
    args = parse_args(argv)
    if not (args.corpus / "solutions").is_dir() or not (args.corpus / "problems").is_dir():
        raise SystemExit(f"error: {args.corpus} has no problems/ and solutions/ (--corpus, or KBCORPUS)")
    samples = draw(args.corpus, args.fraction, args.seed, args.problems)
    if args.list:
        for sample in samples:
            print(f"{sample.kernel}\t{sample.reference.relative_to(args.corpus)}")
        print(f"{len(samples)} kernel(s) of {len({s.problem for s in samples})} problem(s)", file=sys.stderr)
        return 0
    if args.report_only:
        write_report(args, samples)
        return 0
    if not (args.eval_src / "kernelbench" / "eval.py").is_file():
        raise SystemExit(f"error: no KernelBench eval in {args.eval_src}: run benchmarks/kernelbench_fetch.sh first")
    arch = gpu_arch(args.gpu_arch)
    if arch and not (args.gpu_arch == "auto" and os.environ.get("TORCH_CUDA_ARCH_LIST")):
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch  # what set_gpu_arch does in KernelBench's main process
    print(
        f"KernelBench {kernelbench_commit(args.eval_src)}; "
        f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '')}",
        file=sys.stderr,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    handle = corpus_module().lock(args.results)
    signal.signal(signal.SIGTERM, on_sigterm)
    code = 0
    try:
        run_call(args, samples)
    except KeyboardInterrupt:
        print("interrupted: the verdicts finished so far are in the results", file=sys.stderr)
        code = 130
    finally:
        handle.close()
        shutil.rmtree(args.out / "jobs", ignore_errors=True)
    write_report(args, samples)
    return code


if __name__ == "__main__":
    sys.exit(main())
