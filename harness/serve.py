"""A thin HTTP service over one api.Session, for trainers on other machines: JSON in, records out.

    POST /evaluate   {"problem": "19_ReLU", "source": "...", "name": "opt", "wait": true}
                     -> 200 the record (as records.jsonl holds it), or with "wait": false
                     -> 202 {"id": "<id>"}
    GET  /result/ID  -> 200 the record, or 202 {"id", "done": false} while it runs ("?wait=S" waits up to S s)
    GET  /health     -> 200 {"ok", "device", "run_id", "pending"}

Bad input is 400 with {"error": one line}; an unknown id 404; a harness failure 500. With a
token, every request needs `Authorization: Bearer <token>` (else 401). The service runs what it
is sent: bind it to localhost (the default) or a private network, and set a token.

Built on the standard library's ThreadingHTTPServer: one thread per request, which blocks on its
record's future while the session's lanes do the work. Nothing here decides a verdict.
"""

from __future__ import annotations

import hmac
import json
import threading
import uuid
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

from harness.api import Session
from harness.errors import UserError, one_line
from harness.records import CandidateRecord, to_dict

MAX_BODY = 8 << 20  # a candidate's source and its JSON envelope
KEEP_RESULTS = 10_000  # finished results kept for GET /result, oldest dropped first


class Service:
    """The session and the results of requests that did not wait for them."""

    def __init__(self, session: Session, token: str = "") -> None:
        self.session, self.token = session, token
        self._futures: dict[str, Future[CandidateRecord]] = {}
        self._lock = threading.Lock()

    def submit(self, body: Any) -> tuple[str, Future[CandidateRecord]]:
        if not isinstance(body, dict):
            raise UserError("the body must be a JSON object with problem and source")
        problem, source, name = body.get("problem"), body.get("source"), body.get("name")
        if not isinstance(problem, str) or not isinstance(source, str):
            raise UserError("problem and source must be strings")
        if name is not None and not isinstance(name, str):
            raise UserError("name must be a string")
        future = self.session.submit(problem, source, name=name)
        ident = uuid.uuid4().hex
        with self._lock:
            self._futures[ident] = future
            while len(self._futures) > KEEP_RESULTS:
                oldest = next((k for k, f in self._futures.items() if f.done()), None)
                if oldest is None:
                    break
                del self._futures[oldest]
        return ident, future

    def future(self, ident: str) -> Optional[Future[CandidateRecord]]:
        with self._lock:
            return self._futures.get(ident)


def record_json(record: CandidateRecord) -> dict[str, Any]:
    return {"kind": "candidate", **to_dict(record)}


class Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass `make_server` builds
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        if not self._authorised():
            return
        url = urlparse(self.path)
        if url.path == "/health":
            session = self.service.session
            self._reply(HTTPStatus.OK, {"ok": True, "device": session.device, "run_id": session.run_id, "pending": session.pending()})
        elif url.path.startswith("/result/"):
            future = self.service.future(url.path.removeprefix("/result/"))
            if future is None:
                self._reply(HTTPStatus.NOT_FOUND, {"error": "no such id"})
                return
            try:
                wait = min(float(parse_qs(url.query).get("wait", ["0"])[0]), 600.0)
            except ValueError:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": "wait must be a number of seconds"})
                return
            self._answer(future, wait, url.path.removeprefix("/result/"))
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorised():
            return
        if urlparse(self.path).path != "/evaluate":
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
            return
        try:
            body = self._body()
            ident, future = self.service.submit(body)
        except UserError as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        if body.get("wait", True) is False:
            self._reply(HTTPStatus.ACCEPTED, {"id": ident})
        else:
            self._answer(future, None, ident)

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
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY:
            raise UserError(f"the body must be a JSON object of at most {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"the body is not JSON: {exc}") from None

    def _authorised(self) -> bool:
        token = self.service.token
        given = self.headers.get("Authorization", "")
        if not token or hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
        self._reply(HTTPStatus.UNAUTHORIZED, {"error": "a bearer token is needed (Authorization: Bearer <token>)"})
        return False

    def _reply(self, status: HTTPStatus, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # requests are not logged; records are
        pass


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server for `service` (port 0: any free port; read it from server.server_address)."""
    handler = type("BoundHandler", (Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
