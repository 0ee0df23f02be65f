"""Which boundary layers a CUDA process can start inside, and whether compute-sanitizer still sees a
planted out-of-bounds write there (docs/integrity.md, "The boundary and the device").

Each case runs in a fresh process: it enters a layer (landlock with all its rules, landlock with only
its file rules, landlock with file and network rules, landlock with file rules and signal scoping,
mount, off) either before or after it creates its CUDA context, then runs a kernel. The sanitizer
cases run the same child under `compute-sanitizer --tool memcheck`, once with an honest kernel and
once with a write far past its buffer.

    python benchmarks/cuda_boundary_probe.py        # on a machine with a GPU; prints one table
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import ctypes, json, os, sys
sys.path.insert(0, {root!r})
from harness.worker import sandbox
layer, order, kernel = sys.argv[1], sys.argv[2], sys.argv[3]
writable = (os.environ["TMPDIR"], "/dev")

def enter_layer():
    sandbox.become_subreaper()
    if layer == "off":
        return
    if layer == "mount":
        sandbox.enter_mount(({root!r},))
        return
    abi = sandbox.landlock_abi()
    if layer == "landlock":
        sandbox.enter_landlock(writable)
        return
    libc = sandbox._libc()
    handled = sandbox._WRITES | sandbox._REFER | sandbox._TRUNCATE
    net = sandbox._NET_TCP if layer in ("landlock-net",) and abi >= 4 else 0
    scope = sandbox._SCOPE_SIGNAL if layer in ("landlock-scope",) and abi >= 6 else 0
    ruleset = sandbox._Ruleset(handled, net, scope)
    size = ctypes.sizeof(sandbox._Ruleset) if abi >= 6 else 16
    fd = sandbox._check(libc.syscall(sandbox._SYS_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size),
                                     ctypes.c_uint32(0)), "create")
    for folder in writable:
        parent = os.open(folder, os.O_PATH | os.O_CLOEXEC)
        rule = sandbox._PathBeneath(handled, parent)
        sandbox._check(libc.syscall(sandbox._SYS_ADD_RULE, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)), "rule")
        os.close(parent)
    sandbox._check(libc.prctl(sandbox._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "nnp")
    sandbox._check(libc.syscall(sandbox._SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)), "restrict")

result = {{"layer": layer, "order": order}}
try:
    if order == "layer-first":
        enter_layer()
    import torch
    torch.cuda.init()
    x = torch.ones(1 << 20, device="cuda")
    if order == "cuda-first":
        enter_layer()
    result["sum"] = float(x.sum())
    if kernel != "none":
        import cupy
        cupy.cuda.set_allocator(None)
        n = 1024
        a = cupy.zeros(n, dtype=cupy.float32)
        reach = n + (64 << 20) if kernel == "oob" else 0
        k = cupy.RawKernel(
            'extern "C" __global__ void k(float* a, long long n, long long reach) {{'
            ' long long i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i + reach] = 1.0f; }}', "k")
        k((4,), (256,), (a, cupy.int64(n), cupy.int64(reach)))
        cupy.cuda.runtime.deviceSynchronize()
        result["kernel"] = kernel
    result["ok"] = True
except BaseException as exc:
    result["ok"] = False
    result["error"] = f"{{type(exc).__name__}}: {{str(exc).splitlines()[0][:200] if str(exc) else ''}}"
print("RESULT " + json.dumps(result), flush=True)
"""


def run_case(layer: str, order: str, kernel: str, sanitizer: str | None, tmp: str) -> dict:
    script = Path(tmp) / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    env = {**os.environ, "TMPDIR": tmp, "CUPY_CACHE_DIR": str(Path(tmp) / "cupy"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(script), layer, order, kernel]
    if sanitizer is not None:
        command = [sanitizer, "--tool", "memcheck", "--error-exitcode", "86", "--print-limit", "3", *command]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        return {"layer": layer, "order": order, "ok": False, "error": "timeout"}
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = (
        json.loads(found[-1][7:])
        if found
        else {
            "layer": layer,
            "order": order,
            "ok": False,
            "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200],
        }
    )
    result["exit"] = done.returncode
    if sanitizer is not None:
        text = done.stdout + done.stderr
        result["memcheck"] = next((ln.strip("= ").strip() for ln in text.splitlines() if "ERROR SUMMARY" in ln), "-")
        result["memcheck_first"] = next(
            (ln.strip("= ").strip() for ln in text.splitlines() if "Invalid" in ln or "Error" in ln and "=" in ln), ""
        )
    return result


def main() -> None:
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    rows = []
    layers = ["off", "landlock", "landlock-fs", "landlock-net", "landlock-scope", "mount"]
    with tempfile.TemporaryDirectory() as tmp:
        for layer in layers:
            for order in ("layer-first", "cuda-first"):
                rows.append(("plain", run_case(layer, order, "honest", None, tmp)))
        for layer in ("off", "landlock", "mount"):
            for order in ("layer-first", "cuda-first"):
                for kernel in ("honest", "oob"):
                    rows.append(("memcheck", run_case(layer, order, kernel, sanitizer, tmp)))
    for kind, row in rows:
        print(json.dumps({"kind": kind, **row}))
    print()
    print(f"{'kind':9} {'layer':15} {'order':12} {'kernel':7} {'ok':5} {'exit':5} memcheck / error")
    for kind, row in rows:
        detail = row.get("memcheck", "") if kind == "memcheck" else ""
        detail = f"{detail} {row.get('memcheck_first', '')}".strip() or row.get("error", "")
        if not row.get("ok") and kind == "memcheck":
            detail = f"{detail} | {row.get('error', '')}"
        print(
            f"{kind:9} {row['layer']:15} {row['order']:12} {row.get('kernel', '-'):7} {str(row.get('ok')):5} "
            f"{row.get('exit', '-')!s:5} {detail[:150]}"
        )


if __name__ == "__main__":
    main()
