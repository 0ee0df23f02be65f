"""KernelBench's eval runs the problem file and the sample in one namespace, so a sample may use the
problem's helpers and sizes. Under configs/kernelbench.yaml (check.problem_globals) it sees them; under
the default profile its NameError says that the name is defined only in the problem file."""

import pytest

from harness import api
from harness.core.status import Status

pytestmark = pytest.mark.slow  # real workers

USES_PROBLEM_GLOBALS = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features_, scale_):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))  # `features` and `scale` are the problem file's globals
        self.scale = scale

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)
'''


def _overrides(tmp_path, build_cache, measurement_cache):
    return [f"results_dir={tmp_path}", f"build_cache_dir={build_cache}", f"measurement_cache_dir={measurement_cache}",
            "device=cpu", "timing.enabled=false", "check.trials=1", "flags.no_custom_kernel=flag"]


def test_under_the_kernelbench_profile_a_sample_sees_the_problem_files_globals(tmp_path, build_cache, measurement_cache):
    record = api.evaluate("1_Scale_Bias_ReLU", USES_PROBLEM_GLOBALS, config="configs/kernelbench.yaml", overrides=_overrides(tmp_path, build_cache, measurement_cache))
    assert record.decision.status is Status.CORRECT, record.decision.reason


def test_under_the_default_profile_the_failure_names_the_missing_global_and_where_it_is_defined(tmp_path, build_cache, measurement_cache):
    record = api.evaluate("1_Scale_Bias_ReLU", USES_PROBLEM_GLOBALS, overrides=_overrides(tmp_path, build_cache, measurement_cache))
    assert record.decision.status is Status.CONSTRUCT_FAILED, record.decision.reason
    assert "NameError: name 'features' is not defined" in record.decision.reason
    assert "features is defined only in the problem file" in record.decision.reason and "check.problem_globals" in record.decision.reason


def test_a_name_the_problem_does_not_define_gets_no_such_hint(tmp_path, build_cache, measurement_cache):
    source = USES_PROBLEM_GLOBALS.replace("torch.randn(features)", "torch.randn(nowhere)")
    record = api.evaluate("1_Scale_Bias_ReLU", source, config="configs/kernelbench.yaml", overrides=_overrides(tmp_path, build_cache, measurement_cache))
    assert record.decision.status is Status.CONSTRUCT_FAILED and "defined only in the problem file" not in record.decision.reason
