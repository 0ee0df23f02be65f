"""The build book: the digest of each finished build in the content-addressed build cache, written by
the trusted parent and read, before a cached build is loaded, by every process that loads one; and
the publishing of builds into the cache, which only the parent does.

No candidate's process may write the build cache. A process compiles the builds it needs in its own
folder (harness.worker.sandbox.own_builds), and once it has ended the parent publishes them
(`publish`): under `<cache>/<owner>/<key>`, where the owner is the digest of the candidate's source
(`owner_of`) and the key the digest of the extension's sources, flags and toolchain
(harness.device.buildcache). A candidate can only ever place builds under its own source's digest,
so a build it poisoned is loaded by no other candidate: only by a byte-identical file.

The book sits beside the cache (`<cache>-digests/<owner>/<key>.sha256`), outside what a candidate
may write under the landlock and mount layers (harness.parent.boundary). A cached build whose
libraries no longer match their recorded digest (changed by something outside the boundary: under
the hash and off layers nothing stops a write) is rebuilt and named (`ExtensionBuild.tampered`),
never loaded, and the rebuilt one replaces it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
from pathlib import Path

SUFFIX = "-digests"  # the book of `<cache>` is the folder `<cache>-digests` beside it
SHARED = "shared"  # the owner of builds made outside any candidate (a problem's own extensions, in the judge)
_KEY = re.compile(r"^[0-9a-f]{8,64}$")


def owner_of(text: str) -> str:
    """The owner of a candidate's builds: the digest of its pinned source."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def owner_folder(cache: Path, owner: str) -> Path:
    """Where the builds of `owner` are kept in `cache`."""
    return cache / (owner if _KEY.match(owner or "") else SHARED)


def book_folder(cache: Path) -> Path:
    """Where the digests of the builds in `cache` are kept."""
    return cache.parent / f"{cache.name}{SUFFIX}"


def build_digest(build_dir: Path) -> str:
    """sha256 over the build's libraries (every `*.so` in its folder, by name and content); "" when
    it has none."""
    libraries = sorted(build_dir.glob("*.so"))
    if not libraries:
        return ""
    digest = hashlib.sha256()
    for library in libraries:
        digest.update(library.name.encode() + b"\0")
        with open(library, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _entry(cache: Path, owner: str, key: str) -> Path:
    return book_folder(cache) / owner_folder(cache, owner).name / f"{key}.sha256"


def recorded(cache: Path, owner: str, key: str) -> str:
    """The digest the book holds for build `key` of `owner` ("" when it holds none)."""
    try:
        return _entry(cache, owner, key).read_text().strip()
    except OSError:
        return ""


def intact(cache: Path, owner: str, key: str) -> bool:
    """Whether the cache holds build `key` of `owner` as the book recorded it."""
    expected = recorded(cache, owner, key)
    return bool(expected) and build_digest(owner_folder(cache, owner) / key) == expected


def record(cache: Path, owner: str, key: str) -> None:
    """Write the digest of the finished build `key` of `owner` (the trusted parent only)."""
    digest = build_digest(owner_folder(cache, owner) / key)
    if not digest:
        return
    entry = _entry(cache, owner, key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    partial = entry.parent / f".{key}.{secrets.token_hex(4)}.tmp"
    partial.write_text(digest + "\n")
    partial.replace(entry)  # a reader sees the old entry or the new one, never half of one


def publish(staging: Path, cache: Path, owner: str) -> list[str]:
    """Install into `cache` the builds a process of `owner` compiled in `staging` (its own folder's
    builds, read by the parent once the process has ended), and record their digests; the keys
    installed. A build the cache already holds intact is kept; one that was changed is replaced. A
    compile that failed (`<key>.failed`) is kept as failed. Only the libraries are copied."""
    if not staging.is_dir():
        return []
    folder = owner_folder(cache, owner)
    installed = []
    for built in sorted(staging.iterdir()):
        key = built.name.removesuffix(".failed")
        if not _KEY.match(key) or built.is_symlink():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        if built.name.endswith(".failed"):
            if built.is_file() and not (folder / built.name).exists():
                shutil.copyfile(built, folder / built.name)
            continue
        libraries = [p for p in built.glob("*.so") if p.is_file() and not p.is_symlink()]
        if not libraries or intact(cache, owner, key):
            continue
        partial = folder / f".{key}.{secrets.token_hex(4)}"
        partial.mkdir()
        for library in libraries:
            shutil.copyfile(library, partial / library.name)
        target = folder / key
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            partial.rename(target)  # a reader sees all of it or none
        except OSError:  # another lane published the same build first
            shutil.rmtree(partial, ignore_errors=True)
            continue
        record(cache, owner, key)
        installed.append(key)
    return installed
