"""The forward compute-sanitizer watches: one eval-mode forward of a correct candidate at the
other-size trial's sizes, in a process of its own under the tool. It runs the candidate's code, so it
is untrusted like the worker; the parent (`harness.parent.sanitize`) starts it under the tool and
reads the tool's report, never this process's word.

    compute-sanitizer --tool T python -m harness.worker.sanitized JOB
        JOB: a JSON file (harness.core.protocol.SanitizeJob), or "-": ready torch and the device
        first, then read the job as one JSON line on stdin

Like the worker, it creates its CUDA context before it enters the run's boundary: a CUDA driver
cannot start inside a Landlock layer (error 304), and memcheck watches a process that did it in
this order (benchmarks/cuda_boundary_probe.py, measured on an H100). It builds nothing new (the
build cache already holds the candidate's extensions). The parent
turns the caching allocator off here, so every tensor is an allocation of its own and a write past
one lands outside any allocation, where memcheck sees it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    """One eval-mode forward of the candidate the job names, at the sizes it gives."""
    from harness.worker import sandbox

    sandbox.enter_from_environment()  # before torch and the candidate: the run's boundary, entered below
    import torch

    from harness.core import buildbook
    from harness.core import protocol as P
    from harness.core.records import from_dict
    from harness.device.buildcache import BuildCache
    from harness.device.failures import load_module
    from harness.device.inputs import as_outputs

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    # the CUDA context first, then the layer: the driver cannot start inside Landlock (CUDA error 304,
    # benchmarks/cuda_boundary_probe.py), as the worker does; no candidate code has run yet
    torch.empty(1, device=device)
    if sys.argv[1] == "-":  # prestarted: the device readied under the tool, then the job from stdin
        text = sys.stdin.readline()
    else:
        text = Path(sys.argv[1]).read_text()
    job: P.SanitizeJob = from_dict(P.SanitizeJob, json.loads(text))
    sandbox.take_own(os.path.join(os.getcwd(), "own"))  # beside its log, which it may not write
    owner = buildbook.owner_of(Path(job.source).read_text(encoding="utf-8", errors="replace"))
    sandbox.enter_pending(reads=sandbox.own_reads(job.source, Path(job.build_cache), owner, job.problem))
    major, minor = torch.cuda.get_device_capability(device)
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    BuildCache(Path(job.build_cache), f"{major}.{minor}", owner=owner, staging=sandbox.own_builds()).install()
    problem_text = job.problem_text or Path(job.problem).read_text(encoding="utf-8")  # pinned by the parent
    problem = load_module(Path(job.problem), "__problem__", problem_text)
    for name, value in job.sizes.items():
        setattr(problem, name, value)
    torch.manual_seed(job.seed)
    init = problem.get_init_inputs()
    inputs = [a.to(device) if isinstance(a, torch.Tensor) else a for a in problem.get_inputs()]
    preamble = problem_text if job.problem_globals else ""
    module = load_module(Path(job.source), "__candidate__", preamble=preamble)
    model = getattr(module, job.class_name)(*init).to(device).eval()
    with torch.no_grad():
        outputs = as_outputs(model(*inputs))
    torch.cuda.synchronize(device)
    print(f"[sanitize] forward ran: {len(outputs)} outputs", flush=True)
    sandbox.end_descendants()


if __name__ == "__main__":
    main()
