"""Float32 by one rule in a deep network: a candidate that turns TF32 on for its convolutions and matmuls (as
kbcorpus2's `l3_p10` does in its constructor) rounds every layer's operands, not only the first layer's. The
judge's yardstick for a failed float32 check therefore runs the reference with TF32 on as well, on its inputs and
weights cut to TF32, so that candidate reads `less precise`. The same network in float32 reads `correct`, and one
that drops a layer's ReLU reads `incorrect` (skipped without a GPU).

Emulated on the CPU (every layer's operands cut to TF32 against float64, weights as the judge randomises them), the
TF32 network's relative error is 1.0e-3 with 72% of its elements outside the float32 tolerance; cutting only the
first layer's inputs and the weights gives 6.3e-4, under which the candidate would read `incorrect`."""

import pytest

from harness.core.status import Status
from tests.evaluations import evaluate_in_mode

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

MODEL = '''import torch
import torch.nn as nn


class {name}(nn.Module):
    def __init__(self, channels, depth):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(depth))
        self.head = nn.Linear(channels, channels)

    def forward(self, x):
        {before}
        for index, conv in enumerate(self.convs):
            x = conv(x) if {skip} else torch.relu(conv(x))
            x = x / x.pow(2).mean().sqrt()  # each layer's output at unit scale, so none fades into the tolerance's atol
        # every pixel's channels through the head: a mean over the pixels would average TF32's error away
        return self.head(x.permute(0, 2, 3, 1))
'''

PROBLEM = MODEL.format(name="Model", before="pass", skip="False") + '''

def get_inputs():
    return [torch.randn(16, 64, 32, 32)]


def get_init_inputs():
    return [64, 8]
'''

CANDIDATES = {
    "float32": MODEL.format(name="ModelNew", before="pass", skip="False"),
    # TF32 for every convolution and matmul of its process, as a constructor that sets the backends' flags does
    "tf32_layers": MODEL.format(
        name="ModelNew", before="torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True", skip="False"
    ),
    # a wrong network: the last convolution's ReLU left out
    "no_last_relu": MODEL.format(name="ModelNew", before="pass", skip="index == len(self.convs) - 1"),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory, build_cache):
    root = tmp_path_factory.mktemp("tf32-layers")
    problems = root / "problems"
    problems.mkdir()
    (problems / "conv_stack.py").write_text(PROBLEM)
    return evaluate_in_mode(
        root, build_cache, "conv_stack", problems, list(CANDIDATES.items()), "eager", "flags.no_custom_kernel=flag"
    )


def test_a_network_whose_every_layer_runs_in_tf32_is_less_precise(records):
    record = records["tf32_layers"]
    assert record.decision.status is Status.LESS_PRECISE, (record.decision.status, record.decision.reason)
    assert "below-float32" in [f.code for f in record.integrity.flags]


def test_the_same_network_in_float32_is_correct_and_a_wrong_one_incorrect(records):
    assert records["float32"].decision.status is Status.CORRECT, records["float32"].decision.reason
    wrong = records["no_last_relu"].decision
    assert wrong.status is Status.INCORRECT, (wrong.status, wrong.reason)
