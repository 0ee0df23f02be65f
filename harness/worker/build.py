"""A build process: imports one candidate module, which compiles its inline extensions
(`load_inline`) into the content-addressed build cache, and evaluates nothing. It runs the
candidate's module-level code, so it is untrusted like the worker; the parent's build pool
(`harness.parent.prebuild`, and the Ray executor's build task) starts it and reads its one line.

    python -m harness.worker.build FILE CACHE_DIR ARCH [KEYS_FILE]
        prints `ok [(extension, cached|built), ...]` or `STATUS REASON`;
        KEYS_FILE gets the JSON list of the cache keys the candidate used
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    path, cache_dir, arch = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    keys_file = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    from harness.device.buildcache import BuildCache
    from harness.device.failures import WorkerFailure, load_module

    cache = BuildCache(cache_dir, arch or "cpu")
    cache.install()
    try:
        load_module(path, "__candidate__")
        print("ok", [(e["name"], "cached" if e["cached"] else "built") for e in cache.events])
    except WorkerFailure as failure:
        print(failure.status.value, failure.reason)
    if keys_file is not None:  # the cache entries this candidate uses, for shipping them elsewhere
        keys_file.write_text(json.dumps([e["cache_key"] for e in cache.events]))
    sys.stdout.flush()
    os._exit(0)  # threads or atexit hooks the module left must not keep the build process alive


if __name__ == "__main__":
    main()
