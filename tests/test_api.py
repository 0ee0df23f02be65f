"""The evaluation API (harness.api) and its HTTP service: verdicts as the command line gives them,
from many threads, with each lane's judge kept warm between submissions."""
import json
import threading
import urllib.error
import urllib.request

import pytest

from harness import api
from harness.core.errors import UserError
from harness.core.records import ReferenceRecord
from harness.core.status import Status
from harness.core.store import read_records
from tests.sources import HONEST_FORWARD, scale_bias_relu

pytestmark = pytest.mark.slow  # the evaluation API end to end: each test starts a session with judge and worker processes

PROBLEM = "1_Scale_Bias_ReLU"
OTHER = "2_Linear_GELU"

def null_candidate(name: str) -> str:
    """The problem's own Model, renamed ModelNew."""
    from harness.core.config import ROOT

    text = next((ROOT / "problems").rglob(f"{name}.py")).read_text()
    return text.replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,")


def source(wrong: bool = False, tag: int = 0) -> str:
    return scale_bias_relu(HONEST_FORWARD + (" + 1" if wrong else "")) + f"\n# variant {tag}\n"


def references(session) -> list[ReferenceRecord]:
    return [r for r in read_records(session.store.records_path) if isinstance(r, ReferenceRecord)]


def test_a_session_takes_submissions_from_many_threads_and_runs_the_reference_once(make_config):
    futures = {}
    errors = []
    with api.Session(make_config("timing.enabled=false")) as session:
        def client(index: int) -> None:
            try:
                for wrong in (False, True):
                    name = f"t{index}_{'wrong' if wrong else 'right'}"
                    futures[name] = session.submit(PROBLEM, source(wrong, index), name=name)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        records = {name: future.result(300) for name, future in futures.items()}
        summary = session.close()
        assert len(references(session)) == 1  # the lane's judge stayed up for all eight
    assert not errors
    assert len(records) == 8
    for name, record in records.items():
        assert record.identity.candidate == name and record.identity.problem == PROBLEM
        expected = Status.INCORRECT if name.endswith("wrong") else Status.CORRECT
        assert record.decision.status is expected, (name, record.decision.reason)
    assert summary.end.run_id == session.run_id
    assert sorted(r.identity.candidate for r in summary.records) == sorted(records) and len(summary.references) == 1  # what the session wrote
    assert (session.store.dir / "sources" / PROBLEM / "t0_right.py").read_text().strip() == source(False, 0).strip()


def test_evaluate_gives_one_record_like_a_run(make_config):
    record = api.evaluate(PROBLEM, source(), config=make_config(), overrides={"check.trials": 1})
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert record.identity.candidate.startswith("candidate_")
    assert record.timing.stats is not None and record.timing.speedup is not None  # timed in paired rounds, as a run times
    kinds = [type(r).__name__ for r in read_records(record_run(record))]
    assert kinds[0] == "RunHeader" and kinds[-1] == "RunEnd" and kinds.count("CandidateRecord") == 1


def record_run(record):
    from pathlib import Path

    return Path(record.identity.candidate_path).parents[2] / "records.jsonl"


def test_raw_completions_are_extracted_and_one_without_code_gets_its_verdict(make_config):
    completion = "Here is the kernel:\n```python\n" + source() + "```\nIt fuses the ops."
    with api.Session(make_config("timing.enabled=false")) as session:
        fenced = session.evaluate(PROBLEM, completion, name="fenced")
        empty = session.evaluate(PROBLEM, "I cannot write this kernel.", name="prose")
    assert fenced.decision.status is Status.CORRECT, fenced.decision.reason
    assert empty.decision.status is Status.EXTRACT_FAILED and "code" in empty.decision.reason


def test_bad_submissions_are_usage_errors_before_anything_runs(make_config):
    with api.Session(make_config("timing.enabled=false")) as session:
        with pytest.raises(UserError, match="no_such_problem|not found|no problem"):
            session.submit("no_such_problem", source())
        with pytest.raises(UserError, match="candidate name"):
            session.submit(PROBLEM, source(), name="../escape")
        session.submit(PROBLEM, source(), name="same").result(300)
        with pytest.raises(UserError, match="already used"):
            session.submit(PROBLEM, source(wrong=True), name="same")
        assert session.submit(PROBLEM, source(), name="same").result(300).decision.status is Status.CORRECT  # the same source again is fine
        with pytest.raises(UserError, match="already open"):
            api.Session(make_config())
    with pytest.raises(UserError, match="closed"):
        session.submit(PROBLEM, source())


def test_warm_problems_keep_each_problems_judge_between_alternating_submissions(make_config):
    alternating = [(PROBLEM, source(tag=i)) if i % 2 == 0 else (OTHER, null_candidate(OTHER) + f"# {i}\n") for i in range(4)]
    counts = {}
    for warm in (1, 2):
        with api.Session(make_config("timing.enabled=false", f"workers.warm_problems={warm}")) as session:
            for problem, text in alternating:
                assert session.evaluate(problem, text).decision.status is Status.CORRECT
        counts[warm] = len(references(session))
    assert counts == {1: 4, 2: 2}  # one judge per lane and problem while both stay warm


def test_a_run_queued_as_the_last_starts_no_judge_ahead_for_a_problem_that_will_not_come(make_config, tmp_path):
    # two candidates of one problem: when the lane starts the problem's judge, the second is still queued, but its
    # problem is warm on the lane, so no problem is left to come and no judge is started ahead; an open session
    # (more may be submitted) starts one
    from harness.sources.candidate import Candidate

    candidates = []
    for tag in (0, 1):
        path = tmp_path / f"c{tag}.py"
        path.write_text(source(tag=tag))
        candidates.append(Candidate(f"c{tag}", path))
    started = {}
    for last in (False, True):
        with api.Session(make_config("timing.enabled=false", "workers.prestart=always")) as session:
            futures = session.submit_all([(session.problem(PROBLEM), c) for c in candidates], last=last)
            assert [f.result(300).decision.status for f in futures] == [Status.CORRECT] * 2
            [lane] = session.executor.lanes
            started[last] = lane.launcher._judges_started
            if last:
                with pytest.raises(UserError, match="sealed"):
                    session.submit(PROBLEM, source(tag=2))
    assert started == {False: 1, True: 0}


def test_a_sealed_queue_says_what_is_to_come_and_takes_nothing_more():
    from harness.parent.executor import JobQueue
    from harness.sources.candidate import Candidate
    from harness.sources.problem import resolve_problem
    from harness.core.config import ROOT

    problem = resolve_problem(PROBLEM, ROOT / "problems")
    queue = JobQueue(lambda: None)
    queue.put([(problem, Candidate("a", ROOT / "a.py"))])
    assert queue.to_come() is None  # open: more may come
    queue.put([(problem, Candidate("b", ROOT / "b.py"))], last=True)
    assert queue.to_come() == [(str(problem.path), problem.hash)] * 2
    with pytest.raises(RuntimeError, match="sealed"):
        queue.put([(problem, Candidate("c", ROOT / "c.py"))])
    queue.take(lambda jobs: jobs[:1])
    assert len(queue.to_come()) == 1


def request(url, body=None, token=None):
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_http_service_evaluates_json_submissions(make_config):
    from harness.commands.serve import Service, make_server

    with api.Session(make_config("timing.enabled=false")) as session:
        server = make_server(Service(session, token="secret"), port=0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            assert request(f"{base}/health")[0] == 401  # no token
            status, health = request(f"{base}/health", token="secret")
            assert status == 200 and health["ok"] and health["device"] == session.device and health["run_id"] == session.run_id
            status, record = request(f"{base}/evaluate", {"problem": PROBLEM, "source": source(), "name": "posted"}, token="secret")
            assert status == 200 and record["decision"]["status"] == "correct" and record["identity"]["candidate"] == "posted"
            status, queued = request(f"{base}/evaluate", {"problem": PROBLEM, "source": source(wrong=True), "wait": False}, token="secret")
            assert status == 202
            status, later = request(f"{base}/result/{queued['id']}?wait=300", token="secret")
            assert status == 200 and later["decision"]["status"] == "incorrect"
            assert request(f"{base}/result/nope", token="secret")[0] == 404
            status, error = request(f"{base}/evaluate", b"{not json", token="secret")
            assert status == 400 and "not JSON" in error["error"]
            status, error = request(f"{base}/evaluate", {"problem": "no_such_problem", "source": source()}, token="secret")
            assert status == 400 and error["error"]
        finally:
            server.shutdown()
            server.server_close()


HANGING_PROBLEM = '''
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(0.1)

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
'''


def test_stopping_a_session_ends_a_hung_reference_at_once_and_writes_no_record(make_config, tmp_path):
    import time

    from harness.core.records import CandidateRecord

    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_Hang.py").write_text(HANGING_PROBLEM)
    session = api.Session(make_config(f"problems_dir={problems}", "timeouts.load=600"))
    future = session.submit("1_Hang", HANGING_PROBLEM.replace("class Model(", "class ModelNew("))
    time.sleep(8)  # the judge is inside the reference's forward
    started = time.monotonic()
    session.stop()
    session.close()
    assert time.monotonic() - started < 20
    assert future.done() and (future.cancelled() or future.exception() is not None)
    assert not [r for r in read_records(session.store.records_path) if isinstance(r, (CandidateRecord, ReferenceRecord))]


IDENTITY_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 1.0

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
"""

SLOW_CANDIDATE = """
import time
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(60)
        return x
"""


def test_a_worker_ended_by_a_stopped_session_writes_no_record_even_when_the_stop_is_slow(make_config, tmp_path, monkeypatch):
    # the stop kills the lane's workers; their lane sees SIGKILL at once and must not record it ("out of memory")
    # while the stop is still marking the evaluations stopped (it did, for two kernels of a stopped GPU run)
    import time

    from harness.core.records import CandidateRecord
    from harness.parent.evaluate import ProblemEvaluation

    slow_stop = ProblemEvaluation.stop

    def late(self):
        time.sleep(3)  # the lane has long seen its worker die
        slow_stop(self)

    monkeypatch.setattr(ProblemEvaluation, "stop", late)
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_Identity.py").write_text(IDENTITY_PROBLEM)
    session = api.Session(make_config(f"problems_dir={problems}", "timeouts.check=600"))
    future = session.submit("1_Identity", SLOW_CANDIDATE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(isinstance(r, ReferenceRecord) for r in read_records(session.store.records_path)):
        time.sleep(0.2)
    time.sleep(3)  # its worker is inside the 60 s forward
    session.stop()
    session.close()
    assert future.done() and (future.cancelled() or future.exception() is not None)
    assert not [r for r in read_records(session.store.records_path) if isinstance(r, CandidateRecord)]


DROPOUT_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.dropout = nn.Dropout(p=0.5)

    def forward(self, x):
        return torch.softmax(self.dropout(self.linear(x)), dim=1)

def get_inputs():
    return [torch.randn(16, 32)]

def get_init_inputs():
    return [32]
'''


def test_a_train_mode_dropout_reference_passes_its_null_candidate_and_fails_one_without_dropout(make_config, tmp_path):
    """KernelBench's level2/66 and 83 draw dropout masks in train mode: both sides are seeded alike
    before each checked call, so the same draws give the same masks; skipping dropout still fails."""
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_Dropout.py").write_text(DROPOUT_PROBLEM)
    null = DROPOUT_PROBLEM.replace("class Model(", "class ModelNew(")
    no_dropout = null.replace("self.dropout(self.linear(x))", "self.linear(x)")
    with api.Session(make_config(f"problems_dir={problems}", "timing.enabled=false", "check.gradients=fail")) as session:
        same = session.evaluate("1_Dropout", null, name="null")
        skipped = session.evaluate("1_Dropout", no_dropout, name="no_dropout")
    assert same.decision.status is Status.CORRECT, same.decision.reason
    assert same.checks.gradients == "match"
    assert skipped.decision.status is Status.INCORRECT and "train" in skipped.decision.reason


def test_async_tasks_await_their_records_without_blocking_the_event_loop(make_config):
    import asyncio

    async def main(session):
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        clock = asyncio.create_task(ticker())
        records = await asyncio.gather(*(asyncio.wrap_future(session.submit(PROBLEM, source(i == 1, i))) for i in range(2)))
        clock.cancel()
        return records, ticks

    with api.Session(make_config("timing.enabled=false")) as session:
        (right, wrong), ticks = asyncio.run(main(session))
    assert right.decision.status is Status.CORRECT and wrong.decision.status is Status.INCORRECT
    assert ticks > 10  # the loop kept running while the lanes worked
