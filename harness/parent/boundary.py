"""The run's boundary around the processes that run a candidate's code (docs/integrity.md, "The
boundary"): which layer protects them on this machine, the environment that hands it to them, and,
where the kernel offers no layer, the watch that sees and undoes what a candidate wrote.

`sandbox.layer` (auto | landlock | mount | hash | off) picks it; auto takes the strongest that a
probe (a fresh `python -m harness.worker.sandbox LAYER`, once per run) could enter:

- landlock, mount: the worker, the build process and the sanitizer's child enter it themselves
  (harness.worker.sandbox) before any candidate code runs; what each may write is its own folder in
  the run's scratch (its working folder, TMPDIR, caches and builds) and the device nodes it needs,
  and under landlock with `sandbox.reads: confined` what it may read is an allow-list too;
- hash: `TreeWatch` fingerprints the problem, solutions and results trees (the run's own folder
  aside) before each candidate and compares them after it: a file the candidate planted is removed,
  a problem or candidate file it changed is rewritten from the bytes read before, and the candidate
  is `tampered`;
- off: nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Mapping, Optional

from harness.core import buildbook
from harness.core.boundary import ENV, SandboxPolicy
from harness.core.config import Boundary, Config
from harness.core.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).resolve().parents[1]
CHECKOUT = (ROOT / "run.py", ROOT / "configs")  # a checkout's entry point and configs, beside the package
KEPT_BYTES = 1 << 20  # files of the problem and solutions trees up to this size are restored when changed


@dataclasses.dataclass(frozen=True)
class RunBoundary:
    """The boundary of one run's candidate processes."""

    layer: str  # what protects them: "landlock (ABI 7)", "mount", "hash" or "off"
    env: Mapping[str, str]  # what their environment gets: the policy (HARNESS_SANDBOX) and where their caches go
    watch: Optional["TreeWatch"] = None  # the hash layer's watch (None for the others)
    why: str = ""  # with auto: why a stronger layer was not taken

    @classmethod
    def none(cls) -> "RunBoundary":
        return cls(str(Boundary.OFF), {})

    @property
    def refuses_signals(self) -> bool:
        """Whether the layer refuses a candidate's signals to processes outside it (Landlock ABI 6+)."""
        found = re.match(r"landlock \(ABI (\d+)", self.layer)
        return found is not None and int(found.group(1)) >= 6

    @property
    def cache_read_only(self) -> bool:
        """Whether the layer keeps candidates' processes from writing the build cache (landlock and mount: the
        hash layer sees changes to the trees it watches only, and off sees none)."""
        return self.layer.startswith(str(Boundary.LANDLOCK)) or self.layer == str(Boundary.MOUNT)

    def describe(self) -> str:
        return f"{self.layer} ({self.why})" if self.why else self.layer


def candidate_env(scratch: Path, build_cache: Path) -> dict[str, str]:
    """Where a candidate's processes keep their temporary files and JIT caches: the run's scratch
    (TMPDIR, Triton's and CUDA's caches) and the build cache (torch.compile's)."""
    folders = {
        "TMPDIR": scratch / "tmp",
        "TRITON_CACHE_DIR": scratch / "triton",
        "CUDA_CACHE_PATH": scratch / "nv",
        "TORCHINDUCTOR_CACHE_DIR": build_cache / "inductor",
    }
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {**{name: str(folder) for name, folder in folders.items()}, "PATH": tool_path()}


def tool_path() -> str:
    """The PATH a candidate's processes get: the parent's, with this interpreter's own folder first when it is not
    on it, as activating its virtual environment would put it. A venv used without being activated
    (`venv/bin/python run.py`) otherwise builds with whatever `ninja` comes first on the PATH: a pyenv shim, which
    the boundary's confined reads cannot run ("Ninja is required to load C++ extensions"), where pip put one in the
    venv."""
    own = str(Path(sys.executable).parent)
    found = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(found if own in found else [own, *found])


def protected_trees(cfg: Config) -> tuple[Path, ...]:
    """What a candidate must not write: the problem, solutions and results trees, the harness itself,
    in a checkout its entry point (run.py) and its configs, and the build book (the digests of the
    finished builds, harness.core.buildbook)."""
    trees = [
        cfg.path(cfg.problems_dir),
        cfg.path(cfg.solutions_dir),
        cfg.path(cfg.results_dir),
        PACKAGE,
        *CHECKOUT,
        buildbook.book_folder(cfg.path(cfg.build_cache_dir)),
    ]
    return tuple(dict.fromkeys(t.resolve() for t in trees if t.exists()))


@functools.lru_cache(maxsize=None)
def probe(layer: str, folder: str, confine_reads: bool = False) -> tuple[bool, str]:
    """Whether a fresh process can enter `layer` here (the kernel's support is the machine's, so
    it is asked once per process); with the layer it entered, or why not."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    env.pop(ENV, None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness.worker.sandbox", layer, folder, *(["--reads"] if confine_reads else [])],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    said = (done.stdout.strip() or done.stderr.strip() or f"exit {done.returncode}").splitlines()[-1]
    return done.returncode == 0, said.removeprefix("failed: ")


def layers_here() -> list[str]:
    """The layers this machine offers, strongest first, as a run would record them ("hash" always)."""
    import tempfile

    found = [
        said
        for layer in (Boundary.LANDLOCK, Boundary.MOUNT)
        for entered, said in [probe(layer, tempfile.gettempdir())]
        if entered
    ]
    return [*found, str(Boundary.HASH)]


def open_boundary(cfg: Config, scratch: Path, results_run: Optional[Path] = None) -> RunBoundary:
    """The boundary `cfg.sandbox.layer` asks for on this machine. A layer named outright that
    cannot be entered is a usage error; auto falls back to the next one and says why."""
    chosen = cfg.sandbox.layer
    build_cache = cfg.path(cfg.build_cache_dir)
    build_cache.mkdir(parents=True, exist_ok=True)
    book = buildbook.book_folder(build_cache)
    book.mkdir(parents=True, exist_ok=True)  # protected from the start: the parent writes it as builds finish
    env = candidate_env(scratch, build_cache)  # per-run JIT caches, whatever the layer
    if chosen == Boundary.OFF:
        return RunBoundary(str(Boundary.OFF), env)
    protected = protected_trees(cfg)
    why: list[str] = []
    confine = cfg.sandbox.reads == "confined" and chosen in (Boundary.AUTO, Boundary.LANDLOCK)
    if confine:
        entered, said = probe(Boundary.LANDLOCK, str(scratch), True)
        if not entered and probe(Boundary.LANDLOCK, str(scratch))[0]:
            confine = False
            why.append(f"reads not confined: {said}")
    policy = {
        # each process writes its own folder and the device nodes it needs (harness.worker.sandbox)
        Boundary.LANDLOCK: SandboxPolicy(Boundary.LANDLOCK, confine_reads=confine),
        # the build cache and the scratch too: only its own folder is writable again
        Boundary.MOUNT: SandboxPolicy(
            Boundary.MOUNT, protected=tuple(str(p) for p in (*protected, build_cache.resolve(), scratch.resolve()))
        ),
    }
    layers: tuple[Boundary, ...] = (Boundary(chosen),)
    if chosen == Boundary.AUTO:
        layers = (Boundary.LANDLOCK, Boundary.MOUNT)
    elif chosen == Boundary.HASH:
        layers = ()
    for layer in layers:
        entered, said = probe(layer, str(scratch), confine and layer == Boundary.LANDLOCK)
        if entered:
            return RunBoundary(said, {**env, ENV: policy[layer].to_env()}, why="; ".join(why))
        if chosen != Boundary.AUTO:
            raise UserError(f"sandbox.layer={layer}: this machine cannot enter it ({said}); choose auto, hash or off")
        why.append(f"no {layer}: {said}")
    watch = TreeWatch(
        protected,
        keep=(cfg.path(cfg.problems_dir), cfg.path(cfg.solutions_dir), PACKAGE, *CHECKOUT),
        skip=(*((results_run,) if results_run else ()), book),  # the run's own writes
    )
    return RunBoundary(str(Boundary.HASH), env, watch, "; ".join(why))


class TreeWatch:
    """The hash layer: the trees' files by size, modification time and change time, and the bytes of
    the problem, candidate and harness files, taken before a candidate and compared after it. The
    change time is the kernel's: an edit that keeps the size and puts the modification time back
    still moves it, and no unprivileged process can set it back."""

    def __init__(self, roots: tuple[Path, ...], keep: tuple[Path, ...] = (), skip: tuple[Path, ...] = ()) -> None:
        self.roots = roots
        self.keep = tuple(k.resolve() for k in keep if k.exists())
        self.skip = tuple(s.resolve() for s in skip)
        self._lock = threading.Lock()
        self._seen: dict[Path, tuple[int, int, int]] = {}
        self._bytes: dict[Path, bytes] = {}
        self.take()

    def _walk(self) -> dict[Path, tuple[int, int, int]]:
        found: dict[Path, tuple[int, int, int]] = {}

        def note(path: Path) -> None:
            try:
                st = path.lstat()
            except OSError:
                return
            found[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)

        for root in self.roots:
            if root.resolve() in self.skip:
                continue
            if not root.is_dir():  # a single file (run.py)
                note(root)
                continue
            for folder, dirs, files in os.walk(root):
                here = Path(folder)
                dirs[:] = [d for d in dirs if (here / d).resolve() not in self.skip and d != "__pycache__"]
                for name in files:
                    note(here / name)
        return found

    def _kept(self, path: Path) -> bool:
        return any(path.is_relative_to(k) or path == k for k in self.keep)

    def take(self) -> None:
        """Fingerprint the trees now (and keep the bytes of the problem, candidate and harness files)."""
        with self._lock:
            self._seen = self._walk()
            for path, (size, _, _) in self._seen.items():
                if size <= KEPT_BYTES and self._kept(path) and path not in self._bytes:
                    try:
                        self._bytes[path] = path.read_bytes()
                    except OSError:
                        pass

    def check(self) -> list[str]:
        """What changed since the last `take`, each undone where it can be: planted files removed,
        changed or removed files with kept bytes written back. Then the trees are taken again."""
        changes: list[str] = []  # what it changed first, then what it planted
        with self._lock:
            now = self._walk()
            for path in sorted(set(self._seen)):
                if now.get(path) == self._seen[path]:
                    continue
                kept = self._bytes.get(path)
                if kept is not None:
                    path.write_bytes(kept)
                    os.utime(path, ns=(self._seen[path][1], self._seen[path][1]))
                changes.append(
                    f"{'changed' if path in now else 'removed'} {path}{' (restored)' if kept is not None else ''}"
                )
            for path in sorted(set(now) - set(self._seen)):
                changes.append(f"planted {path} (removed)")
                path.unlink(missing_ok=True)
        if changes:
            self.take()
        return changes
