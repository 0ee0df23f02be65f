"""`python run.py serve`: evaluate candidates sent over HTTP (JSON), with one long-lived session.

The session's lanes, judges and build pool stay warm between requests; records go to a run folder
as a run's do. Clients name problems of the problem tree; `--allow-problem-dir DIR` also takes
the problem files inside DIR. The service's routes are below; docs/api.md has a client.

A thin HTTP service over one api.Session, for trainers on other machines: JSON in, records out.

    POST /evaluate   {"problem": "1_Scale_Bias_ReLU", "source": "...", "name": "opt", "wait": true}
                     -> 200 the record (as records.jsonl holds it), or with "wait": false
                     -> 202 {"id": "<id>"}
    GET  /result/ID  -> 200 the record, or 202 {"id", "done": false} while it runs ("?wait=S" waits up to S s)
    GET  /health     -> 200 {"ok", "device", "run_id", "pending"}

A problem is named, never given as a file: the problem is the trusted reference and runs in the
trusted judge, so it is looked up by name inside the problem tree (config problems_dir), and a
path, `..` or a link out of the tree is refused; `serve --allow-problem-dir DIR` also takes the
`.py` files inside DIR.

Bad input is 400 with {"error": one line}: an empty or non-JSON body, an unknown field, a field
of the wrong type ("wait" is true or false), a problem that is not a name in the tree. A body
over MAX_BODY is 413, one without a length 411, a known path asked with another method 405 (with
`Allow`), an unknown path or id 404, a harness failure 500. With a token, every request needs
`Authorization: Bearer <token>` (else 401). The service runs what it is sent: bind it to
localhost (the default) or a private network, and set a token.

Built on the standard library's ThreadingHTTPServer: one thread per request, which blocks on its
record's future while the session's lanes do the work. Nothing here decides a verdict.
"""

from __future__ import annotations

import argparse
import ctypes
import hmac
import json
import math
import os
import socket
import sys
import threading
import traceback
import uuid
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import ParseResult, parse_qs, urlparse

from harness.api import Session
from harness.commands import (
    add_config_arguments,
    add_problems_dir_argument,
    load_config,
    problems_dir_override,
    sigterm_interrupts,
)
from harness.core.config import Device
from harness.core.errors import ExitCode, UserError, flat, one_line
from harness.core.records import CandidateRecord, to_dict
from harness.sources.problem import Problem, resolve_named_problem

MAX_BODY = 8 << 20  # a candidate's source and its JSON envelope
DRAIN_LIMIT = 64 << 20  # an oversized body up to this is read and dropped, so its client reads the 413
BODY_TIMEOUT = 60.0  # seconds a body may take to arrive
KEEP_RESULTS = 10_000  # finished results kept for GET /result, oldest dropped first
FIELDS = ("problem", "source", "name", "wait")  # a submission's fields
ROUTES = {"/evaluate": "POST", "/health": "GET", "/result/": "GET"}  # path (a prefix when it ends in /) -> method


class Refused(Exception):
    """A request answered with `status` and {"error": message}, before anything runs."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def submission(body: Any) -> tuple[str, str, Optional[str], bool]:
    """(problem, source, name, wait) of a POST /evaluate body; UserError for any other shape."""
    if not isinstance(body, dict):
        raise UserError("the body must be a JSON object with problem and source")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise UserError(f"unknown field {', '.join(map(repr, unknown))[:200]}: a submission has {', '.join(FIELDS)}")
    problem, source, name, wait = body.get("problem"), body.get("source"), body.get("name"), body.get("wait", True)
    if not isinstance(problem, str) or not isinstance(source, str):
        raise UserError("problem and source must be strings")
    if name is not None and not isinstance(name, str):
        raise UserError("name must be a string")
    if not isinstance(wait, bool):
        raise UserError(f"wait must be true or false, not {json.dumps(wait)[:40]}")
    return problem, source, name, wait


class Service:
    """The session, the problems it may judge, and the results of requests that did not wait.

    Problems are found by name in the session's problem tree (`resolve_named_problem`), and in
    `allow_problem_dir` when one is given; the Python API's callers may name files, clients may not."""

    def __init__(self, session: Session, token: str = "", allow_problem_dir: Optional[Path] = None) -> None:
        self.session, self.token, self.allow_problem_dir = session, token, allow_problem_dir
        self._futures: dict[str, Future[CandidateRecord]] = {}
        self._problems: dict[str, Problem] = {}
        self._lock = threading.Lock()

    def problem(self, query: str) -> Problem:
        """The problem a client names (UserError when it names none the service may judge)."""
        with self._lock:
            found = self._problems.get(query)
        if found is None:
            cfg = self.session.cfg
            found = resolve_named_problem(query, cfg.path(cfg.problems_dir), self.allow_problem_dir)
            try:
                _ = found.settings  # a malformed HARNESS_* declaration is bad input now, not in a lane
            except UserError as exc:  # named as the client named it, not by the server's path
                raise UserError(f"problem {query[:200]!r}: {str(exc).removeprefix(f'{found.path}: ')}") from None
            with self._lock:
                self._problems[query] = found
        return found

    def submit(self, body: Any) -> tuple[str, Future[CandidateRecord], bool]:
        """Queue a POST /evaluate body: (its id, its record's future, whether the client waits)."""
        query, source, name, wait = submission(body)
        future = self.session.submit(self.problem(query), source, name=name)
        ident = uuid.uuid4().hex
        with self._lock:
            self._futures[ident] = future
            while len(self._futures) > KEEP_RESULTS:
                oldest = next((k for k, f in self._futures.items() if f.done()), None)
                if oldest is None:
                    break
                del self._futures[oldest]
        return ident, future, wait

    def future(self, ident: str) -> Optional[Future[CandidateRecord]]:
        with self._lock:
            return self._futures.get(ident)


def record_json(record: CandidateRecord) -> dict[str, Any]:
    return {"kind": "candidate", **to_dict(record)}


def allowed_method(path: str) -> Optional[str]:
    """The method a known path takes (None: no such path)."""
    return next(
        (
            method
            for route, method in ROUTES.items()
            if path == route or (route.endswith("/") and path.startswith(route))
        ),
        None,
    )


class Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass `make_server` builds
    protocol_version = "HTTP/1.1"
    _body_pending = False  # the request has a body not read yet: the connection closes after the reply

    def do_GET(self) -> None:  # noqa: N802 (the standard library's names)
        self._route(self.command)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET  # noqa: N815

    def _route(self, method: str) -> None:
        self._body_pending = "Transfer-Encoding" in self.headers or self.headers.get(
            "Content-Length", "0"
        ).strip() not in ("", "0")
        if not self._authorised():
            return
        url = urlparse(self.path)
        allowed = allowed_method(url.path)
        if allowed is None:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path[:200]}"})
        elif method != allowed:
            self._reply(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": f"{url.path[:200]} takes {allowed}, not {method}"},
                {"Allow": allowed},
            )
        elif url.path == "/health":
            session = self.service.session
            self._reply(
                HTTPStatus.OK,
                {"ok": True, "device": session.device, "run_id": session.run_id, "pending": session.pending()},
            )
        elif url.path == "/evaluate":
            self._evaluate()
        else:
            self._result(url)

    def _evaluate(self) -> None:
        try:
            ident, future, wait = self.service.submit(self._body())
        except Refused as exc:
            self._reply(exc.status, {"error": str(exc)})
            return
        except UserError as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": flat(str(exc))})
            return
        except Exception as exc:  # a harness failure while queueing: the client hears of it, the log keeps it
            traceback.print_exc(file=sys.stderr)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": one_line(exc)})
            return
        if wait:
            self._answer(future, None, ident)
        else:
            self._reply(HTTPStatus.ACCEPTED, {"id": ident})

    def _result(self, url: ParseResult) -> None:
        """GET /result/ID: a bad `?wait=` is 400 whatever the id, then an unknown id 404."""
        given = parse_qs(url.query, keep_blank_values=True).get("wait", ["0"])[0]
        try:
            wait = float(given)
        except ValueError:
            wait = math.nan
        if not math.isfinite(wait) or wait < 0:
            message = f"wait must be a number of seconds (0 or more), not {json.dumps(given[:40])}"
            self._reply(HTTPStatus.BAD_REQUEST, {"error": message})
            return
        ident = url.path.removeprefix("/result/")
        future = self.service.future(ident)
        if future is None:
            self._reply(HTTPStatus.NOT_FOUND, {"error": "no such id"})
            return
        self._answer(future, min(wait, 600.0), ident)

    def _answer(self, future: Future[CandidateRecord], wait: Optional[float], ident: str) -> None:
        """The record once done (waiting up to `wait` s; None: until done), else 202."""
        try:
            record = future.result(wait)
        except TimeoutError:
            self._reply(HTTPStatus.ACCEPTED, {"id": ident, "done": False})
            return
        except BaseException as exc:  # a harness failure, or a session stopped under it
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": one_line(exc)})
            return
        self._reply(HTTPStatus.OK, record_json(record))

    def _body(self) -> Any:
        """The request's JSON body (Refused: none, too big, or not JSON)."""
        if "Transfer-Encoding" in self.headers:
            raise Refused(
                HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length (chunked bodies are not read)"
            )
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            raise Refused(HTTPStatus.BAD_REQUEST, "Content-Length must be a number of bytes")
        if length == 0:
            raise Refused(HTTPStatus.BAD_REQUEST, "the body is empty: send a JSON object with problem and source")
        if length > MAX_BODY:
            self._discard(length)
            raise Refused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body has {length} bytes; at most {MAX_BODY} are taken"
            )
        data = self._read(length)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {one_line(exc)[:200]}") from None

    def _read(self, length: int) -> bytes:
        """`length` bytes of body, waiting at most BODY_TIMEOUT for them (Refused: they did not come)."""
        self.connection.settimeout(BODY_TIMEOUT)
        try:
            data = self.rfile.read(length)
        except OSError:  # a timeout, or a client gone
            data = b""
        finally:
            self.connection.settimeout(None)
        if len(data) < length:
            raise Refused(HTTPStatus.BAD_REQUEST, f"the body ended after {len(data)} of its {length} bytes")
        self._body_pending = False
        return data

    def _discard(self, length: int) -> None:
        """Read and drop an oversized body (up to DRAIN_LIMIT), so that the client, still sending
        it, reads the answer instead of a reset connection; the connection closes after it."""
        left = length if length <= DRAIN_LIMIT else 0
        self.connection.settimeout(BODY_TIMEOUT)
        try:
            while left > 0 and (chunk := self.rfile.read(min(left, 1 << 16))):
                left -= len(chunk)
        except OSError:
            pass
        finally:
            self.connection.settimeout(None)
        self._body_pending = True

    def handle_expect_100(self) -> bool:
        """A client that asks before sending its body (`Expect: 100-continue`) hears 413 at once."""
        try:
            too_big = int(self.headers.get("Content-Length") or 0) > MAX_BODY
        except ValueError:
            too_big = False
        if not too_big:
            return super().handle_expect_100()
        self._body_pending = True  # never sent: the connection closes after the answer
        self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"the body is over {MAX_BODY} bytes"})
        return False

    def _authorised(self) -> bool:
        token = self.service.token
        given = self.headers.get("Authorization", "")
        if not token or hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
        if given.startswith("Bearer ") and given.removeprefix("Bearer ").strip():
            self._reply(HTTPStatus.UNAUTHORIZED, {"error": "the bearer token is not this server's"})
        else:
            self._reply(HTTPStatus.UNAUTHORIZED, {"error": "a bearer token is needed (Authorization: Bearer <token>)"})
        return False

    def _reply(self, status: HTTPStatus, payload: Any, headers: Optional[dict[str, str]] = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self._body_pending:  # what is left of the request would be read as the next one
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # requests are not logged; records are
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (while sending, or before its answer) is no error of the server's;
        anything else keeps the standard library's traceback on stderr."""
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            return
        super().handle_error(request, client_address)


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server for `service` (port 0: any free port; read it from server.server_address)."""
    handler = type("BoundHandler", (Handler,), {"service": service})
    return Server((host, port), handler)


# -- the command ------------------------------------------------------------------------------------------


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 = any free port, printed at start)"
    )
    parser.add_argument(
        "--token",
        default="",
        help="bearer token every request must carry (default: --token-file, else $HARNESS_TOKEN; none = no check); "
        "on the command line it is wiped from the process's arguments once read",
    )
    parser.add_argument("--token-file", metavar="FILE", help="read the bearer token from FILE (its first line)")
    add_problems_dir_argument(parser, "the problem tree (config problems_dir); clients name its problems, never files")
    parser.add_argument(
        "--allow-problem-dir",
        metavar="DIR",
        help="also take problem files a client names by path, when they lie inside DIR (symlinks resolved): the "
        "problem is the trusted reference, so name a directory only you write to",
    )
    add_config_arguments(parser, example="workers.warm_problems=4")
    parser.add_argument("--device", choices=Device.words(), help="where to run (default: config, auto)")


TOKEN_ENV = "HARNESS_TOKEN"


def take_token(args: argparse.Namespace) -> str:
    """The service's bearer token, from --token, --token-file or $HARNESS_TOKEN, kept from every process
    this one starts (candidates read their parent's environment and arguments through /proc): the
    variable leaves the environment, and a token given on the command line is wiped from this process's
    arguments (`wipe_argument`)."""
    from_env = os.environ.pop(TOKEN_ENV, "")
    if args.token:
        wipe_argument(args.token)
        return str(args.token)
    if args.token_file:
        try:
            return Path(args.token_file).expanduser().read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise UserError(f"--token-file {args.token_file}: {getattr(exc, 'strerror', None) or 'empty'}") from None
    return from_env


def wipe_argument(secret: str) -> bool:
    """Overwrite `secret` where the kernel keeps this process's command line (what /proc/<pid>/cmdline
    and ps show); True when it was found there. Linux only (the arguments' span is in /proc/self/stat)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of stat
    except (OSError, IndexError, ValueError):
        return False
    if not secret or end <= start:
        return False
    raw = ctypes.string_at(start, end - start)
    wanted, found = secret.encode(), False
    at = raw.find(wanted)
    while at >= 0:
        ctypes.memset(start + at, ord("*"), len(wanted))
        found = True
        at = raw.find(wanted, at + len(wanted))
    return found


def redacted(argv: Sequence[str], secret: str) -> list[str]:
    """The command line as the run header keeps it, the token replaced."""
    return [a.replace(secret, "***") if secret else a for a in argv]


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    token = take_token(args)
    args.token = token
    argv = redacted(argv, token)
    overrides: list[str] = []  # the command's own flags, over --set
    if args.device:
        overrides.append(f"device={args.device}")
    overrides += problems_dir_override(args)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.token:
        print(
            "warning: serving beyond this machine without --token: anyone who reaches the port runs code here",
            file=sys.stderr,
        )
    allow_dir = None
    if args.allow_problem_dir:
        allow_dir = Path(args.allow_problem_dir).expanduser().resolve()
        if not allow_dir.is_dir():
            raise UserError(f"--allow-problem-dir {args.allow_problem_dir}: not a directory")
        print(
            f"note: problem files inside {allow_dir} are taken by path: they run as trusted references", file=sys.stderr
        )
    cfg = load_config(args, overrides)
    with sigterm_interrupts(), Session(cfg, argv=argv, echo=True) as session:
        try:
            server = make_server(Service(session, args.token, allow_dir), args.host, args.port)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
        host, port = server.server_address[:2]
        assert isinstance(host, str)  # an internet (TCP) server's address, never a socket path in bytes
        print(
            f"serving on http://{host}:{port} (device {session.device}, records in {session.store.dir}); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            print("stopping: running evaluations are ended", file=sys.stderr)
            session.stop()
        finally:
            server.server_close()
    return int(ExitCode.OK)
