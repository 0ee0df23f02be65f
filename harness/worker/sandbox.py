"""The boundary around every process that runs a candidate's code (the worker, the build process,
the sanitizer's child): what it may write is the operating system's decision, not a convention.

The parent decides a `SandboxPolicy` per run (harness.parent.boundary) and hands it over in the
environment (`HARNESS_SANDBOX`). Each such process reads it first (`enter_from_environment`,
before torch is imported) and enters it with `enter_pending` before any candidate code runs: the
worker maps the judge's shared memory in between, which neither layer would let it open. The layer
applies to the thread that enters it (the one that runs the candidate) and to every thread and
process that thread starts:

- `landlock` (Linux 5.13 and later): an allow-list. The process may write only beneath
  `SandboxPolicy.writable` (the run's scratch, the build cache, /dev); everything else, the problem,
  solutions and results trees and the harness among them, is read-only to it. Where the kernel's
  Landlock has network rules (ABI 4), binding and connecting TCP sockets is refused too; with its
  scopes (ABI 6), signals to processes outside the boundary are refused.
- `mount` (needs CAP_SYS_ADMIN, i.e. a root parent): a private mount namespace where each of
  `SandboxPolicy.protected` is a read-only bind mount; then CAP_SYS_ADMIN is dropped for good, so the
  mounts cannot be made writable again.
- `off`: nothing here; the parent's hash check (harness.parent.boundary) sees and undoes changes.

A process also becomes a child subreaper: whatever its children leave behind (a detached
`setsid` process, a daemon) becomes its child instead of init's, so `end_descendants` can end it.

    python -m harness.worker.sandbox LAYER [WRITABLE...]
        tries LAYER in a fresh process and prints the layer it entered (or `failed: REASON`)
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from harness.core.boundary import ENV, SandboxPolicy
from harness.core.config import Boundary

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER = 38, 36
_WRITES = (1 << 1) | sum(1 << bit for bit in range(4, 13))  # write file; remove dir, file; make char .. symlink
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_NET_TCP = 0b11  # bind and connect (ABI 4)
_SCOPE_SIGNAL = 1 << 1  # ABI 6
_CLONE_NEWNS = 0x20000
_PR_CAPBSET_DROP, _CAP_SYS_ADMIN, _CAP_VERSION_3 = 24, 21, 0x20080522
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_LOCKED_FLAGS = {os.ST_NOSUID: 2, os.ST_NODEV: 4, os.ST_NOEXEC: 8}  # statvfs flag -> mount flag kept on remount


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


def enter_landlock(writable: tuple[str, ...]) -> int:
    """Allow writes beneath `writable` only (and no TCP, no signals out, where the ABI has them).
    Returns the ABI version used."""
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError(
            0, "the kernel has no Landlock (Linux 5.13 or later, with landlock among its security modules)"
        )
    libc = _libc()
    handled = _WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    ruleset = _Ruleset(handled, _NET_TCP if abi >= 4 else 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_Ruleset) if abi >= 6 else (16 if abi >= 4 else 8)
    fd = _check(
        libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        for folder in writable:
            try:
                parent = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a folder that does not exist grants nothing
            try:
                rule = _PathBeneath(handled, parent)
                _check(
                    libc.syscall(_SYS_ADD_RULE, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)),
                    f"landlock_add_rule {folder}",
                )
            finally:
                os.close(parent)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
        _check(libc.syscall(_SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(fd)
    return abi


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capability(libc: ctypes.CDLL, number: int) -> None:
    """Drop one capability from this thread for good: from its bounding set (so no exec brings it
    back) and from its effective, permitted and inheritable sets."""
    _check(libc.prctl(_PR_CAPBSET_DROP, number, 0, 0, 0), "prctl(capbset_drop)")
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    word, bit = divmod(number, 32)
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[word], field, getattr(data[word], field) & ~(1 << bit))
    _check(libc.capset(ctypes.byref(header), data), "capset")


def enter_mount(protected: tuple[str, ...]) -> None:
    """Make each of `protected` a read-only bind mount in a private mount namespace, then drop the
    capability that could make them writable again (CAP_SYS_ADMIN). It needs that capability to
    begin with: a user namespace would also cut the worker off from the judge's shared memory."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(mount) (needs CAP_SYS_ADMIN)")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(private)")
    for folder in protected:  # folders, and single files (run.py): a bind mount takes either
        if not os.path.exists(folder):
            continue
        kept = sum(flag for st, flag in _LOCKED_FLAGS.items() if os.statvfs(folder).f_flag & st)
        path = folder.encode()
        _check(libc.mount(path, path, None, _MS_BIND | _MS_REC, None), f"bind mount {folder}")
        _check(
            libc.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept, None),
            f"read-only remount {folder}",
        )
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    _drop_capability(libc, _CAP_SYS_ADMIN)


def become_subreaper() -> None:
    """Orphaned descendants become this process's children (Linux 3.4 and later)."""
    if sys.platform == "linux":
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def enter(policy: SandboxPolicy) -> str:
    """Enter the policy's layer in this (single-threaded) process; the layer entered."""
    become_subreaper()
    if policy.layer == Boundary.LANDLOCK:
        return f"{Boundary.LANDLOCK} (ABI {enter_landlock(policy.writable)})"
    if policy.layer == Boundary.MOUNT:
        enter_mount(policy.protected)
        return str(Boundary.MOUNT)
    return str(Boundary.OFF)


_pending: list[SandboxPolicy] = []  # the policy read at start, entered by enter_pending()


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


def enter_pending() -> None:
    """Enter the policy read at start, if any: before any candidate code runs."""
    while _pending:
        try:
            enter(_pending.pop())
        except OSError as exc:
            _refuse(exc)


def _refuse(exc: BaseException) -> None:
    print(f"harness sandbox: cannot enter the boundary: {exc}", file=sys.stderr, flush=True)
    os._exit(70)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: every process's stat line)."""
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
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def probe(layer: Boundary, writable: tuple[str, ...] = (), protected: tuple[str, ...] = ()) -> Optional[str]:
    """Enter `layer` in this process (a fresh one: it cannot be left) and say which it entered."""
    try:
        return enter(SandboxPolicy(layer, writable, protected))
    except OSError as exc:
        print(f"failed: {exc}")
        return None


if __name__ == "__main__":
    entered = probe(Boundary(sys.argv[1]), tuple(sys.argv[2:]), tuple(sys.argv[2:]))
    if entered is not None:
        print(entered)
    sys.exit(0 if entered is not None else 1)
