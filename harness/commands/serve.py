"""`python run.py serve`: evaluate candidates sent over HTTP (JSON), with one long-lived session.

The session's lanes, judges and build pool stay warm between requests; records go to a run folder
as a run's do. Clients name problems of the problem tree; `--allow-problem-dir DIR` also takes
the problem files inside DIR. See harness/serve.py for the routes and docs/api.md for a client.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.api import Session
from harness.commands import add_config_arguments, load_config
from harness.commands.run import sigterm_interrupts
from harness.core.config import DEVICES
from harness.core.errors import ExitCode, UserError
from harness.serve import Service, make_server


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port, printed at start)")
    parser.add_argument("--token", default=os.environ.get("HARNESS_TOKEN", ""), help="bearer token every request must carry (default: $HARNESS_TOKEN; none = no check)")
    parser.add_argument("--problems-dir", metavar="DIR", help="the problem tree (config problems_dir); clients name its problems, never files")
    parser.add_argument("--allow-problem-dir", metavar="DIR", help="also take problem files a client names by path, when they lie inside DIR (symlinks resolved): the problem is the trusted reference, so name a directory only you write to")
    add_config_arguments(parser, example="workers.warm_problems=4")
    parser.add_argument("--device", choices=DEVICES, help="where to run (default: config, auto)")


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    overrides: list[str] = []  # the command's own flags, over --set
    if args.device:
        overrides.append(f"device={args.device}")
    if args.problems_dir:
        overrides.append(f"problems_dir={json.dumps(args.problems_dir)}")
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.token:
        print("warning: serving beyond this machine without --token: anyone who reaches the port runs code here", file=sys.stderr)
    allow_dir = None
    if args.allow_problem_dir:
        allow_dir = Path(args.allow_problem_dir).expanduser().resolve()
        if not allow_dir.is_dir():
            raise UserError(f"--allow-problem-dir {args.allow_problem_dir}: not a directory")
        print(f"note: problem files inside {allow_dir} are taken by path: they run as trusted references", file=sys.stderr)
    cfg = load_config(args, overrides)
    with sigterm_interrupts(), Session(cfg, argv=argv, echo=True) as session:
        try:
            server = make_server(Service(session, args.token, allow_dir), args.host, args.port)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
        host, port = server.server_address[:2]
        assert isinstance(host, str)  # an internet (TCP) server's address, never a socket path in bytes
        print(f"serving on http://{host}:{port} (device {session.device}, records in {session.store.dir}); Ctrl-C stops", file=sys.stderr, flush=True)
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            print("stopping: running evaluations are ended", file=sys.stderr)
            session.stop()
        finally:
            server.server_close()
    return int(ExitCode.OK)
