"""A precompiled torch/extension.h for the build pool.

Every `load_inline` build compiles a `main.cpp` whose first line is `#include <torch/extension.h>`, and
parsing that header is most of the C++ compile: 17.5 of its seconds on a 2-core CPU machine, 13.8 on an
H200 host (docs/performance.md). A run's build pool makes the header once per compiler, torch and flag set,
with the flags torch's own build file gives `main.cpp` (the extension's name left out: no torch header reads
it), into `<cache>/_pch/<key>/torch/extension.h.gch`. A build process gets that folder as `CPATH`: gcc looks
for `torch/extension.h.gch` there before torch's include folders, and uses it only when it was made by the
same compiler with the same options. A candidate's own flags (`-O3`, say) make gcc read the header as before.
The object file is the same either way.

The header is made by a process of the harness's own (`python -m harness.parent.pch`), never by a candidate's.
A run uses it only where candidates cannot write the build cache (the landlock and mount layers): gcc trusts
what a precompiled header says, so one that a candidate could change would change other candidates' builds.
It is checked before it is published: a compile of a stand-in `main.cpp` with another extension name must use
it (gcc's `-H` says so) and read it twice, as a `main.cpp` whose candidate includes the header again does, else
the folder is not made and the reason is kept beside it (`<key>.failed`). The folder holds a link to torch's header
beside the precompiled one: gcc resolves that second include to the folder it found the precompiled one in.
A header that is not there yet is not waited for: the builds that start before it is ready compile as before.
A run looks for one made before as its pool starts, and makes one only once a build has to wait for a slot of
the pool: a run whose builds all start at once would gain nothing from it, and would end its compile unfinished.
The header made or found is named under a fingerprint the parent reads without importing torch
(`<cache>/_pch/<fingerprint>.key`), so the next run's first builds already use it.

    python -m harness.parent.pch CACHE ARCH [--work FOLDER | --find] [--nice N]
        prints `ready FOLDER` (made now or before) or `failed REASON`; ARCH is `cpu` or a GPU's compute
        capability (`9.0`), as the build processes get it; it compiles in FOLDER (a new one when not given),
        which it removes; with --find, it only looks for one made before (`failed not made yet`); with
        --nice, it first lowers its CPU priority by N levels, as a build process does
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from harness.core.config import ROOT, Device
from harness.parent.quiet import QuietHost, communicate_unpaused
from harness.parent.sessions import end_session

HEADER = Path("torch") / "extension.h"
FOLDER = "_pch"  # beneath the build cache
MAKE_LIMIT_S = 600.0  # the header's compile and its check (about 40 s on one core)
_NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")


@dataclasses.dataclass(frozen=True)
class HeaderPlan:
    """How torch compiles an extension's `main.cpp` here: the compiler, its flags (without the extension's
    name) and the header, and the key that names the precompiled header made from them."""

    cxx: tuple[str, ...]
    flags: tuple[str, ...]
    header: Path
    key: str


def ninja_values(text: str) -> dict[str, str]:
    """The variables (`name = value` lines) of a build.ninja's text."""
    values = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+) = (.*)$", line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def plan(cuda: bool) -> HeaderPlan:
    """The plan for this torch and compiler: the flags come from the build file torch itself writes for an
    extension (`cflags` and `post_cflags` of its compile rule), so they are the ones every build uses.
    RuntimeError when torch has no such writer."""
    import torch
    import torch.utils.cpp_extension as cpp

    writer = getattr(cpp, "_write_ninja_file_to_build_library", None)
    if writer is None:
        raise RuntimeError("this torch writes no build file the flags can be read from")
    with tempfile.TemporaryDirectory(prefix="harness-pch-") as tmp:
        offered = {
            "path": str(Path(tmp) / "build.ninja"),
            "name": "harness_pch",
            "sources": [str(Path(tmp) / "main.cpp")],
            "extra_cflags": [],
            "extra_cuda_cflags": [],
            "extra_sycl_cflags": [],
            "extra_ldflags": [],
            "extra_include_paths": [],
            "with_cuda": cuda,
            "with_sycl": False,
            "is_standalone": False,
        }
        accepted = inspect.signature(writer).parameters
        writer(**{name: value for name, value in offered.items() if name in accepted})
        values = ninja_values((Path(tmp) / "build.ninja").read_text())
    cxx = tuple(shlex.split(values.get("cxx", "c++")))
    flags = tuple(
        flag
        for flag in shlex.split(values.get("cflags", "")) + shlex.split(values.get("post_cflags", ""))
        if not _NAME_FLAG.match(flag)
    )
    header = Path(cpp.include_paths()[0]) / HEADER
    compiler = shutil.which(cxx[0]) if cxx else None
    if not compiler or not header.is_file():
        raise RuntimeError(f"no compiler {cxx[0] if cxx else ''!r} or no {header}")
    version = subprocess.run([*cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    stat = header.stat()
    material = {
        "compiler": os.path.realpath(compiler),
        "version": version,
        "flags": flags,
        "torch": torch.__version__,
        "header": [str(header), stat.st_size, stat.st_mtime_ns],
    }
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]
    return HeaderPlan(cxx, flags, header, key)


def fingerprint(arch: str) -> str:
    """What a plan's key depends on, read without importing torch (the parent's part: microseconds): the
    interpreter, torch's version and header, the compiler it names, and whether the builds are CUDA's. A header
    made or found for it is named in `<cache>/_pch/<fingerprint>.key`, so a run finds it before its first build.
    Should the flags differ after all, gcc does not use the header and the build compiles as before."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    header = Path(locations[0]) / "include" / HEADER if locations else Path("-")
    try:
        stat = header.stat()
        seen = [str(header), stat.st_size, stat.st_mtime_ns]
    except OSError:
        seen = [str(header)]
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    material = {
        "python": sys.executable,
        "torch": version,
        "header": seen,
        "cxx": os.environ.get("CXX", "c++"),
        "cuda": arch not in ("", Device.CPU),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def known(cache: Path, arch: str) -> Optional[Path]:
    """The folder of a header made before for this fingerprint, when it is still there."""
    try:
        key = (cache / FOLDER / f"{fingerprint(arch)}.key").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    folder = cache / FOLDER / key
    return folder if re.fullmatch(r"[0-9a-f]{32}", key) and (folder / f"{HEADER}.gch").is_file() else None


def _name(cache: Path, arch: str, folder: Path) -> None:
    """Name `folder` under this fingerprint (written whole: a reader sees the old name or the new)."""
    name = cache / FOLDER / f"{fingerprint(arch)}.key"
    partial = name.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(folder.name + "\n", encoding="utf-8")
    os.replace(partial, name)


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=MAKE_LIMIT_S)


def make(cache: Path, cuda: bool, work: Optional[Path] = None, find_only: bool = False) -> Path:
    """The folder holding `torch/extension.h.gch` for this plan, made unless it is there; RuntimeError (its
    reason) when it cannot be made or gcc would not use it, or, with `find_only`, when it is not there. A
    failure is kept, so it is not tried again. It is made in `work` (a new folder beside it when None), which
    is removed."""
    header_plan = plan(cuda)
    root = cache / FOLDER
    folder = root / header_plan.key
    failed = root / f"{header_plan.key}.failed"
    if (folder / f"{HEADER}.gch").is_file():
        return folder
    if failed.is_file():
        raise RuntimeError(failed.read_text(encoding="utf-8", errors="replace").strip() or "failed before")
    if find_only:
        raise RuntimeError("not made yet")
    root.mkdir(parents=True, exist_ok=True)
    work = work if work is not None else Path(tempfile.mkdtemp(prefix="work-", dir=root))
    try:
        made = work / "folder"
        (made / "torch").mkdir(parents=True)
        gch = made / f"{HEADER}.gch"
        done = _run(
            [*header_plan.cxx, "-x", "c++-header", *header_plan.flags, str(header_plan.header), "-o", str(gch)], work
        )
        if done.returncode != 0:
            _keep_failure(failed, f"the header did not compile: {_last_line(done.stderr)}")
        # beside it, the header itself: once gcc has used the precompiled one, a second `#include
        # <torch/extension.h>` (a candidate's cpp_sources may have one) resolves to this folder, and must
        # find the header there to see that it was included already
        (made / HEADER).symlink_to(header_plan.header)
        used = check(header_plan, made, work)
        if used:
            _keep_failure(failed, used)
        try:
            os.rename(made, folder)  # whole or not at all: a build never sees a header half written
        except OSError:
            if not (folder / f"{HEADER}.gch").is_file():
                raise
        return folder
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(header_plan: HeaderPlan, made: Path, work: Path) -> str:
    """Compile a stand-in `main.cpp` (another extension's name, as every build has) against the header in
    `made`, as a build would find it; "" when gcc used it, else why not."""
    source = work / "main.cpp"
    source.write_text(  # as load_inline writes it, with the candidate's own include after its own
        "#include <torch/extension.h>\n#include <torch/extension.h>\nint harness_pch_check() { return 0; }\n"
    )
    env = {**os.environ, "CPATH": str(made)}
    done = subprocess.run(
        [*header_plan.cxx, "-H", "-Winvalid-pch", "-DTORCH_EXTENSION_NAME=harness_check", *header_plan.flags]
        + ["-c", str(source), "-o", str(work / "main.o")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=MAKE_LIMIT_S,
    )
    if done.returncode != 0:
        return f"a compile against it failed: {_last_line(done.stderr)}"
    if any(line.startswith("! ") and line.endswith(".gch") for line in done.stderr.splitlines()):
        return ""
    why = [
        line.split("not used because", 1)[1].strip() for line in done.stderr.splitlines() if "not used because" in line
    ]
    return f"gcc did not use it: {why[0] if why else 'no reason given'}"[:300]


def _keep_failure(failed: Path, why: str) -> None:
    failed.write_text(why + "\n", encoding="utf-8")
    raise RuntimeError(why)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


class PrecompiledHeader:
    """The run's precompiled header, found or made by a process of the harness's own (background work for the
    run's quiet host, at the builds' priority) on a thread of the caller's. `find()` looks for one made before
    (about 2 s: the process imports torch to learn its flags); `make()` makes it when none was found (about 40
    CPU-s). `folder()` is where it is once ready, None until then or when it could not be made (`note` says
    why). The work folder of a make, which the parent makes and removes, holds the header until it is whole:
    a run stopped while it compiles leaves nothing."""

    def __init__(self, cache: Path, arch: str, nice: int = 0, quiet: Optional[QuietHost] = None) -> None:
        self.cache = cache
        self.arch = arch
        self.nice = nice
        self.quiet = quiet if quiet is not None else QuietHost()
        self._folder: Optional[Path] = known(cache, arch)  # named by an earlier run: ready before the first build
        self.note = "known" if self._folder is not None else "not made yet"
        self._proc: Optional[subprocess.Popen[str]] = None
        self._work: Optional[Path] = None
        self._lock = threading.Lock()
        self._finding = False  # a find() was started
        self._looked = threading.Event()  # find() has ended
        self._closed = False

    def folder(self) -> Optional[Path]:
        return self._folder

    def start_find(self) -> None:
        """find() on a thread of its own."""
        self._finding = True
        threading.Thread(target=self.find, name="build-header-find", daemon=True).start()

    def start_make(self) -> None:
        """make() on a thread of its own."""
        threading.Thread(target=self.make, name="build-header-make", daemon=True).start()

    def find(self) -> None:
        """Look for one made before (by any run on this cache), unless it is known; returns once its process
        has ended."""
        self._finding = True
        try:
            if self._folder is None:
                self._run(make=False)
        finally:
            self._looked.set()

    def make(self) -> None:
        """Make it, unless find() (which it waits for, when it was started) found it; returns once done."""
        if self._finding:
            self._looked.wait()
        if self._folder is None:
            self._folder = known(self.cache, self.arch)  # another run may have made it meanwhile
        if self._folder is None:
            self._run(make=True)

    def _run(self, make: bool) -> None:
        """One process of `python -m harness.parent.pch`; its limit does not run while a hold stops it."""
        started = time.perf_counter()
        with self._lock:
            if self._closed:
                return
            work = None
            if make:
                (self.cache / FOLDER).mkdir(parents=True, exist_ok=True)
                work = self._work = Path(tempfile.mkdtemp(prefix="work-", dir=self.cache / FOLDER))
            proc = self._proc = subprocess.Popen(
                self.command(work),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=self.env(),
                start_new_session=True,
            )
        self.quiet.register_background(proc)
        try:
            output = communicate_unpaused(proc, self.quiet, MAKE_LIMIT_S + 60)
            if output is None:
                end_session(proc.pid)
                proc.communicate()
                output = ("", f"ran past {MAKE_LIMIT_S + 60:g} s")
            stdout, stderr = output
        finally:
            self.quiet.unregister(proc)
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
        said = (stdout.strip().splitlines() or [""])[-1]
        if said.startswith("ready ") and (Path(said[6:]) / f"{HEADER}.gch").is_file():
            self._folder = Path(said[6:])
            self.note = f"{'made' if make else 'found'} in {time.perf_counter() - started:.1f} s"
        else:
            self.note = said.removeprefix("failed ") or _last_line(stderr)
            if make and not self._closed:  # the run goes on without it: say so where the user looks, once
                print(
                    f"note: builds.precompiled_header: not made ({self.note}); builds compile torch/extension.h "
                    "as before",
                    file=sys.stderr,
                    flush=True,
                )

    def command(self, work: Optional[Path]) -> list[str]:
        """The process's command line: with `work`, it makes the header there; without, it only looks for it."""
        how = ["--work", str(work)] if work is not None else ["--find"]
        nice = ["--nice", str(self.nice)] if self.nice else []
        arch = self.arch or Device.CPU
        return [sys.executable, "-m", "harness.parent.pch", str(self.cache), arch, *how, *nice]

    def env(self) -> dict[str, str]:
        """Its process's environment: no GPU (it needs none), the builds' target architecture."""
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if self.arch not in ("", Device.CPU):
            env["TORCH_CUDA_ARCH_LIST"] = self.arch
        return env

    def close(self) -> None:
        """End its process if it still runs (a run that ends or is stopped), and remove its work folder."""
        with self._lock:
            self._closed = True
            proc, work = self._proc, self._work
        if proc is not None and proc.poll() is None:
            end_session(proc.pid)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.parent.pch")
    parser.add_argument("cache", type=Path)
    parser.add_argument("arch")
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--find", action="store_true", help="only look for one made before")
    args = parser.parse_args(argv)
    if args.nice > 0:
        try:
            os.nice(args.nice)
        except OSError:  # a priority is a preference
            pass
    cache, arch = args.cache, args.arch
    try:
        folder = make(cache, cuda=arch != Device.CPU, work=args.work, find_only=args.find)
        _name(cache, arch, folder)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"failed {str(exc).strip()[:300]}")
        return 0
    print(f"ready {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
