"""The build book: the digest of each finished build in the content-addressed build cache, written by
the trusted parent and read, before a cached build is loaded, by every process that loads one.

The build cache must be writable by the processes that compile into it (a candidate that builds in
its worker, the build pool), so a candidate could overwrite another candidate's finished library, and
every later run that loads it would judge the candidate's kernel by the attacker's code. The book
sits beside the cache (`<cache>-digests/<key>.sha256`), outside what a candidate may write under the
landlock and mount layers (harness.parent.boundary), and a cached build whose libraries no longer
match their recorded digest is rebuilt and named (`ExtensionBuild.tampered`), never loaded.

The parent records a build once it has seen it finished: the build pool's builds when their process
ended, a worker's when its record is written. A build is trusted on first sight: a candidate that
changes its own freshly compiled library before the parent records it changes only the build of its
own sources.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

SUFFIX = "-digests"  # the book of `<cache>` is the folder `<cache>-digests` beside it


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


def recorded(cache: Path, key: str) -> str:
    """The digest the book holds for build `key` ("" when it holds none)."""
    try:
        return (book_folder(cache) / f"{key}.sha256").read_text().strip()
    except OSError:
        return ""


def record(cache: Path, keys: Iterable[str], replace: bool = False) -> list[str]:
    """Write the digest of each finished build `keys` names (the trusted parent only); an entry
    already there is kept unless `replace` (a build rebuilt after it was found changed). Returns the
    keys written."""
    folder = book_folder(cache)
    written = []
    for key in dict.fromkeys(keys):
        if not key or "/" in key or key.startswith("."):
            continue
        entry = folder / f"{key}.sha256"
        if entry.exists() and not replace:
            continue
        digest = build_digest(cache / key)
        if not digest:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{key}.tmp"
        partial.write_text(digest + "\n")
        partial.replace(entry)  # a reader sees the old entry or the new one, never half of one
        written.append(key)
    return written
