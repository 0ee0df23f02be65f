"""The judges' zygote: one trusted process per lane that has imported torch and the judge's modules once, and forks
each judge from there, so a judge no longer starts an interpreter and imports torch (5 to 14 s on a GPU host beside a
run) before it readies its device.

It never touches CUDA: a process may fork safely only before its CUDA context exists, and each judge makes its own
after the fork, as a judge started by `python -m harness.judge.service` does. A forked judge is that judge in every
other respect: a session of its own, the folder, environment and log it was given, stdin from /dev/null, and the
same `harness.judge.service.main` on the two pipes it was handed. Python's `random` is reseeded in each child by
Python itself; torch's generators start from their defaults, as in a fresh process; the judge's secret seeds come
from its Start request, as before.

Started by `harness.parent.zygote.Zygote` as `python -m harness.judge.zygote SOCKET_FD`, on one end of a socket pair
(SOCK_SEQPACKET: one message each). It says `{"ready": pid, "threads": n}` once its imports are done. Each request is
`{"cwd": ..., "env": {...}}` with three descriptors (the judge's request pipe, its reply pipe, its log); the answer is
`{"pid": n}`, or `{"error": "..."}` when the fork failed. When a judge ends, the zygote reaps it and says
`{"exited": pid, "code": c}` (c as subprocess's returncode: negative for a signal). It ends when the run closes its
end of the socket; judges it started run on in their own sessions until the run ends them.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import traceback

from harness.judge import service  # torch and the judge's modules: what each forked judge would import

MAX_MESSAGE = 1 << 20  # a request: the judge's folder and environment
REAP_EVERY_S = 0.2  # how often ended judges are reaped while no request comes


def become_judge(job: dict, fds: list[int], sock: socket.socket, leading: int) -> None:
    """In the forked child: the judge `python -m harness.judge.service REQUEST_FD REPLY_FD` would be. It leads a
    session of its own, in its folder with its environment, before it closes `leading`, which the zygote waits on
    (or ends, should that fail). Never returns."""
    code = 1
    try:
        request_fd, reply_fd, log_fd = fds
        os.setsid()
        sock.close()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        sys.path[0] = job["cwd"]  # as `python -m` run in that folder would have it
        sys.argv = [service.__file__, str(request_fd), str(reply_fd)]
        os.close(leading)  # in place: the zygote may say its pid
        service.main()  # ends the process itself when the run closes the requests
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def fork_judge(job: dict, fds: list[int], sock: socket.socket) -> int:
    """Fork a judge for `job` on `fds`; its pid, once it leads its own session in its folder (so the run signals its
    group, as for a judge started with start_new_session). The zygote's copies of the descriptors are closed here."""
    sys.stdout.flush()
    sys.stderr.flush()
    waiting, leading = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:
            os.close(waiting)
            become_judge(job, fds, sock, leading)
        os.close(leading)
        leading = -1
        os.read(waiting, 1)  # end of file: the child closed its end once in place, or ended
        return pid
    finally:
        for fd in (*fds, waiting, leading):
            if fd >= 0:
                os.close(fd)


def reap(children: set[int], sock: socket.socket) -> None:
    """Say each judge that has ended, with its exit code, once."""
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def serve(sock: socket.socket) -> None:
    """Fork a judge for each request until the run closes its end of the socket."""
    children: set[int] = set()
    sock.send(json.dumps({"ready": os.getpid(), "threads": len(os.listdir("/proc/self/task"))}).encode())
    while True:
        readable, _, _ = select.select([sock], [], [], REAP_EVERY_S)
        reap(children, sock)
        if not readable:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        if not data:
            return
        try:
            job = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"a malformed request: it needs 3 descriptors, got {len(fds)}")
            if service.torch.cuda.is_initialized():  # a child would share this process's context: never fork then
                raise ValueError("CUDA was initialised in the zygote")
        except ValueError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": str(exc)}).encode())
            continue
        try:
            pid = fork_judge(job, fds, sock)
        except OSError as exc:
            sock.send(json.dumps({"error": f"fork failed: {exc}"}).encode())
            continue
        children.add(pid)
        sock.send(json.dumps({"pid": pid}).encode())


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        serve(sock)
    except (BrokenPipeError, ConnectionResetError):  # the run ended without closing its end first
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
