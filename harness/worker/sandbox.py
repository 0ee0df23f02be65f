"""The boundary around every process that runs a candidate's code (the worker, the build process,
the sanitizer's child): what it may write is the operating system's decision, not a convention.

The parent decides a `SandboxPolicy` per run (harness.parent.boundary) and hands it over in the
environment (`HARNESS_SANDBOX`). Each such process reads it first (`enter_from_environment`,
before torch is imported) and enters it with `enter_pending` before any candidate code runs: the
worker maps the judge's shared memory in between, which neither layer would let it open. The layer
applies to the thread that enters it (the one that runs the candidate) and to every thread and
process that thread starts:

- `landlock` (Linux 5.13 and later): an allow-list. The process may write only beneath its own
  folder and to the device nodes CUDA and Python need (`SandboxPolicy.writable`: /dev/null, the GPU's
  nodes; no terminal, no /dev/shm); everything else, the build cache, the problem, solutions and
  results trees and the harness among them, is read-only to it. With `confine_reads` it may read only
  what `read_roots` lists: the Python environment and torch, the system's libraries and compilers,
  the CUDA toolkit, /etc without its secrets, /sys, its own /proc entry and the machine-wide ones,
  the problem and candidate files, its own build folder and its own folder. Where the kernel's
  Landlock has network rules (ABI 4), binding and connecting TCP sockets is refused too; with its
  scopes (ABI 6), signals to processes outside the boundary are refused.
- `mount` (needs CAP_SYS_ADMIN, i.e. a root parent): a private mount namespace where each of
  `SandboxPolicy.protected` (the trees, the build cache, the run's scratch) is a read-only bind
  mount and the process's own folder is writable again; /dev is replaced by a small tmpfs holding
  only the device nodes above and a private /dev/shm of `SHM_BYTES`, gone with the process. Then
  every capability is dropped for good: the mounts cannot be made writable again, and no process
  that kept its capabilities (the parent, init) can be reached through /proc (its root, its memory)
  or traced. Reads are not confined.
- `off`: nothing here; the parent's hash check (harness.parent.boundary) sees and undoes changes.

Each such process has a folder of its own (`take_own`, a folder the parent made for it in the run's
scratch): its working folder, its TMPDIR and HOME, Triton's, torch's and CUDA's caches, and the
builds it compiles (`own_builds`), which the parent publishes into the build cache once the process
has ended (harness.core.buildbook.publish). Another candidate's processes can neither write nor read
it.

A process also becomes a child subreaper: whatever its children leave behind (a detached
`setsid` process, a daemon) becomes its child instead of init's, so `end_descendants` can end it.

    python -m harness.worker.sandbox LAYER FOLDER [--reads]
        tries LAYER in a fresh process (FOLDER writable; --reads: reads confined) and prints the
        layer it entered (or `failed: REASON`)
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from harness.core.boundary import ENV, SandboxPolicy
from harness.core.config import Boundary

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER = 38, 36
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_WRITES = _WRITE_FILE | sum(1 << bit for bit in range(4, 13))  # write file; remove dir, file; make char .. symlink
_READS = _EXECUTE | _READ_FILE | _READ_DIR
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # what a rule on a single file may hold
_NET_TCP = 0b11  # bind and connect (ABI 4)
_SCOPE_SIGNAL = 1 << 1  # ABI 6
_CLONE_NEWNS = 0x20000
_PR_CAPBSET_DROP, _CAP_SYS_ADMIN, _CAP_VERSION_3 = 24, 21, 0x20080522
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_LOCKED_FLAGS = {os.ST_NOSUID: 2, os.ST_NODEV: 4, os.ST_NOEXEC: 8}  # statvfs flag -> mount flag kept on remount
_MS_NOSUID, _MS_NOEXEC, _MS_MOVE = 2, 8, 8192
_CAP_LAST = 63  # every capability number the kernel may have; dropping one it lacks fails harmlessly
SHM_BYTES = 1 << 30  # the mount layer's private /dev/shm

PACKAGE = Path(__file__).resolve().parents[1]  # the harness, which its processes import from as they go
# what a candidate's processes may read and write on /dev: what CUDA, Triton and Python open (no terminal)
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
SYSTEM_READS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys", "/opt/cuda", "/opt/nvidia")
COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "nvcc", "ninja", "ld", "as")
# entries of /etc never readable: credentials and keys (the rest configures the loader, users, time, locale)
ETC_SECRETS = frozenset(
    "shadow shadow- gshadow gshadow- sudoers sudoers.d ssh ssl pki security krb5.keytab credstore "
    "credstore.encrypted netrc docker containerd kubernetes wireguard openvpn ipsec.secrets ppp".split()
)
# machine-wide /proc entries the driver, torch and the compilers read (no other process's entry)
PROC_SHARED = ("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "filesystems", "devices", "sys", "driver")
# where a process's own folder takes its temporary files and caches (the variable, and a folder in it)
OWN_ENV = {
    "TMPDIR": "tmp",
    "HOME": "",
    "XDG_CACHE_HOME": "cache",
    "TRITON_HOME": "",
    "TRITON_CACHE_DIR": "triton",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "nv",
}


class SandboxError(OSError):
    """The layer could not be entered; the process must not run candidate code unprotected."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise SandboxError(errno, f"{what}: {os.strerror(errno)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    if sys.platform != "linux":
        return 0
    try:
        result = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(0, int(result))


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def enter_landlock(writable: tuple[str, ...], readable: Optional[tuple[str, ...]] = None) -> int:
    """Allow writes beneath `writable` only (and no TCP, no signals out, where the ABI has them);
    with `readable`, reads beneath `readable` and `writable` only. A path that does not exist grants
    nothing. Returns the ABI version used."""
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError(
            0, "the kernel has no Landlock (Linux 5.13 or later, with landlock among its security modules)"
        )
    libc = _libc()
    handled = _WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    if readable is not None:
        handled |= _READS
    ruleset = _Ruleset(handled, _NET_TCP if abi >= 4 else 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_Ruleset) if abi >= 6 else (16 if abi >= 4 else 8)
    fd = _check(
        libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    rules = dict.fromkeys(writable, handled)
    for path in readable or ():
        rules.setdefault(path, handled & _READS)
    try:
        for path, rights in rules.items():
            _add_rule(libc, fd, path, rights)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
        _check(libc.syscall(_SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(fd)
    return abi


def _add_rule(libc: ctypes.CDLL, fd: int, path: str, rights: int) -> None:
    """Grant `rights` beneath `path` (a folder), or on it (a single file: only a file's rights)."""
    try:
        parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist grants nothing
    try:
        if not os.path.isdir(f"/proc/self/fd/{parent}"):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, parent)
        _check(libc.syscall(_SYS_ADD_RULE, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)), f"landlock_add_rule {path}")
    finally:
        os.close(parent)


def device_nodes() -> tuple[str, ...]:
    """The device nodes a candidate's processes may open: /dev/null and the like, and the GPU's."""
    return (*DEVICE_NODES, *sorted(glob.glob("/dev/nvidia*")))


def _python_roots() -> list[str]:
    """The Python environment: its prefixes and every folder on sys.path, except a checkout that
    holds the harness (its package alone is readable: not the runs, solutions or configs beside it)."""
    prefixes = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}]
    checkout = PACKAGE.parent
    roots = [str(p) for p in prefixes]
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        folder = Path(entry).resolve()
        if folder == checkout and not any(folder.is_relative_to(p) for p in prefixes):
            continue
        roots.append(str(folder))
    return [*roots, str(PACKAGE)]


def _toolchain_roots() -> list[str]:
    """The CUDA toolkit and the compilers wherever they are installed: CUDA_HOME or CUDA_PATH, and
    the prefix above each compiler torch, Triton and nvcc may run (CC, CXX, cc, c++, gcc, nvcc,
    ninja: /opt/gcc/bin/gcc gives /opt/gcc)."""
    found = [os.environ[name] for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT") if os.environ.get(name)]
    names = [os.environ.get("CC", ""), os.environ.get("CXX", ""), *COMPILERS]
    for name in names:
        tool = shutil.which(name.split()[0]) if name.strip() else None
        if tool:
            for path in {Path(tool).parent, Path(tool).resolve().parent}:
                found.append(str(path.parent if path.name == "bin" else path))
    return found


def _etc_entries() -> list[str]:
    try:
        names = os.listdir("/etc")
    except OSError:
        return []
    return [f"/etc/{name}" for name in sorted(names) if name not in ETC_SECRETS]


def read_roots(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a candidate's process may read under confined reads (docs/integrity.md, "The boundary"):
    the system's libraries, compilers and /sys, the Python environment, the CUDA toolkit, /etc
    without its secrets, this process's own /proc entry and the machine-wide ones, the device nodes,
    and `extra` (its own folder, the problem and candidate files, its build folder)."""
    return tuple(
        dict.fromkeys(
            [
                *SYSTEM_READS,
                *_python_roots(),
                *_toolchain_roots(),
                *_etc_entries(),
                f"/proc/{os.getpid()}",
                *(f"/proc/{name}" for name in PROC_SHARED),
                *device_nodes(),
                *extra,
            ]
        )
    )


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def enter_mount(protected: tuple[str, ...], own: str = "") -> None:
    """Make each of `protected` a read-only bind mount in a private mount namespace (and `own`,
    beneath one of them, writable again), give the process a /dev of its own, then drop every
    capability for good. It needs CAP_SYS_ADMIN to begin with: a user namespace would also cut the
    worker off from the judge's shared memory."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(mount) (needs CAP_SYS_ADMIN)")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(private)")
    for folder in protected:  # folders, and single files (run.py): a bind mount takes either
        if not os.path.exists(folder):
            continue
        _bind(libc, folder, read_only=True)
    if own and any(Path(own).is_relative_to(p) for p in protected):
        _bind(libc, own, read_only=False)
    _own_dev(libc)
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    _drop_capabilities(libc)


def _bind(libc: ctypes.CDLL, folder: str, read_only: bool) -> None:
    kept = sum(flag for st, flag in _LOCKED_FLAGS.items() if os.statvfs(folder).f_flag & st)
    path = folder.encode()
    _check(libc.mount(path, path, None, _MS_BIND | _MS_REC, None), f"bind mount {folder}")
    flags = _MS_REMOUNT | _MS_BIND | kept | (_MS_RDONLY if read_only else 0)
    _check(libc.mount(None, path, None, flags, None), f"{'read-only' if read_only else 'writable'} remount {folder}")


def _own_dev(libc: ctypes.CDLL) -> None:
    """Replace /dev with a tmpfs holding only `device_nodes()` (bound from the real ones), a private
    /dev/shm of SHM_BYTES and the /dev/fd links: no terminal, no disk, and what a candidate leaves in
    /dev/shm goes with the namespace."""
    staging = tempfile.mkdtemp(prefix="harness-dev-")
    _check(
        libc.mount(b"tmpfs", staging.encode(), b"tmpfs", _MS_NOSUID | _MS_NOEXEC, b"size=1m,mode=755"),
        "mount tmpfs for /dev",
    )
    for node in device_nodes():
        target = Path(staging) / Path(node).relative_to("/dev")
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.isdir(node):
            target.mkdir(exist_ok=True)
            for inner in sorted(os.listdir(node)):
                (target / inner).touch()
                _check(
                    libc.mount(f"{node}/{inner}".encode(), str(target / inner).encode(), None, _MS_BIND, None),
                    f"bind {node}/{inner}",
                )
            continue
        target.touch()
        _check(libc.mount(node.encode(), str(target).encode(), None, _MS_BIND, None), f"bind {node}")
    shm = Path(staging) / "shm"
    shm.mkdir()
    _check(
        libc.mount(b"tmpfs", str(shm).encode(), b"tmpfs", _MS_NOSUID, f"size={SHM_BYTES},mode=1777".encode()),
        "mount /dev/shm",
    )
    for name, link in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(link, Path(staging) / name)
    _check(libc.mount(staging.encode(), b"/dev", None, _MS_MOVE, None), "move the new /dev into place")
    os.rmdir(staging)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Drop every capability of this thread for good: its bounding set (no exec brings one back),
    and its effective, permitted and inheritable sets. Without CAP_SYS_PTRACE and with fewer
    capabilities than the parent, no process of the run's user that kept them (the parent, init)
    can be traced or entered through /proc."""
    for number in range(_CAP_LAST + 1):
        if libc.prctl(_PR_CAPBSET_DROP, number, 0, 0, 0) < 0:
            break  # past the kernel's last capability
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def become_subreaper() -> None:
    """Orphaned descendants become this process's children (Linux 3.4 and later)."""
    if sys.platform == "linux":
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def enter(policy: SandboxPolicy, own: str = "", reads: tuple[str, ...] = ()) -> str:
    """Enter the policy's layer in this process (its candidate thread); the layer entered. `own` is
    the process's own folder (writable), `reads` what it may read besides the allow-list (its
    problem and candidate files, its build folder)."""
    become_subreaper()
    if policy.layer == Boundary.LANDLOCK:
        writable = (*((own,) if own else ()), *device_nodes(), *policy.writable)
        readable = read_roots((*policy.readable, *reads)) if policy.confine_reads else None
        abi = enter_landlock(writable, readable)
        return f"{Boundary.LANDLOCK} (ABI {abi}{', reads confined' if readable is not None else ''})"
    if policy.layer == Boundary.MOUNT:
        enter_mount(policy.protected, own)
        return str(Boundary.MOUNT)
    return str(Boundary.OFF)


_pending: list[SandboxPolicy] = []  # the policy read at start, entered by enter_pending()
_own: list[str] = []  # this process's own folder, once take_own named it


def enter_from_environment() -> str:
    """Read the layer the parent chose (`HARNESS_SANDBOX`) and become a subreaper; the layer is
    entered by `enter_pending()`, so that the worker can map the judge's regions first (inside
    either layer, the judge's /proc entries are refused to it). "" when the parent chose none. A
    layer that cannot be entered ends the process (exit 70) before any candidate code runs."""
    text = os.environ.pop(ENV, "")
    become_subreaper()
    if not text:
        return ""
    try:
        policy = SandboxPolicy.from_env(text)
        if policy.layer == Boundary.LANDLOCK and landlock_abi() < 1:
            raise SandboxError(0, "the kernel has no Landlock")
        _pending.append(policy)
        return str(policy.layer)
    except (OSError, ValueError, KeyError) as exc:
        _refuse(exc)
    return ""


def take_own(folder: str) -> None:
    """Make `folder` (made by the parent) this process's own: its working folder, and where its
    temporary files, HOME, Triton's, torch's and CUDA's caches and its builds go. Before the
    layer is entered, which makes it the only folder the process may write."""
    path = Path(folder).resolve()
    path.mkdir(parents=True, exist_ok=True)
    for name, sub in OWN_ENV.items():
        (path / sub).mkdir(exist_ok=True)
        os.environ[name] = str(path / sub) if sub else str(path)
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    os.chdir(path)
    _own[:] = [str(path)]


def own_folder() -> Optional[Path]:
    """This process's own folder (None before take_own, or in a process the parent gave none)."""
    return Path(_own[0]) if _own else None


def own_builds() -> Optional[Path]:
    """Where this process compiles the builds it needs: `builds` in its own folder, which the parent
    publishes into the build cache once the process has ended."""
    own = own_folder()
    return own / "builds" if own is not None else None


def own_reads(source: str, cache: Path, owner: str, *more: str) -> tuple[str, ...]:
    """What a candidate's process reads besides the allow-list: its module's file (tracebacks, and
    the source lookups of Triton and inspect), `more` files (the problem's), and its own builds in
    the cache with their digests (harness.core.buildbook)."""
    from harness.core import buildbook

    folder = buildbook.owner_folder(cache, owner)
    return (source, *more, str(folder), str(buildbook.book_folder(cache) / folder.name))


def enter_pending(reads: tuple[str, ...] = ()) -> None:
    """Enter the policy read at start, if any: before any candidate code runs. `reads`: what this
    process may read besides the allow-list (its problem and candidate files, its build folder)."""
    while _pending:
        try:
            enter(_pending.pop(), own=_own[0] if _own else "", reads=reads)
        except OSError as exc:
            _refuse(exc)


def _refuse(exc: BaseException) -> None:
    print(f"harness sandbox: cannot enter the boundary: {exc}", file=sys.stderr, flush=True)
    os._exit(70)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`: from its threads' `children` lists where the kernel has
    them (a process under confined reads may read only its own /proc entry), else from every
    process's stat line."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sorted({int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()})
    except (OSError, ValueError):
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 1 and fields[1] == str(pid):
                found.append(int(entry))
    return found


def end_descendants() -> int:
    """Kill every process below this one (what a subreaper adopted included) and reap them; how
    many there were. Each round kills the children it sees: their own children come up to this
    process when they die, and are killed in the next round."""
    ended: set[int] = set()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        _reap()  # children that already exited are not counted
        found = [p for p in _children(os.getpid()) if _alive(p)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            ended.add(pid)
        _reap()
        time.sleep(0.01)
    _reap()
    return len(ended)


def _alive(pid: int) -> bool:
    """Whether a child of this process still runs (not a zombie; zombies are reaped before asking)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except IndexError:
        return False
    except OSError:  # another process's entry, refused under confined reads: it is there unless it is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def probe(layer: Boundary, folder: str, confine_reads: bool = False) -> Optional[str]:
    """Enter `layer` in this process (a fresh one: it cannot be left), with `folder` writable (or,
    under mount, protected), and say which it entered. With `confine_reads`, the process then imports
    a module it had not loaded, as a candidate's process would: an allow-list that misses part of
    this machine's Python fails here, not in every worker."""
    policy = SandboxPolicy(layer, writable=(folder,), protected=(folder,), confine_reads=confine_reads)
    try:
        entered = enter(policy)
        if confine_reads:
            import email.mime.text  # noqa: F401  (not loaded by anything above)

            Path(sys.executable).resolve().read_bytes()[:4]
        return entered
    except (OSError, ImportError) as exc:
        print(f"failed: {exc}")
        return None


if __name__ == "__main__":
    entered = probe(Boundary(sys.argv[1]), sys.argv[2], "--reads" in sys.argv[3:])
    if entered is not None:
        print(entered)
    sys.exit(0 if entered is not None else 1)
