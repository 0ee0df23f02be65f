"""`python -m harness.worker`: read the job, run the role's sequence, report how it ended.

It enters the run's boundary (harness.worker.sandbox) before anything else is imported.

The job arrives as one JSON line on stdin: {"job": WorkerJob, "cwd", "result_fd", "key"} (the
channel's end and key stay out of the job the worker's code holds).
"""

# ruff: noqa: E402  (the boundary is entered before the other imports)
from __future__ import annotations

from harness.worker import sandbox

sandbox.enter_from_environment()  # first: one thread, nothing of torch loaded, no candidate code yet

import json
import os
import sys
import traceback

from harness.core import protocol as P
from harness.core.channel import ChannelWriter
from harness.core.config import Device
from harness.core.errors import one_line
from harness.core.records import from_dict
from harness.core.status import Status
from harness.device.failures import WorkerFailure
from harness.device.setup import PREWARM, prewarm_cuda
from harness.worker.baseline import BaselineRun
from harness.worker.candidate import CandidateRun
from harness.worker.compared import Worker

# the run sequence of each role
ROLES: dict[P.Role, type[Worker]] = {cls.role: cls for cls in (CandidateRun, BaselineRun)}


def main() -> None:
    """Run one job (the modules above, torch among them, were imported before it is read: a prestarted
    worker waits with them loaded)."""
    if os.environ.get(PREWARM) == Device.CUDA:
        prewarm_cuda()
    text = sys.stdin.buffer.readline()
    if not text.strip():  # the parent went away, or no longer needs this prestarted worker
        os._exit(0)
    launch = json.loads(text)
    # The parent's go-ahead after each step arrives on stdin; the model's code gets /dev/null there.
    acks = os.fdopen(os.dup(0), "rb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sandbox.take_own(launch["cwd"])  # its working folder, temporary files, caches and builds
    channel = ChannelWriter(launch["result_fd"], launch["key"])
    try:
        job: P.WorkerJob = from_dict(P.WorkerJob, launch["job"])
        ROLES[job.role](job, channel, acks).run()
    except WorkerFailure as failure:
        channel.send(P.encode(P.Failed(failure.status, failure.reason)))
    except BaseException as exc:  # a bug in the harness, or a failure the phases did not classify
        traceback.print_exc()
        channel.send(P.encode(P.Failed(Status.HARNESS_ERROR, one_line(exc))))
    sandbox.end_descendants()  # what a failed model left running (a finished one's were ended before its Done)
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads or atexit hooks the model left behind must not keep the worker alive or change its exit.
    os._exit(0)


if __name__ == "__main__":
    main()
