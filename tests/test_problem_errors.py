"""A broken problem is reported as what broke: a get_inputs() that raises is `get_inputs failed`, not a
failed construction, and every candidate of it gets the status of a broken problem, `reference failed`."""

import pytest

from harness import api
from harness.core.plan import Plan
from harness.core.status import Status
from harness.judge.service import Judge
from harness.parent.lane_judge import LaneJudge
from harness.parent.compared_pass import Setting
from harness.sources.problem import resolve_problem

INPUTS_RAISE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    raise ValueError("no inputs today")

def get_init_inputs():
    return []
'''


@pytest.fixture
def problems(tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "1_Inputs_Raise.py").write_text(INPUTS_RAISE)
    return folder


def test_the_judge_names_a_get_inputs_that_raises(make_config, problems):
    cfg = make_config(f"problems_dir={problems}", "timing.enabled=false").for_problem({})
    problem = resolve_problem("1_Inputs_Raise", problems)
    setting = Setting(problem, cfg, "cpu", None, None, 0, problem.hash, None, None)
    report = Judge(setting.judge_job(Plan.fresh(cfg), measure=False), [].append).start()
    assert not report.ok and report.reason == "get_inputs failed: ValueError: no inputs today"


@pytest.mark.slow
def test_a_candidate_of_a_problem_whose_get_inputs_raises_gets_reference_failed_with_that_reason(make_config, problems):
    with api.Session(make_config(f"problems_dir={problems}", "timing.enabled=false")) as session:
        null = INPUTS_RAISE.replace("class Model(", "class ModelNew(")
        record = session.evaluate("1_Inputs_Raise", null, name="null")
    assert record.decision.status is Status.REFERENCE_FAILED
    assert record.decision.reason == "reference failed: get_inputs failed: ValueError: no inputs today"
