"""A build process: imports one candidate module, which compiles its inline extensions
(`load_inline`) into the content-addressed build cache, and evaluates nothing. A candidate that
compiles in its constructor instead (its import built nothing, and its source calls the extension
loader) is also constructed once, on the CPU, from the problem's `get_init_inputs()` (`--problem`),
as the worker's construct phase would build it; its forward never runs. It needs no CUDA device and
is given none (the parent hides the GPUs): the target architecture comes from the parent (ARCH, and
`TORCH_CUDA_ARCH_LIST`), so nvcc compiles without a context, inside the run's boundary, which a CUDA
context could not be created in anyway. It runs the candidate's
code, so it is untrusted like the worker; the parent's build pool (`harness.parent.prebuild`, and
the Ray executor's build task) starts it and reads its one line.

    python -m harness.worker.build FILE CACHE_DIR ARCH [KEYS_FILE] [--problem PROBLEM_FILE] [--own FOLDER] [--nice N]
        [--pch FOLDER]
        prints `ok [(extension, cached|built), ...]` or `STATUS REASON`;
        KEYS_FILE gets the JSON list of the cache keys the candidate used; with --own, FOLDER is its
        own (its temporary files and caches) and it compiles into FOLDER/builds, which the parent
        publishes into CACHE_DIR once it has ended (harness.core.buildbook.publish); with --nice, it
        first lowers its CPU priority by N levels; with --pch, FOLDER holds a precompiled torch/extension.h
        (harness.parent.pch) that its compilers find first (CPATH), and that it may read
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness.core import buildbook
from harness.core.config import Device
from harness.core.status import Status
from harness.worker import sandbox

LOADERS = ("load_inline", "cpp_extension")  # a source that names one of these builds extensions somewhere


def builds_when_constructed(source: Path, events: list[Any]) -> bool:
    """Whether a candidate whose import built nothing (`events`) may build in its constructor."""
    if events:
        return False
    text = source.read_text(encoding="utf-8", errors="replace")
    return any(word in text for word in LOADERS)


def construct(module: Any, problem: Path) -> None:
    """Build the candidate's ModelNew once on the CPU, with the problem's init inputs, as the worker
    would before moving it to its device. Nothing runs forward."""
    import torch

    from harness.device.failures import load_module

    reference = load_module(problem, "__problem__")
    init_inputs = reference.get_init_inputs()
    torch.manual_seed(0)
    module.ModelNew(*init_inputs)


def lower_priority(levels: int) -> None:
    """Lower this process's CPU priority by `levels` (`--nice`): before the boundary (which may refuse the call) and
    before any child, so ninja and the compilers inherit it."""
    if levels > 0:
        try:
            os.nice(levels)
        except OSError:  # a priority is a preference: the build runs on at the one it has
            pass


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    parser.add_argument("cache_dir", type=Path)
    parser.add_argument("arch")
    parser.add_argument("keys_file", type=Path, nargs="?")
    parser.add_argument("--problem", type=Path)
    parser.add_argument("--own", type=Path)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--pch", type=Path)
    return parser


def use_header(folder: Path) -> None:
    """Let the compilers find the precompiled header in `folder` before torch's own include folders: gcc uses
    it where it was made with the same options, and reads the header as before where not."""
    os.environ["CPATH"] = os.pathsep.join([str(folder), os.environ.get("CPATH", "")]).rstrip(os.pathsep)


def main() -> None:
    args = arguments().parse_args()  # reads nothing: the boundary, entered next, is still to come
    lower_priority(args.nice)
    sandbox.enter_from_environment()  # before torch and the candidate: the run's boundary
    if args.own is not None:
        sandbox.take_own(str(args.own))
    owner = buildbook.owner_of(args.path.read_text(encoding="utf-8", errors="replace"))
    problem = (str(args.problem),) if args.problem is not None else ()
    header = (str(args.pch),) if args.pch is not None else ()
    sandbox.enter_pending(reads=sandbox.own_reads(str(args.path), args.cache_dir, owner, *problem, *header))
    if args.pch is not None:
        use_header(args.pch)
    from harness.device.buildcache import BuildCache
    from harness.device.failures import WorkerFailure, classify, load_module

    arch = args.arch or Device.CPU
    if arch != Device.CPU:
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    cache = BuildCache(args.cache_dir, arch, cuda=arch != Device.CPU, owner=owner, staging=sandbox.own_builds())
    cache.install()
    try:
        module = load_module(args.path, "__candidate__")
        if args.problem is not None and builds_when_constructed(args.path, cache.events):
            try:
                construct(module, args.problem)
            except WorkerFailure:
                raise
            except BaseException as exc:  # the worker reports a constructor that fails; what it built is kept
                if isinstance(exc, KeyboardInterrupt):
                    raise
                failure = classify(exc, Status.CONSTRUCT_FAILED)
                if failure.status is Status.BUILD_FAILED:
                    raise failure from None
        print("ok", [(e["name"], "cached" if e["cached"] else "built") for e in cache.events])
    except WorkerFailure as failure:
        print(failure.status.value, failure.reason)
    if args.keys_file is not None:  # the cache entries this candidate uses, for shipping them elsewhere
        args.keys_file.write_text(json.dumps([e["cache_key"] for e in cache.events]))
    sandbox.end_descendants()
    sys.stdout.flush()
    os._exit(0)  # threads or atexit hooks the module left must not keep the build process alive


if __name__ == "__main__":
    main()
