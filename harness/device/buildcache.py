"""Content-addressed builds for `torch.utils.cpp_extension.load_inline`, installed in the worker.

Each inline extension's build is kept in `<cache>/<owner>/<key>`: the owner is the digest of the
candidate's source (harness.core.buildbook.owner_of), the key hashes the extension's sources,
functions, flags, torch and CUDA versions, target architecture and Python version. Evaluating the
same file again loads the finished build, read-only, instead of compiling. A build not in the cache
is compiled in the process's own folder (`staging`) and published into the cache by the parent once
the process has ended (harness.core.buildbook.publish): a candidate's process writes no build but
its own. A compile that failed is kept as failed (`<key>.failed`), so the worker reports the build
ahead's compiler error at once instead of compiling the same sources again; a failure that may pass
on its own (a compiler killed, memory or disk run out) is not kept.

Without a staging folder (a process of the harness's own, or one started by hand) builds go
straight into the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.utils.cpp_extension as cpp_extension

from harness.core import buildbook

_ERROR_LINE = re.compile(r"(\berror\b|undefined reference|undefined symbol)", re.IGNORECASE)
# a failure that says nothing of the sources: another try may pass, so it is not kept as failed (one that
# names the precompiled header or its folder, harness.parent.pch: the worker's own build, which has none,
# compiles without it)
_PASSING = re.compile(
    r"\bKilled\b|terminated by signal|No space left|Cannot allocate memory|out of memory|precompiled header|/_pch/",
    re.I,
)


class NeedsCudaError(RuntimeError):
    """The candidate asked for a CUDA build or a CUDA device that this run does not have."""


class BuildFailedError(RuntimeError):
    """Compiling an inline extension failed. `first_error` is the compiler's first error line."""

    def __init__(self, name: str, first_error: str, log: str) -> None:
        super().__init__(f"building extension {name!r} failed: {first_error}")
        self.first_error = first_error
        self.log = log


def first_error_line(log: str) -> str:
    """The first line of compiler output that reports an error, shortened for a one-line reason."""
    for line in log.splitlines():
        stripped = line.strip()
        if "Error building extension" in stripped or stripped.startswith(("ninja: build stopped", "[")):
            continue
        if _ERROR_LINE.search(stripped) and not stripped.startswith("FAILED:"):
            # "/long/build/dir/main.cpp:5:3: error: ..." -> "main.cpp:5:3: error: ..."
            return re.sub(r"^\S*/", "", stripped)[:300]
    for line in log.splitlines():
        if line.strip():
            return line.strip()[:300]
    return "no compiler output"


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


class BuildCache:
    """Wraps load_inline for one worker process and remembers what it built or reused."""

    def __init__(
        self,
        root: Path,
        arch: str,
        around_build: Callable[[bool], None] = lambda starting: None,
        on_event: Callable[[dict[str, Any]], None] = lambda event: None,
        cuda: Optional[bool] = None,
        owner: str = "",
        staging: Optional[Path] = None,
    ) -> None:
        self.root = root
        self.owner = owner  # the digest of the candidate's source: its builds are kept under it
        self.folder = buildbook.owner_folder(root, owner)
        self.staging = staging  # where builds not in the cache are compiled (None: in the cache itself)
        self.arch = arch
        # whether CUDA sources can be built here: None asks the device (a process with a CUDA context); a
        # build process, which has no device, is told (its target architecture is a GPU's)
        self.cuda = cuda
        self.around_build = around_build  # told True before and False after each build (for phase limits)
        self.on_event = on_event  # told of each finished load_inline call
        self.events: list[dict[str, Any]] = []
        # "extension.function" -> calls so far, for every function of every built extension
        self.calls: dict[str, int] = {}
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        if self.staging is None:
            self.root.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str((self.staging or self.root) / "_torch_default"))
        self._original = cpp_extension.load_inline
        signature = inspect.signature(self._original)

        def load_inline(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return self._load(bound.arguments)

        load_inline.__wrapped__ = self._original  # type: ignore[attr-defined]
        cpp_extension.load_inline = load_inline

    def key(self, arguments: dict[str, Any]) -> str:
        material = {
            "name": arguments["name"],
            "cpp_sources": _as_list(arguments.get("cpp_sources")),
            "cuda_sources": _as_list(arguments.get("cuda_sources")),
            "functions": arguments.get("functions"),
            "extra_cflags": _as_list(arguments.get("extra_cflags")),
            "extra_cuda_cflags": _as_list(arguments.get("extra_cuda_cflags")),
            "extra_ldflags": _as_list(arguments.get("extra_ldflags")),
            "extra_include_paths": _as_list(arguments.get("extra_include_paths")),
            "with_cuda": arguments.get("with_cuda"),
            "is_python_module": arguments.get("is_python_module"),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "arch": self.arch,
            "python": sys.version_info[:2],
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]

    def _load(self, arguments: dict[str, Any]) -> Any:
        assert self._original is not None
        name = str(arguments["name"])
        wants_cuda = bool(_as_list(arguments.get("cuda_sources"))) or bool(arguments.get("with_cuda"))
        can_cuda = self.cuda if self.cuda is not None else torch.cuda.is_available()
        if wants_cuda and not can_cuda:
            raise NeedsCudaError(f"extension {name!r} compiles CUDA sources and this run has no CUDA device")
        key = self.key(arguments)
        cached_dir = self.folder / key
        library = cached_dir / f"{name}.so"
        cached = library.is_file()
        tampered = self._changed_since_built(cached_dir, key) if cached else ""
        started = time.perf_counter()
        if arguments.get("is_standalone"):  # an executable, not a module: built as load_inline builds it
            cached = False
        if cached and not tampered:  # read-only: nothing is compiled, locked or written
            module = _import_built(name, cached_dir, bool(arguments.get("is_python_module", True)))
        else:
            cached = False
            module = self._build(arguments, name, key, fresh=bool(tampered))
        event = {
            "name": name,
            "cache_key": key,
            "cached": cached,
            "seconds": round(time.perf_counter() - started, 3),
            "tampered": tampered,
        }
        self.events.append(event)
        self.on_event(event)
        self._count_calls(name, module)
        return module

    def _build(self, arguments: dict[str, Any], name: str, key: str, fresh: bool) -> Any:
        """Compile extension `key` (in the staging folder, else in the cache) and load it; a compile
        error is kept as failed beside the build, and raised."""
        assert self._original is not None
        failed = self.folder / f"{key}.failed"
        if failed.exists():  # these sources failed to compile before: the same error, at once
            known = json.loads(failed.read_text(encoding="utf-8", errors="replace") or "{}")
            raise BuildFailedError(name, known.get("first_error", "no compiler output"), known.get("log", ""))
        home = self.staging if self.staging is not None else self.folder
        build_dir = home / key
        if fresh and self.staging is None:  # a changed build in the cache itself: made again from the sources
            shutil.rmtree(build_dir, ignore_errors=True)
        build_dir.mkdir(parents=True, exist_ok=True)
        arguments["build_directory"] = str(build_dir)
        arguments["verbose"] = False  # verbose streams compiler output away from the exception we read
        # flock is released by the kernel if this process dies mid-build, unlike torch's own
        # lock file, which would then make every later build of this key wait forever.
        with open(home / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stale = build_dir / "lock"
            if stale.exists():
                stale.unlink()
            self.around_build(True)
            try:
                return self._original(**arguments)
            except Exception as exc:  # compile, link and load (undefined symbol) failures alike
                message = f"{type(exc).__name__}: {exc}"
                first = first_error_line(message)
                if not _PASSING.search(message):
                    (home / f"{key}.failed").write_text(json.dumps({"first_error": first, "log": message[-20000:]}))
                raise BuildFailedError(name, first, message) from None
            finally:
                self.around_build(False)

    def _changed_since_built(self, build_dir: Path, key: str) -> str:
        """Why a finished build must not be loaded: its libraries differ from the digest the parent
        recorded when it was built (harness.core.buildbook); "" when they match or none was recorded."""
        expected = buildbook.recorded(self.root, self.owner, key)
        found = buildbook.build_digest(build_dir) if expected else ""
        if not expected or found == expected:
            return ""
        return f"its cached libraries changed after they were built (sha256 {found[:12]}, recorded {expected[:12]})"

    def _count_calls(self, name: str, module: Any) -> None:
        """Replace each function the extension exports with one that counts its calls (the worker
        reads the counts around the checked and timed calls: an extension built and never called
        is not the candidate's kernel at work). Modules without attributes (is_python_module=False) are left alone."""
        for attribute in dir(module):
            function: Any = getattr(module, attribute, None)  # a builtin function past the check below
            if attribute.startswith("_") or type(function).__name__ != "builtin_function_or_method":
                continue
            label = f"{name}.{attribute}"
            self.calls.setdefault(label, 0)
            setattr(module, attribute, _counting(function, label, self.calls))


def _import_built(name: str, build_dir: Path, is_python_module: bool) -> Any:
    """Load a finished build as load_inline would, without its version check, lock or ninja run
    (each writes into the build's folder, which is read-only to a candidate's process)."""
    return cpp_extension._import_module_from_library(name, str(build_dir), is_python_module)


def _counting(function: Callable[..., Any], label: str, calls: dict[str, int]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[label] += 1
        return function(*args, **kwargs)

    counted.__wrapped__ = function  # type: ignore[attr-defined]
    counted.__name__ = getattr(function, "__name__", label)
    counted.__doc__ = getattr(function, "__doc__", None)
    return counted
