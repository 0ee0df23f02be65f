"""The typed messages of the data plane (harness.core.protocol): each one survives its JSON line, each of
their fields is read somewhere in the harness (a message nothing reads is a test failure), and a
worker's message of a type workers do not send is rejected."""
import ast
import dataclasses
import enum
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

from harness.core import protocol as P
from harness.core.config import ROOT, TimerSettings
from harness.core.status import Status
from harness.parent.supervise import Started, run_worker

HARNESS = Path(__file__).resolve().parent.parent / "harness"
JOBS = (P.WorkerJob, P.JudgeJob, TimerSettings)  # not messages of their own, but sent in one


def sample(tp, name="value", default=dataclasses.MISSING):
    """A value of type `tp` unlike any default: every field of a message set."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return sample(inner, name)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return (sample(args[0], name), sample(args[0], name))
        return tuple(sample(a, f"{name}{k}") for k, a in enumerate(args))
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        return {sample(key_type, f"{name}-key"): sample(value_type, name)}
    if dataclasses.is_dataclass(tp):
        return build(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)[-1]
    if tp is bool:
        return default is not True
    if tp is int:
        return 3
    if tp is float:
        return 1.5
    return f"{name}-text"  # str, and Any


def build(cls):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample(hints[f.name], f.name, f.default) for f in dataclasses.fields(cls) if f.init})  # derived fields (a timing's statistics) are computed


@pytest.mark.parametrize("name", sorted(P.MESSAGES))
def test_every_message_survives_its_json_line(name):
    message = build(P.MESSAGES[name])
    for field in dataclasses.fields(message):
        if field.default is not dataclasses.MISSING:
            assert getattr(message, field.name) != field.default, f"{name}.{field.name} kept its default: the round trip would not test it"
    line = P.dumps(message)
    assert P.decode(json.loads(line)) == message
    if type(message) in P.WORKER_MESSAGES:
        assert P.decode_worker(json.loads(json.dumps(P.encode(message), sort_keys=True))) == message


def test_a_job_survives_its_json_line():
    from harness.core.records import from_dict, to_dict

    for cls in JOBS:
        job = build(cls)
        assert from_dict(cls, json.loads(json.dumps(to_dict(job)))) == job


def _protocol_dataclasses(cls, seen):
    """`cls` and the protocol's own dataclasses in its fields (a Step's Outputs, a SessionHandle's Args...)."""
    if cls in seen:
        return
    seen.add(cls)
    for tp in typing.get_type_hints(cls).values():
        for inner in _types_in(tp):
            if dataclasses.is_dataclass(inner) and inner.__module__ == P.__name__:
                _protocol_dataclasses(inner, seen)


def _types_in(tp):
    yield tp
    for arg in typing.get_args(tp):
        yield from _types_in(arg)


def read_attributes(root: Path = HARNESS) -> set[str]:
    """Every `x.name` the harness reads (Load context), outside the protocol module itself."""
    names = set()
    for path in root.rglob("*.py"):
        if path.name == "protocol.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
    return names


def unread_fields(classes, names):
    seen = set()
    for cls in classes:
        _protocol_dataclasses(cls, seen)
    return sorted(f"{cls.__name__}.{f.name}" for cls in seen for f in dataclasses.fields(cls) if f.name not in names)


def test_every_field_of_every_message_is_read_somewhere():
    unread = unread_fields(list(P.MESSAGES.values()) + list(JOBS), read_attributes())
    assert not unread, f"sent and never read (read them, or stop sending them): {unread}"


def test_an_unread_field_is_caught():
    @dataclasses.dataclass(frozen=True)
    class Noted:
        phase: str  # read: the parent reads Phase.phase
        never_read_anywhere_xyz: str = ""

    assert unread_fields([Noted], read_attributes()) == ["Noted.never_read_anywhere_xyz"]


@pytest.mark.parametrize("data, why", [
    ({"type": "Bogus", "body": {}}, "of type 'Bogus', which workers do not send"),
    ({"type": "StepAnswer", "body": {}}, "of type 'StepAnswer', which workers do not send"),  # the judge's, not a worker's
    ({"type": "Phase", "body": {"phase": "load", "extra": 1}}, "a malformed Phase message"),
    ({"type": "Failed", "body": {"status": "no such status", "reason": "x"}}, "a malformed Failed message"),
    ({"type": "Done"}, "without a type and body"),
])
def test_a_worker_message_workers_do_not_send_is_rejected(data, why):
    with pytest.raises(ValueError, match=why):
        P.decode_worker(data)


FAKE_WORKER = """
import json, sys
from harness.core.channel import ChannelWriter
launch = json.loads(sys.stdin.readline())
channel = ChannelWriter(launch["result_fd"], launch["key"])
channel.send({"type": "Phase", "body": {"phase": "construct"}})
channel.send({"type": "Bogus", "body": {"anything": 1}})
sys.stdin.readline()
"""


class _FakeLauncher:
    """Hands run_worker a process that authenticates its messages like a worker and sends one of an unknown type."""

    env: dict = {}

    def take(self):
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, "-c", FAKE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True, cwd=ROOT, env=env)
        os.close(write_fd)
        return Started(proc, read_fd, write_fd)

    def release(self, proc):
        pass


def test_a_message_of_an_unknown_type_ends_the_worker_as_a_forged_result(tmp_path):
    timeouts = types.SimpleNamespace(load=60, construct=60)
    outcome = run_worker(build(P.WorkerJob), timeouts=timeouts, memory_limit=0, log_path=tmp_path / "log", log_limit=1 << 16, cwd=tmp_path, launcher=_FakeLauncher())
    assert outcome.failure == (Status.FORGED_RESULT, "the worker sent a message of type 'Bogus', which workers do not send on the result channel")
    assert outcome.phase == "construct" and outcome.messages == (P.Phase("construct"),)
