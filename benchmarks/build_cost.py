"""Where a cold `load_inline` build's time goes: each drawn corpus kernel is imported in a fresh process (which is
what builds it), `--parallel` at once with MAX_JOBS=2, as the harness's build pool runs them. From each build's
`.ninja_log` it reads the seconds of the C++ compile (main.cpp), the CUDA compile (nvcc) and the link; nvcc's own
phases come from `nvcc --time` (NVCC_APPEND_FLAGS). Then, for each build, main.cpp is compiled again twice, one
at a time: as it was, and against a precompiled torch/extension.h made with the same flags (its own cost is
reported too), to show what a precompiled header would save.

    python3 benchmarks/build_cost.py --out DIR [--fraction 0.12 --seed 7] [--limit 8] [--parallel 4] [--pch 2] [--arch 9.0]

--pch N tries the precompiled header on the first N builds only (each trial compiles the header, about 30 s).
Each build runs in a session of its own, killed with the benchmark (SIGTERM, as `timeout` sends, included),
and its temporary folder is removed.

Writes DIR/builds.csv (one line per build), DIR/nvcc_phases.csv (summed over builds) and DIR/summary.md. Needs nvcc
for CUDA kernels; a kernel that builds nothing when imported (it builds in its constructor) is listed as such.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kbcorpus  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.parent.pch import ninja_values  # noqa: E402
from harness.parent.sessions import end_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def ninja_steps(build_dir: Path) -> dict[str, float]:
    """Seconds per ninja target of one build (`.ninja_log`: start and end in ms)."""
    steps: dict[str, float] = {}
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return steps
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit():
            steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
    return steps


def build_one(path: Path, work: Path, arch: str, timeout: float) -> dict[str, Any]:
    """Import one kernel file in a fresh process, which compiles its inline extensions into `work`."""
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "TORCH_EXTENSIONS_DIR": str(work / "ext"),
        "MAX_JOBS": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "TORCH_CUDA_ARCH_LIST": arch,
        "NVCC_APPEND_FLAGS": f"--time={work / 'nvcc_time.csv'}",
    }
    code = "import runpy, sys; runpy.run_path(sys.argv[1])"
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    GROUPS.add(process.pid)
    try:
        _, stderr = process.communicate(timeout=timeout)
        tail = stderr.strip().splitlines()[-1:] if process.returncode else []
    except subprocess.TimeoutExpired:
        tail = ["timed out"]
    finally:
        kill_group(process.pid)
    return {"wall_s": time.perf_counter() - started, "error": " ".join(tail)[:160]}


GROUPS: set[int] = set()  # the process groups of the builds in flight


def kill_group(pid: int) -> None:
    """End a build's process and every process of its session (harness.parent.sessions: ninja starts each compiler
    in a process group of its own, so the build's group alone would leave them running)."""
    GROUPS.discard(pid)
    end_session(pid)


def on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - started, done.stderr if done.returncode == 0 else f"FAILED {done.stderr[-300:]}"


def pch_trial(build_dir: Path) -> dict[str, Any]:
    """main.cpp compiled as it was, then against torch/extension.h precompiled with the same flags."""
    import torch.utils.cpp_extension as cpp

    values = ninja_values((build_dir / "build.ninja").read_text())
    cxx = shlex.split(values.get("cxx", "c++"))
    flags = shlex.split(values.get("cflags", "")) + shlex.split(values.get("post_cflags", ""))
    source = build_dir / "main.cpp"
    if not source.is_file():
        return {}
    plain_s, _ = timed([*cxx, *flags, "-c", str(source), "-o", str(build_dir / "plain.o")], build_dir)
    header = Path(cpp.include_paths()[0]) / "torch" / "extension.h"
    pch_dir = build_dir / "pch"
    (pch_dir / "torch").mkdir(parents=True)
    make_s, made = timed([*cxx, "-x", "c++-header", *flags, str(header), "-o", str(pch_dir / "torch" / "extension.h.gch")], build_dir)
    if made.startswith("FAILED"):
        return {"plain_s": plain_s, "pch_make_s": make_s, "pch_error": made[:200]}
    with_s, said = timed([*cxx, f"-I{pch_dir}", "-Winvalid-pch", "-H", *flags, "-c", str(source), "-o", str(build_dir / "pch.o")], build_dir)
    used = any(line.startswith("! ") and line.endswith(".gch") for line in said.splitlines())
    return {"plain_s": plain_s, "pch_make_s": make_s, "pch_s": with_s, "pch_used": used}


def nvcc_phases(csv_path: Path, into: dict[str, float]) -> None:
    """Sum nvcc --time's milliseconds per phase (its CSV: source, phase name, ..., metric, unit)."""
    if not csv_path.is_file():
        return
    rows = list(csv.reader(csv_path.read_text().splitlines()))
    if not rows:
        return
    header = [h.strip().lower() for h in rows[0]]
    phase_col = next((i for i, h in enumerate(header) if "phase" in h and "name" in h), 1)
    for row in rows[1:]:
        numbers = [cell for cell in row if re.fullmatch(r"\s*[0-9.]+\s*", cell)]
        if len(row) > phase_col and numbers:
            into[row[phase_col].strip()] += float(numbers[-1]) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, default=ROOT / ".kbcorpus")
    parser.add_argument("--fraction", type=float, default=0.12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--arch", default="9.0")
    parser.add_argument("--pch", type=int, default=2, help="builds to try the precompiled header on")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    kernels = kbcorpus.select(kbcorpus.corpus_kernels(args.corpus), args.fraction, args.seed)[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-cost-"))
    signal.signal(signal.SIGTERM, on_sigterm)
    pool = concurrent.futures.ThreadPoolExecutor(args.parallel)
    try:
        futures = {k.id: pool.submit(build_one, k.path, work / k.id.replace("/", "_"), args.arch, args.timeout) for k in kernels}
        results = {kid: f.result() for kid, f in futures.items()}
        lines: list[dict[str, Any]] = []
        phases: dict[str, float] = defaultdict(float)
        for kernel in kernels:
            folder = work / kernel.id.replace("/", "_")
            result = results[kernel.id]
            nvcc_phases(folder / "nvcc_time.csv", phases)
            builds = [p.parent for p in (folder / "ext").glob("*/build.ninja")] if (folder / "ext").is_dir() else []
            if not builds:
                lines.append({"kernel": kernel.id, "extension": "", "wall_s": round(result["wall_s"], 2), "note": result["error"] or "built nothing on import"})
            for build in builds:
                steps = ninja_steps(build)
                line = {"kernel": kernel.id, "extension": build.name, "wall_s": round(result["wall_s"], 2)}
                line["main_o_s"] = round(sum(s for t, s in steps.items() if t.endswith("main.o")), 2)
                line["cuda_o_s"] = round(sum(s for t, s in steps.items() if t.endswith(".cuda.o")), 2)
                line["link_s"] = round(sum(s for t, s in steps.items() if t.endswith(".so")), 2)
                if sum(1 for done in lines if "pch_make_s" in done) < args.pch:
                    line.update({k: (round(v, 2) if isinstance(v, float) else v) for k, v in pch_trial(build).items()})
                line["note"] = result["error"]
                lines.append(line)
        fields = sorted({key for line in lines for key in line}, key=lambda k: (k != "kernel", k != "extension", k))
        with open(args.out / "builds.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fields)
            writer.writeheader()
            writer.writerows(lines)
        with open(args.out / "nvcc_phases.csv", "w") as handle:
            handle.write("phase,seconds\n" + "".join(f"{name},{s:.2f}\n" for name, s in sorted(phases.items(), key=lambda kv: -kv[1])))
        summary = summarize(lines, phases, args)
        (args.out / "summary.md").write_text(summary)
        print(summary)
    finally:
        for pid in list(GROUPS):
            kill_group(pid)
        pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


def summarize(lines: list[dict[str, Any]], phases: dict[str, float], args: argparse.Namespace) -> str:
    built = [line for line in lines if line.get("extension")]

    def total(key: str) -> float:
        return sum(float(line.get(key) or 0) for line in built)

    out = [f"# Cold build cost: {len(built)} builds of {len({line['kernel'] for line in lines})} kernels, {args.parallel} at once, MAX_JOBS=2\n"]
    out.append("| step | seconds, summed | per build |\n|---|---:|---:|")
    for key, label in (("main_o_s", "C++ compile (main.cpp)"), ("cuda_o_s", "CUDA compile (nvcc)"), ("link_s", "link")):
        out.append(f"| {label} | {total(key):.1f} | {total(key) / max(1, len(built)):.1f} |")
    used = [line for line in built if line.get("pch_used")]
    if used:
        plain = sum(float(line["plain_s"]) for line in used)
        pch = sum(float(line["pch_s"]) for line in used)
        make = sum(float(line["pch_make_s"]) for line in used)
        out.append(f"\nmain.cpp alone, one at a time: {plain / len(used):.2f} s; against a precompiled torch/extension.h: "
                   f"{pch / len(used):.2f} s (the header's own compile: {make / len(used):.2f} s, once per flag set); "
                   f"the header was used in {len(used)} of {len(built)} builds.")
    if phases:
        out.append("\n| nvcc phase | seconds, summed |\n|---|---:|")
        out += [f"| {name} | {s:.1f} |" for name, s in sorted(phases.items(), key=lambda kv: -kv[1])[:10]]
    unbuilt = [line for line in lines if not line.get("extension")]
    if unbuilt:
        out.append("\nBuilt nothing on import: " + ", ".join(f"{line['kernel']} ({line['note']})" for line in unbuilt))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
