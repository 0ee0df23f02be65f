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
from harness.parent.quiet import QuietHost
from harness.parent.supervise import Started, start_run

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
    """Hands start_run a process that authenticates its messages like a worker and sends one of an unknown type."""

    env: dict = {}
    quiet = QuietHost()  # an "off" host: touches nothing
    lane_index = 0

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
    with start_run(build(P.WorkerJob), timeouts=timeouts, memory_limit=0, log_path=tmp_path / "log", log_limit=1 << 16, cwd=tmp_path, launcher=_FakeLauncher()) as run:
        assert list(run.messages()) == []  # it never got as far as a message that needs an answer
    outcome = run.outcome
    assert outcome.failure == P.Failure(Status.FORGED_RESULT, "the worker sent a message of type 'Bogus', which workers do not send on the result channel")
    assert outcome.phase == "construct" and outcome.messages == (P.Phase("construct"),)


# -- each role's declared step order (protocol.STEPS) -----------------------------------------------

S = P.StepKind
OUT = (P.Output("Tensor"),)


def _refusal(role, steps, calls=3, gradients=True):
    """Why the last of `steps` (kind, index, outputs) is refused after the others ("" when every one is allowed)."""
    seen = []
    for kind, index, outputs in steps:
        why = P.out_of_order(role, seen, P.Step(kind, index, outputs), calls, gradients)
        if why:
            return why
        seen.append(kind)
    return ""


def _declared(role, calls, gradients=True, timed=True):
    """The steps STEPS declares for `role`, each call once, and the skippable ones when asked for."""
    wanted = {S.GRADS: gradients, S.TIMED: timed, S.STAGE: timed}
    steps = []
    for kind in P.STEPS[role]:
        if kind is S.CALL:
            steps += [(S.CALL, k, OUT) for k in range(calls)]
        elif wanted.get(kind, True):
            steps.append((kind, 0, () if kind is S.STAGE else OUT))
    return steps


@pytest.mark.parametrize("role, gradients, timed", [(P.Role.CANDIDATE, True, True), (P.Role.CANDIDATE, False, False), (P.Role.CANDIDATE, True, False), (P.Role.BASELINE, False, True), (P.Role.BASELINE, False, False)])
def test_the_declared_steps_of_each_role_are_allowed_in_their_order(role, gradients, timed):
    assert _refusal(role, _declared(role, 3, gradients, timed), gradients=gradients) == ""


@pytest.mark.parametrize("role, steps, gradients", [
    (P.Role.CANDIDATE, [(S.CALL, 0, OUT)], True),  # a call before same_seed
    (P.Role.CANDIDATE, [(S.SAME_SEED, 0, OUT), (S.CALL, 1, OUT)], True),  # a call skipped
    (P.Role.CANDIDATE, [(S.SAME_SEED, 0, OUT), (S.CALL, 0, OUT), (S.CALL, 0, OUT)], True),  # a call twice
    (P.Role.CANDIDATE, [(S.SAME_SEED, 0, OUT), (S.CALL, 0, OUT), (S.BUFFERS, 0, OUT)], True),  # buffers before every call
    (P.Role.CANDIDATE, _declared(P.Role.CANDIDATE, 3)[:4] + [(S.TIMED, 0, OUT)], True),  # timed without buffers
    (P.Role.CANDIDATE, _declared(P.Role.CANDIDATE, 3)[:5] + [(S.GRADS, 0, OUT)], False),  # gradients not asked for
    (P.Role.CANDIDATE, _declared(P.Role.CANDIDATE, 3)[:7] + [(S.BUFFERS, 0, OUT)], True),  # buffers after timed
    (P.Role.CANDIDATE, _declared(P.Role.CANDIDATE, 3)[:5] + [(S.TIMED, 0, OUT)], True),  # gradients asked for and left out
    (P.Role.CANDIDATE, [(S.SAME_SEED, 0, OUT), (S.SAME_SEED, 0, OUT)], True),  # a step again
    (P.Role.CANDIDATE, _declared(P.Role.CANDIDATE, 3)[:4] + [(S.STAGE, 0, ())], True),  # not a candidate's step
    (P.Role.BASELINE, [(S.SAME_SEED, 0, OUT)], False),  # not a baseline's step
    (P.Role.BASELINE, [(S.CALL, 0, OUT), (S.STAGE, 0, ())], False),  # staging before every call
    (P.Role.BASELINE, _declared(P.Role.BASELINE, 3, False, False) + [(S.STAGE, 0, OUT)], False),  # a stage with outputs
])
def test_a_step_out_of_its_roles_declared_order_is_refused(role, steps, gradients):
    assert "arrived out of the plan's order" in _refusal(role, steps, gradients=gradients)


def test_a_second_gradient_draw_follows_the_first_and_a_third_is_refused():
    declared = _declared(P.Role.CANDIDATE, 3)
    grads = declared.index((S.GRADS, 0, OUT))
    twice = declared[: grads + 1] + [(S.GRADS, 1, OUT)] + declared[grads + 1 :]
    assert _refusal(P.Role.CANDIDATE, twice) == ""
    assert "out of the plan's order" in _refusal(P.Role.CANDIDATE, declared[:grads] + [(S.GRADS, 1, OUT)])  # no first
    assert "out of the plan's order" in _refusal(P.Role.CANDIDATE, twice[: grads + 2] + [(S.GRADS, 2, OUT)])  # a third
    assert "out of the plan's order" in _refusal(P.Role.CANDIDATE, declared[: grads + 1] + [(S.GRADS, 0, OUT)])  # 0 again


def test_a_step_of_no_declared_kind_is_refused():
    assert P.out_of_order(P.Role.CANDIDATE, [], P.Step("bogus"), 3, True) == "unknown step 'bogus'"


@pytest.mark.parametrize("extra", [(), ("check.modes=[eval]",), ("check.repeats=0", "check.trials=1"), ("check.other_size=true", "check.trials=1")])
def test_a_baseline_makes_the_first_trials_calls_once_per_mode(make_config, extra):
    from harness.core.plan import Plan

    cfg = make_config(*extra)
    calls = Plan.fresh(cfg).calls
    assert P.role_calls(P.Role.BASELINE, calls) == calls[: len(cfg.check.modes)]
    assert P.role_calls(P.Role.CANDIDATE, calls) == calls


def test_check_seed_fixes_every_draw_of_the_plan_and_zero_leaves_them_secret(make_config):
    from harness.core.plan import Plan

    def draws(plan):
        return plan.construct_seed, plan.input_seeds, plan.gradient_seed, plan.rng_seed

    fixed = make_config("check.seed=7")
    assert draws(Plan.fresh(fixed)) == draws(Plan.fresh(fixed))  # the same draws in every run that sets it
    assert draws(Plan.fresh(make_config("check.seed=8"))) != draws(Plan.fresh(fixed))
    secret = make_config()
    assert secret.check.seed == 0
    assert draws(Plan.fresh(secret)) != draws(Plan.fresh(secret))
    assert len(set(Plan.fresh(fixed).input_seeds)) == len(Plan.fresh(fixed).input_seeds)  # each trial its own inputs


class _Judge:
    """A judge client that passes every step and records what it was asked."""

    def __init__(self):
        self.asked = []

    def request(self, message, timeout):
        from harness.core.records import CheckResult

        self.asked.append(message.step.step)
        return P.StepAnswer(check=CheckResult("ok", True, "ok", 3e-5, 1e-4, 0.0), staged=P.Staged(()))


def _compared_run(make_config, role):
    from harness.core.pairing import ProblemTiming
    from harness.core.plan import Plan
    from harness.parent.compared_pass import ComparedPass
    from harness.parent.compared_pass import Setting, Subject

    cfg = make_config("timing.enabled=false")
    run = ComparedPass(Setting(None, cfg, "cpu", None, None, 0, "", None, None), _Judge(), Plan.fresh(cfg), ProblemTiming("eager"), Subject(role, Path("x.py"), "x"))
    run.judge_session = P.SessionHandle(1, None, None, (), (), P.Staged(()))
    return run


def test_the_parent_passes_the_declared_steps_to_the_judge(make_config):
    run = _compared_run(make_config, P.Role.CANDIDATE)
    steps = _declared(P.Role.CANDIDATE, len(run.plan.calls), timed=False)
    replies = [run.on_step(P.Step(kind, index, outputs)) for kind, index, outputs in steps]
    assert not any(isinstance(r, P.Failure) for r in replies)
    assert run.client.asked == [kind for kind, _, _ in steps]


def test_the_parent_refuses_a_step_out_of_the_declared_order_before_the_judge_sees_it(make_config):
    run = _compared_run(make_config, P.Role.CANDIDATE)
    assert not isinstance(run.on_step(P.Step(S.SAME_SEED, 0, OUT)), P.Failure)
    refused = run.on_step(P.Step(S.BUFFERS, 0, OUT))
    assert refused == P.Failure(Status.FORGED_RESULT, "step buffers 0 arrived out of the plan's order (after same_seed)")
    assert run.client.asked == [S.SAME_SEED]
