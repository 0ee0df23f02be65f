"""The HTTP service (harness.commands.serve) judges only problems of its own tree, named, and answers bad HTTP
with the right status: a real server in this process, on the CPU. Most tests put a recording stand-in
for the session behind it (nothing is evaluated, so a refused request provably reaches no session);
the slow one runs a real session and a candidate that plants a problem file on disk."""
import contextlib
import http.client
import json
import os
import socket
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future
from pathlib import Path

import pytest

from harness.commands.serve import MAX_BODY, Service, make_server
from harness.core.errors import UserError
from harness.sources import problem as problem_module
from harness.sources.problem import resolve_named_problem
from tests.sources import scale_bias_relu

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py"

EVIL_PROBLEM = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
'''


class RecordingSession:
    """What the service uses of an api.Session: its config, its health fields and submit, which
    records each problem it is handed and leaves the future pending."""

    device, run_id = "cpu", "stand-in"

    def __init__(self, cfg):
        self.cfg = cfg
        self.submitted = []

    def pending(self):
        return 0

    def submit(self, problem, source, *, name=None):
        self.submitted.append(problem)
        return Future()


class Served:
    """A server on a free port over `session`, stopped on exit."""

    def __init__(self, session, allow_problem_dir=None, token=""):
        self.session = session
        self.server = make_server(Service(session, token, allow_problem_dir), port=0)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def call(self, path, body=None, method=None, headers=None):
        """(status, headers, JSON answer) of one request; `body` is JSON-encoded unless bytes."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method or ("POST" if data is not None else "GET"), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                return reply.status, reply.headers, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, json.loads(exc.read())

    def evaluate(self, problem, **fields):
        return self.call("/evaluate", {"problem": problem, "source": "class ModelNew: pass", "wait": False, **fields})


@pytest.fixture
def serve(make_config):
    """serve(*config overrides, allow_problem_dir=None, token=""): a Served over a RecordingSession."""
    def make(*overrides, allow_problem_dir=None, token=""):
        return Served(RecordingSession(make_config(*overrides)), allow_problem_dir, token)

    return make


@pytest.fixture
def outside(tmp_path):
    """A problem file outside every tree (as a client, or a candidate, could leave one in /tmp) that
    leaves a marker when imported: (the file, the marker)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    marker = tmp_path / "imported.marker"
    path = folder / "9_Evil.py"
    path.write_text(EVIL_PROBLEM.format(marker=str(marker)))
    return path, marker


@pytest.fixture
def tree(tmp_path, outside):
    """A problem tree with one honest problem and two links out of it: a file and a level folder."""
    root = tmp_path / "tree"
    (root / "level0").mkdir(parents=True)
    (root / "level0" / SHIPPED.name).write_text(SHIPPED.read_text())
    (root / "level0" / "9_Evil.py").symlink_to(outside[0])
    (root / "level7").symlink_to(outside[0].parent, target_is_directory=True)
    return root


def refused(served, query, marker):
    """The service's one-line 400 for `query`, which reached no session and imported nothing."""
    status, _, answer = served.evaluate(query)
    assert status == 400, (query, answer)
    assert isinstance(answer["error"], str) and answer["error"] and "\n" not in answer["error"], answer
    assert served.session.submitted == [] and not marker.exists()
    return answer["error"]


def test_paths_escapes_and_files_on_disk_are_refused_and_never_reach_the_session(serve, outside, tmp_path, monkeypatch):
    evil, marker = outside
    monkeypatch.chdir(tmp_path)  # the server's working folder holds .py files a path would reach
    (tmp_path / "evil.py").write_text(evil.read_text())
    (tmp_path / "evil.py.py").write_text(evil.read_text())
    queries = {
        str(evil): "files are not taken",  # absolute, in /tmp
        os.path.relpath(evil, ROOT / "problems"): "not a problem name",  # ../ out of the tree
        "level0/../../outside/9_Evil.py": "not a problem name",
        "../outside/9_Evil": "not a problem name",
        "outside/9_Evil.py": "no problem named 'outside/9_Evil.py'",  # looked up as a name, not opened
        "evil.py": "no problem named 'evil.py'",  # a name: never the file in the working folder
        "evil.py.py": "not a problem name",
        str(SHIPPED): "not a problem name",  # a shipped problem too, when given as a path
        "problems/level0/1_Scale_Bias_ReLU.py": "not a problem name",
        "/etc/passwd": "not a problem name",
        "level0\\..\\..\\outside\\9_Evil": "not a problem name",
        "": "not a problem name",
        "~/9_Evil.py": "not a problem name",
        "level0/1\x00": "not a problem name",
    }
    with serve() as served:
        for query, message in queries.items():
            assert message in refused(served, query, marker), query


def test_a_symlink_in_the_tree_to_a_file_outside_it_is_refused(serve, tree, outside):
    with serve(f"problems_dir={tree}") as served:
        for query in ("9_Evil", "level0/9_Evil", "level0/9", "level0/9_Evil.py"):
            assert "links out of the problem tree" in refused(served, query, outside[1])
        refused(served, "level7/9_Evil", outside[1])  # a level folder that links out
        status, _, _ = served.evaluate("level0/1_Scale_Bias_ReLU")
        assert status == 202 and served.session.submitted[0].path == tree / "level0" / SHIPPED.name


@pytest.mark.parametrize("query", ["1_Scale_Bias_ReLU", "level0/1_Scale_Bias_ReLU", "level0/1_Scale_Bias_ReLU.py", "level0/1", "1_Scale", "Scale_Bias"])
def test_a_shipped_problem_is_taken_by_name(serve, query):
    with serve() as served:
        status, _, answer = served.evaluate(query)
        assert status == 202 and answer["id"]
        assert [(p.name, p.level, p.path.resolve()) for p in served.session.submitted] == [("1_Scale_Bias_ReLU", "level0", SHIPPED)]


def test_allow_problem_dir_takes_files_inside_it_and_no_other(serve, tmp_path, outside):
    allowed = tmp_path / "allowed"
    (allowed / "level1").mkdir(parents=True)
    (allowed / "5_Mine.py").write_text(SHIPPED.read_text())
    (allowed / "level1" / "6_Nested.py").write_text(SHIPPED.read_text())
    (allowed / "7_Link.py").symlink_to(outside[0])
    (allowed / "notes.txt").write_text("not a problem")
    with serve(allow_problem_dir=allowed) as served:
        for query in (str(outside[0]), "../outside/9_Evil.py", "7_Link.py", str(allowed / "7_Link.py"), "notes.txt", str(allowed), f"{allowed}/../outside/9_Evil.py"):
            assert ".py file inside the directory problem files are taken from" in refused(served, query, outside[1])
        for query, name, level in ((str(allowed / "5_Mine.py"), "5_Mine", ""), ("5_Mine.py", "5_Mine", ""), ("level1/6_Nested.py", "6_Nested", "level1"), ("1_Scale_Bias_ReLU", "1_Scale_Bias_ReLU", "level0")):
            status, _, answer = served.evaluate(query)
            assert status == 202, (query, answer)
            got = served.session.submitted.pop()
            assert (got.name, got.level) == (name, level) and got.path.resolve().is_relative_to(allowed.resolve()) == (level != "level0")
    assert not outside[1].exists()


def test_a_refused_problem_is_named_as_the_client_gave_it_and_no_server_path_is_shown(serve, tree, outside, tmp_path):
    (tree / "level0" / "2_Bad.py").write_text(SHIPPED.read_text() + "\nHARNESS_TOLERANCES = [1]\n")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    queries = {
        "no_such_problem": "no problem named 'no_such_problem' in the problem tree",
        "level0/nope.py": "no problem named 'level0/nope.py' in the problem tree",
        "relu": "no problem named 'relu' in the problem tree; close matches: 1_Scale_Bias_ReLU",
        "../x.py": "problem '../x.py' is neither a problem name nor a .py file inside the directory",
        "9_Evil": "problem '9_Evil' links out of the problem tree",
        "level0/2_Bad": "problem 'level0/2_Bad': HARNESS_TOLERANCES must be a dict, got [1]",
        "notes.txt": "no problem named 'notes.txt' in the problem tree; nor is it a .py file inside the directory",
    }
    with serve(f"problems_dir={tree}", allow_problem_dir=allowed) as served:
        for query, message in queries.items():
            error = refused(served, query, outside[1])
            assert error.startswith(message), (query, error)
            assert str(tmp_path) not in error and str(ROOT) not in error and str(tree.resolve()) not in error, error


def test_names_never_reach_the_file_branch_of_the_resolver(tmp_path, monkeypatch):
    """Whatever a client sends, the resolver's path branch (a query ending in .py that is a file) is
    never taken: only names without .py and without a path reach it."""
    seen = []
    real = problem_module._resolve
    monkeypatch.setattr(problem_module, "_resolve", lambda query, problems_dir: seen.append(query) or real(query, problems_dir))
    monkeypatch.chdir(tmp_path)
    for name in ("a.py", "a.py.py", "level0/a.py.py", "b"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    for query in ("a.py", "a.py.py", "level0/a.py.py", "/tmp/x.py", "../a.py", "level0/../a.py", "./a.py", "b", str(tmp_path / "a.py"), "1_Scale_Bias_ReLU.py"):
        try:
            resolve_named_problem(query, ROOT / "problems")
        except UserError:
            pass
    assert seen and all(Path(q).suffix != ".py" and "/" not in q.removeprefix("level0/") and ".." not in q for q in seen), seen


def test_an_empty_body_is_400_and_says_so(serve):
    with serve() as served:
        status, _, answer = served.call("/evaluate", b"")
        assert status == 400 and "the body is empty" in answer["error"]
        status, _, answer = served.call("/evaluate", b"{not json")
        assert status == 400 and "not JSON" in answer["error"]
        status, _, answer = served.call("/evaluate", b"[" * 100_000)
        assert status == 400 and "not JSON" in answer["error"]
        status, _, answer = served.call("/evaluate", b"[]")
        assert status == 400 and "JSON object" in answer["error"]
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        conn.putrequest("POST", "/evaluate")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        conn.send(b"2\r\n{}\r\n0\r\n\r\n")
        reply = conn.getresponse()
        assert reply.status == 411 and "Content-Length" in json.loads(reply.read())["error"]
        assert served.session.submitted == []


@pytest.mark.parametrize("method, path, allow", [("GET", "/evaluate", "POST"), ("PUT", "/evaluate", "POST"), ("POST", "/health", "GET"), ("DELETE", "/result/abc", "GET"), ("PATCH", "/health", "GET")])
def test_a_known_path_asked_with_another_method_is_405_with_allow(serve, method, path, allow):
    with serve() as served:
        status, headers, answer = served.call(path, b"{}" if method in ("PUT", "POST", "PATCH") else None, method=method)
        assert status == 405 and headers["Allow"] == allow and allow in answer["error"]
        assert served.call("/nowhere", method=method)[0] == 404


def test_an_oversized_body_is_413_and_leaves_no_traceback(serve, capfd):
    with serve() as served:
        body = json.dumps({"problem": "1_Scale_Bias_ReLU", "source": "x" * MAX_BODY}).encode()
        status, headers, answer = served.call("/evaluate", body)
        assert status == 413 and str(MAX_BODY) in answer["error"] and headers["Connection"] == "close"
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as raw:  # asks first: never sends it
            raw.sendall(f"POST /evaluate HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
            assert raw.recv(1 << 16).startswith(b"HTTP/1.1 413")
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as raw:  # says it is huge, sends some, hangs up
            with contextlib.suppress(OSError):  # the server may answer and close before all of it is sent
                raw.sendall(f"POST /evaluate HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 40}\r\n\r\n".encode() + b"x" * (1 << 20))
        assert served.call("/health")[0] == 200  # still serving
        assert served.session.submitted == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception" not in err, err


@pytest.mark.parametrize("fields, message", [
    ({"wait": "no"}, "wait must be true or false"),
    ({"wait": 0}, "wait must be true or false"),
    ({"wait": None}, "wait must be true or false"),
    ({"name": 3}, "name must be a string"),
    ({"problem": 5}, "problem and source must be strings"),
    ({"source": ["x"]}, "problem and source must be strings"),
    ({"wiat": False}, "unknown field 'wiat'"),
])
def test_mistyped_fields_are_400(serve, fields, message):
    with serve() as served:
        status, _, answer = served.call("/evaluate", {"problem": "1_Scale_Bias_ReLU", "source": "x", **fields})
        assert status == 400 and message in answer["error"], answer
        assert served.session.submitted == []


def test_a_results_wait_must_be_a_number_of_seconds(serve):
    with serve() as served:
        status, _, queued = served.call("/evaluate", {"problem": "1_Scale_Bias_ReLU", "source": "x", "wait": False})
        assert status == 202
        for wait in ("abc", "-1", "nan", "inf"):
            status, _, answer = served.call(f"/result/{queued['id']}?wait={wait}")
            assert status == 400 and "wait must be a number" in answer["error"], wait
        assert served.call(f"/result/{queued['id']}?wait=0.1")[0] == 202  # still running


def test_a_results_bad_wait_is_400_whatever_the_id(serve):
    with serve() as served:
        for wait in ("xx", "", "-1"):
            status, _, answer = served.call(f"/result/no-such-id?wait={wait}")
            assert status == 400 and answer["error"] == f'wait must be a number of seconds (0 or more), not "{wait}"'
        status, _, answer = served.call("/result/no-such-id?wait=1")
        assert status == 404 and answer["error"] == "no such id"


def test_a_missing_token_and_a_wrong_token_are_both_401_and_told_apart(serve):
    with serve(token="secret") as served:
        for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Basic c2VjcmV0"}):
            status, _, answer = served.call("/health", headers=headers)
            assert status == 401 and answer["error"].startswith("a bearer token is needed"), headers
        for token in ("wrong", "secret2", "Secret"):
            status, _, answer = served.call("/health", headers={"Authorization": f"Bearer {token}"})
            assert status == 401 and answer["error"] == "the bearer token is not this server's", token
        assert served.call("/health", headers={"Authorization": "Bearer secret"})[0] == 200


def test_a_request_refused_before_its_body_was_read_closes_the_connection(serve):
    with serve(token="secret") as served:
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        conn.request("POST", "/evaluate", body=b'{"problem": "x", "source": "y"}')
        reply = conn.getresponse()
        assert reply.status == 401 and reply.getheader("Connection") == "close"
        reply.read()
        status, _, answer = served.call("/evaluate", {"problem": "1_Scale_Bias_ReLU", "source": "x", "wait": False}, headers={"Authorization": "Bearer secret"})
        assert status == 202


def test_serve_refuses_an_allow_problem_dir_that_is_no_directory(tmp_path, capsys):
    from harness.__main__ import main
    from harness.core.errors import ExitCode

    assert main(["serve", "--allow-problem-dir", str(tmp_path / "missing")]) == ExitCode.USAGE
    assert "--allow-problem-dir" in capsys.readouterr().err


def planting_candidate(planted: str, problem: str) -> str:
    """A correct candidate that leaves a problem file on disk when it is imported."""
    return scale_bias_relu(before=f"import pathlib\n\npathlib.Path({planted!r}).write_text({problem!r})")


@pytest.mark.slow  # a real session: judge and worker processes
def test_a_problem_file_a_candidate_wrote_is_refused_and_never_imported(make_config, tmp_path):
    from harness import api

    planted, marker = tmp_path / "planted" / "9_Planted.py", tmp_path / "imported.marker"
    planted.parent.mkdir()
    candidate = planting_candidate(str(planted), EVIL_PROBLEM.format(marker=str(marker)))
    # no boundary, so that the planted file exists: the service must refuse it by name alone
    with api.Session(make_config("timing.enabled=false", "sandbox.layer=off")) as session, Served(session) as served:
        status, _, record = served.call("/evaluate", {"problem": "1_Scale_Bias_ReLU", "source": candidate, "name": "planter"})
        assert status == 200 and record["decision"]["status"] == "correct", record
        written = session.store.dir / "sources" / "1_Scale_Bias_ReLU" / "planter.py"  # the session's copy of the source
        assert planted.is_file() and written.is_file()
        for query in (str(planted), os.path.relpath(planted), str(written), os.path.relpath(written), f"{written.parent.name}/{written.name}"):
            status, _, answer = served.call("/evaluate", {"problem": query, "source": candidate, "name": "again"})
            assert status == 400 and "problem" in answer["error"], (query, answer)
        status, _, record = served.call("/evaluate", {"problem": "level0/1", "source": candidate, "name": "by_id"})
        assert status == 200 and record["decision"]["status"] == "correct" and record["identity"]["problem"] == "1_Scale_Bias_ReLU"
        assert not marker.exists()
        # the marker works: the Python API, a trusted caller in this process, still takes a path, and the judge imports it
        session.evaluate(str(planted), "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clone()\n")
        assert marker.exists()
