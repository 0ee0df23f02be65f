"""The boundary around candidate code, measured: the tamper probe on each layer this machine can
enter, and what the boundary costs.

    python3 benchmarks/boundary.py [--device cpu|cuda] [--out DIR] [--honest N]

For each layer (landlock, mount, where a probe enters them; hash; off), one `run.py` run judges, in
order: a candidate that rewrites the problem's forward to return zeros, plants `planted.py` in the
problem, solutions and results trees and leaves a detached `sleep`; an all-zeros kernel; and N
honest candidates. The table gives the statuses, whether the problem file is unchanged, the planted
files and live processes left, and the honest candidates' median worker wall time. The cost table
times the boundary's own steps: the probe (once per run), entering a layer in a fresh process, the
worker's end-of-run process sweep, and the hash layer's check of this repository's trees.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_boundary import MARK, ZEROS, _sleepers, tampering  # noqa: E402

from harness.core import buildbook  # noqa: E402
from harness.core.boundary import SandboxPolicy  # noqa: E402
from harness.core.config import Boundary, load_config  # noqa: E402
from harness.parent.boundary import TreeWatch, probe, protected_trees  # noqa: E402

from sources import scale_bias_relu  # noqa: E402


def trees(base: Path, honest: int) -> dict[str, Path]:
    problems = base / "problems" / "level0"
    problems.mkdir(parents=True)
    shutil.copy(ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py", problems)
    solutions = base / "solutions" / "1_Scale_Bias_ReLU"
    solutions.mkdir(parents=True)
    (base / "results").mkdir()
    problem = problems / "1_Scale_Bias_ReLU.py"
    plant = [str(problems), str(solutions), str(base / "results")]
    (solutions / "a_tamper.py").write_text(tampering(problem, plant))
    (solutions / "b_zeros.py").write_text(ZEROS)
    for i in range(honest):
        (solutions / f"c_honest_{i}.py").write_text(scale_bias_relu() + f"\n# copy {i}\n")
    return {"problems": base / "problems", "solutions": base / "solutions", "results": base / "results", "problem": problem}


def probe_run(layer: str, device: str, honest: int, builds: Path) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix=f"boundary-{layer}-"))
    try:
        t = trees(base, honest)
        before = t["problem"].read_bytes()
        sets = [f"problems_dir={t['problems']}", f"solutions_dir={t['solutions']}", f"results_dir={t['results']}", f"sandbox.layer={layer}", f"device={device}",
                f"build_cache_dir={builds}", "baselines.compile_modes=[]", "flags.no_custom_kernel=flag", "timing.null_candidate=false"]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--json", *[a for s in sets for a in ("--set", s)]],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - started
        records = {r["identity"]["candidate"]: r for r in map(json.loads, done.stdout.splitlines()) if r.get("identity")}
        said = [line for line in done.stderr.splitlines() if "boundary around candidates" in line]
        honest_walls = [r["provenance"]["wall_seconds"] for name, r in records.items() if name.startswith("c_honest")]
        honest_status = sorted({r["decision"]["status"] for name, r in records.items() if name.startswith("c_honest")})
        row = {
            "layer": layer,
            "recorded": said[0].split(": ", 1)[1] if said else "?",
            "tamper": records.get("a_tamper", {}).get("decision", {}).get("status", "no record"),
            "zeros": records.get("b_zeros", {}).get("decision", {}).get("status", "no record"),
            "honest": ",".join(honest_status) or "no record",
            "problem unchanged": t["problem"].read_bytes() == before,
            "planted left": sum(1 for k in ("problems", "solutions", "results") for _ in t[k].rglob("planted.py")),
            "processes left": len(_sleepers()),
            "honest worker wall s (median)": round(statistics.median(honest_walls), 3) if honest_walls else None,
            "run wall s": round(wall, 1),
            "tamper reason": records.get("a_tamper", {}).get("decision", {}).get("reason", done.stderr[-300:]),
        }
        for pid in _sleepers():
            os.kill(pid, 9)
        return row
    finally:
        shutil.rmtree(base, ignore_errors=True)


def timed(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def costs(layers: list[str]) -> list[tuple[str, float]]:
    folder = tempfile.mkdtemp(prefix="boundary-cost-")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bare = timed(lambda: subprocess.run([sys.executable, "-c", "from harness.worker import sandbox"], env=env, check=True))
    rows = [("a fresh interpreter importing harness.worker.sandbox (no layer)", bare)]
    own = str(Path(folder) / "own")
    for layer in layers:
        for confined in (False, True) if layer == Boundary.LANDLOCK else (False,):
            policy = SandboxPolicy(Boundary(layer), protected=(str(ROOT / "problems"), folder), confine_reads=confined)
            code = f"from harness.worker import sandbox\nsandbox.enter_from_environment()\nsandbox.take_own({own!r})\nsandbox.enter_pending()"
            ms = timed(lambda p=policy: subprocess.run([sys.executable, "-c", code], env={**env, "HARNESS_SANDBOX": p.to_env()}, check=True))
            label = f"{layer}{', reads confined' if confined else ''}"
            rows.append((f"the same, taking its own folder and entering {label} (difference: {ms - bare:+.1f} ms)", ms))
        rows.append((f"probe({layer}), once per run, uncached", timed(lambda lay=layer: probe.__wrapped__(Boundary(lay), folder), 3)))  # type: ignore[attr-defined]
    staged = Path(folder) / "staged" / ("ab" * 16)
    staged.mkdir(parents=True)
    (staged / "ext.so").write_bytes(os.urandom(4 << 20))  # about an inline extension's size
    cache = Path(folder) / "cache"

    def publish_fresh() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(Path(folder) / "cache-digests", ignore_errors=True)
        buildbook.publish(staged.parent, cache, buildbook.owner_of("source"))

    rows.append(("the parent publishing one 4 MiB build into the cache (copy, digest, book)", timed(publish_fresh)))
    sweep = "from harness.worker import sandbox\nimport time\nt = time.perf_counter()\nsandbox.end_descendants()\nprint((time.perf_counter() - t) * 1000)"
    rows.append(("the worker's end-of-run sweep (end_descendants, nothing left)", float(subprocess.run([sys.executable, "-c", sweep], env=env, capture_output=True, text=True, check=True).stdout)))
    watch = TreeWatch(protected_trees(load_config()), keep=(ROOT / "problems", ROOT / "solutions"))
    rows.append(("hash layer: TreeWatch.check() of this repository's trees", timed(watch.check)))
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "boundary")
    parser.add_argument("--honest", type=int, default=4)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kernel = [layer for layer in (Boundary.LANDLOCK, Boundary.MOUNT) if probe(layer, tempfile.gettempdir())[0]]
    builds = Path(tempfile.mkdtemp(prefix="boundary-builds-"))
    lines = [f"kernel {os.uname().release}; device {args.device}; layers entered here: {', '.join(kernel) or 'none'}", ""]
    rows = [probe_run(layer, args.device, args.honest, builds) for layer in [*kernel, Boundary.HASH, Boundary.OFF]]
    keys = list(rows[0])
    lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]).replace("|", "/") for k in keys) + " |" for r in rows]
    lines += ["", "| step | ms (median) |", "|---|---:|"] + [f"| {what} | {ms:.1f} |" for what, ms in costs(kernel)]
    shutil.rmtree(builds, ignore_errors=True)
    text = "\n".join(lines)
    (args.out / "boundary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
