import ast
import hashlib
import random
from pathlib import Path

import pytest

from harness.sources.extract import Extraction, extract_code

# The five seed completions, copied byte for byte from the shared seed folder into the repo, so that CI,
# which has the repo only, runs every seed test.
SEEDS = Path(__file__).resolve().parent / "data" / "seeds"
SEED_SHA256 = {
    "000_ede69be24d22c528.txt": "3d2f92c689dec708aca9ba5ab16fac0d270e3912d967be1403134ac6c80ad2ac",
    "001_c0eeb23014eea263.txt": "993aa0cb3014c592d0f5b10e08aef8fa2acdaca6ec2e49017cca1d2779d0d7eb",
    "002_aa254fe8bb8f0033.txt": "eeaf12c4135de54ccf59ee753cd1bec2a0d8242534b9c795198477e8395fc184",
    "003_f5bdc30c544e9209.txt": "4581c080d6b7a0675ebc507f1d688f7b8b189f34fb7c2aa7c6bd981848c3a911",
    "004_f8fff41f0c416267.txt": "0fc1d631b9448f0f00fd104053374589066c6736e91f634519d120a0356a017c",
}


def seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def fenced(code: str, fence: str = "```python", close: str = "```") -> str:
    return f"{fence}\n{code}{close}\n"


MODEL = """\
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""
DRAFT = """\
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x * 0  # draft
"""


# ---------------------------------------------------------------- real seeds

# Each ok seed: a line only the final block has, and one only an earlier draft has.
OK_SEEDS = {
    # <think> with drafts as prose, then one closed block.
    "001_c0eeb23014eea263.txt": (
        "self.fused_kernel = fused_bias_add_swish  # Loaded CUDA module",
        "self.fused_kernel = fused_bias_add_swish  # The loaded module",
        "final Python block (block 1 of 1, ```python), after 1 <think> section",
    ),
    # The prompt echo holds a ModelNew skeleton in a block; the answer after </think> wins.
    "002_aa254fe8bb8f0033.txt": (
        'name="fused_ops",',
        "# Initialize custom fused modules here",
        "final Python block (block 2 of 2, ```python); 1 earlier Python block ignored, after 1 <think> section",
    ),
    # A closed block, then ~190 lines that start with "``` " and prose.
    "004_f8fff41f0c416267.txt": (
        'extra_cflags=["-std=c++14"],',
        "self.fused_sigmoid_scale_add = fused_sigmoid_scale_add",
        "final Python block (block 1 of 1, ```python)",
    ),
}


@pytest.mark.parametrize("name", sorted(OK_SEEDS))
def test_seed_extracts_the_final_complete_block(name: str) -> None:
    wanted, draft, reason = OK_SEEDS[name]
    result = extract_code(seed(name))
    assert result.kind == "ok"
    assert result.reason == reason
    assert parses(result.code)
    assert "class ModelNew(nn.Module):" in result.code
    assert wanted in result.code
    assert draft not in result.code
    assert result.code.startswith("import torch\n")
    assert result.code.endswith("\n") and not result.code.endswith("\n\n")


def test_seed_001_code_is_exactly_the_block_after_think() -> None:
    text = seed("001_c0eeb23014eea263.txt")
    block = text.split("</think>\n\n```python\n", 1)[1].rsplit("```", 1)[0]
    assert extract_code(text).code == block


def test_seed_004_prose_fence_lines_are_not_code() -> None:
    code = extract_code(seed("004_f8fff41f0c416267.txt")).code
    assert "```" not in code
    assert code.rstrip().endswith("return self.fused_sigmoid_scale_add.fused_sigmoid_scale_add_cuda(linear_out, self.scaling_factor)")


def test_seed_000_is_truncated_inside_model_new_init() -> None:
    # The only block is never closed; it parses, but ModelNew stops after self.gemm: cut off.
    text = seed("000_ede69be24d22c528.txt")
    assert 'name="fused_activation",' in text.rsplit("```python", 1)[1]
    result = extract_code(text)
    assert result == Extraction(
        None,
        "final Python block (block 1 of 1, ```python) is never closed and its class ModelNew "
        "has no forward method: cut off inside the class",
        "truncated",
    )


def test_seed_003_is_truncated_inside_the_cuda_source_string() -> None:
    result = extract_code(seed("003_f5bdc30c544e9209.txt"))
    assert result.kind == "truncated"
    assert result.code is None
    assert result.reason.startswith("final Python block (block 1 of 1, ```python) is never closed and does not parse: ")
    assert "unterminated triple-quoted string literal" in result.reason
    assert "(line 876 of the completion)" in result.reason  # where fused_scale_bn_source opens


def test_seed_000_with_forward_but_no_closing_fence_is_accepted() -> None:
    text = seed("000_ede69be24d22c528.txt").rstrip() + "\n\n    def forward(self, x):\n        return x\n"
    result = extract_code(text)
    assert result.kind == "ok"
    assert "never closed but the code is complete" in result.reason
    assert 'name="fused_activation",' in result.code and parses(result.code)


def test_seed_004_closed_only_by_a_prose_fence_line_gives_the_same_code() -> None:
    text = seed("004_f8fff41f0c416267.txt")
    lines = text.split("\n")
    assert lines[431] == "```" and lines[432].startswith("``` This code replaces")
    result = extract_code("\n".join(lines[:431] + lines[432:]))
    assert result.kind == "ok"
    assert "closed by a fence line followed by prose" in result.reason
    assert result.code == extract_code(text).code


def test_seed_001_with_think_opener_in_the_prompt_gives_the_same_code() -> None:
    text = seed("001_c0eeb23014eea263.txt")
    assert extract_code(text.replace("<think>", "", 1)).code == extract_code(text).code


def test_seed_001_cut_off_while_thinking_is_truncated() -> None:
    text = seed("001_c0eeb23014eea263.txt")
    result = extract_code(text.split("</think>")[0])
    assert result == Extraction(
        None, "completion ends inside an unclosed <think> section (opened at line 26)", "truncated"
    )


def test_seed_002_with_crlf_and_bom_gives_the_same_code() -> None:
    text = seed("002_aa254fe8bb8f0033.txt")
    assert extract_code("\ufeff" + text.replace("\n", "\r\n")).code == extract_code(text).code


def test_repo_holds_the_five_seeds_unchanged() -> None:
    assert sorted(p.name for p in SEEDS.glob("*.txt")) == sorted(SEED_SHA256)
    for name, digest in SEED_SHA256.items():
        assert hashlib.sha256((SEEDS / name).read_bytes()).hexdigest() == digest, name


# ---------------------------------------------------------------- think sections


def test_closed_think_section_is_dropped() -> None:
    text = "<think>\nmaybe:\n" + fenced(DRAFT) + "</think>\n\n" + fenced(MODEL)
    result = extract_code(text)
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 1, ```python), after 1 <think> section"


def test_several_think_sections_are_dropped() -> None:
    text = "<think>a</think>\nintro\n<think>\n" + fenced(DRAFT) + "</think>\n" + fenced(MODEL) + "<think>done</think>\n"
    result = extract_code(text)
    assert result.code == MODEL
    assert result.reason.endswith("after 3 <think> sections")


def test_code_only_inside_think_is_not_extracted() -> None:
    result = extract_code("<think>\n" + fenced(MODEL) + "</think>\nI cannot answer.")
    assert result.kind == "no_code"


def test_unclosed_think_is_truncated() -> None:
    result = extract_code("Question?\n<think>\nLet me write\n" + fenced(MODEL))
    assert result == Extraction(
        None, "completion ends inside an unclosed <think> section (opened at line 2)", "truncated"
    )


def test_unclosed_final_think_is_truncated_even_after_an_answer() -> None:
    text = "<think>a</think>\n" + fenced(MODEL) + "<think>\nWait, let me reconsider"
    assert extract_code(text).kind == "truncated"


def test_lone_closing_think_drops_everything_before_it() -> None:
    text = "reasoning whose <think> was in the prompt\n" + fenced(DRAFT) + "</think>\n" + fenced(MODEL)
    result = extract_code(text)
    assert result.code == MODEL
    assert "block 1 of 1" in result.reason


def test_think_tags_are_case_insensitive() -> None:
    assert extract_code("<THINK>\n" + fenced(DRAFT) + "</Think>\n" + fenced(MODEL)).code == MODEL


def test_parse_error_lines_count_in_the_original_completion_despite_think() -> None:
    text = "<think>\n1\n2\n3\n</think>\n```python\nclass ModelNew:\n    def forward(self\n```\n"
    result = extract_code(text)
    assert result.kind == "ok"
    assert "at line 2 (line 8 of the completion)" in result.reason


# ---------------------------------------------------------------- fences


@pytest.mark.parametrize("fence", ["```python", "```py", "```Python", "``` python", "```python3", "~~~python", "````python"])
def test_python_fence_variants(fence: str) -> None:
    close = fence.split("p")[0].split("P")[0].strip()
    result = extract_code("Here:\n" + fenced(MODEL, fence, close) + "Done.\n")
    assert result.kind == "ok"
    assert result.code == MODEL


def test_tilde_block_is_not_closed_by_backticks() -> None:
    code = 'import torch\nclass ModelNew:\n    doc = """\n```\n"""\n    def forward(self, x):\n        return x\n'
    assert extract_code(fenced(code, "~~~python", "~~~")).code == code


def test_untagged_block_that_looks_like_python_counts() -> None:
    result = extract_code("Code:\n" + fenced(MODEL, "```") + "Bye")
    assert result.code == MODEL
    assert "(block 1 of 1, ```)" in result.reason


def test_untagged_block_that_parses_as_statements_counts() -> None:
    result = extract_code("```\nx = 1\ny = x + 2\n```\n")
    assert result.kind == "ok" and result.code == "x = 1\ny = x + 2\n"


@pytest.mark.parametrize("content", ["nvcc --version\n", "Hello\n", "$ pip install torch\n", "torch.Size([2, 3])\n"])
def test_untagged_block_that_is_not_python_is_skipped(content: str) -> None:
    result = extract_code(fenced(MODEL) + "Output:\n" + fenced(content, "```"))
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 2, ```python)"


def test_cpp_block_before_the_python_block_is_skipped() -> None:
    cpp = "__global__ void k(float* x) {}\nclass ModelNew {};\n"
    result = extract_code("Kernel:\n" + fenced(cpp, "```cpp") + "Model:\n" + fenced(MODEL))
    assert result.code == MODEL
    assert result.reason == "final Python block (block 2 of 2, ```python)"


@pytest.mark.parametrize("tag", ["cpp", "c++", "cuda", "bash", "text", "json", "CUDA"])
def test_non_python_tags_are_skipped(tag: str) -> None:
    result = extract_code(fenced(MODEL) + fenced(DRAFT, f"```{tag}"))
    assert result.code == MODEL


def test_only_non_python_blocks_is_no_code() -> None:
    result = extract_code("```cuda\n__global__ void k() {}\n```\n")
    assert result == Extraction(
        None, "no Python code block (1 fenced block: cuda) and the text is not Python", "no_code"
    )


def test_closing_fence_followed_by_prose_closes_the_block() -> None:
    text = "```python\n" + MODEL + "``` The implementation's correctness is ensured by fusion.\nMore words.\n"
    result = extract_code(text)
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 1, ```python); closed by a fence line followed by prose"


def test_prose_lines_starting_with_a_fence_after_a_closed_block_are_ignored() -> None:
    text = fenced(MODEL) + "``` This code is fast.\n``` It uses `load_inline`.\n``` The end.\n"
    result = extract_code(text)
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 1, ```python)"


def test_closing_fence_with_trailing_spaces_closes_the_block() -> None:
    assert extract_code("```python\n" + MODEL + "```   \nok\n").code == MODEL


def test_python_fence_inside_a_block_closes_the_forgotten_one_and_opens_a_new_one() -> None:
    text = "```python\n" + DRAFT + "\nFixed version:\n```python\n" + MODEL + "```\n"
    result = extract_code(text)
    assert result.code == MODEL
    assert "block 2 of 2" in result.reason


def test_fence_indented_in_a_list_item_is_dedented() -> None:
    indented = "".join("   " + line if line.strip() else line for line in MODEL.splitlines(keepends=True))
    text = "1. The code:\n   ```python\n" + indented + "   ```\n"
    assert extract_code(text).code == MODEL


def test_empty_python_block_is_skipped() -> None:
    result = extract_code(fenced(MODEL) + "```python\n\n```\n")
    assert result.code == MODEL


# ---------------------------------------------------------------- choosing the block


def test_last_block_defining_model_new_wins_over_earlier_drafts() -> None:
    result = extract_code("Draft:\n" + fenced(DRAFT) + "Final:\n" + fenced(MODEL))
    assert result.code == MODEL
    assert result.reason == "final Python block (block 2 of 2, ```python); 1 earlier Python block ignored"


def test_block_defining_model_new_wins_over_a_later_usage_example() -> None:
    usage = "model = ModelNew()\nprint(model(1))\n"
    result = extract_code(fenced(DRAFT) + fenced(MODEL) + "Usage:\n" + fenced(usage))
    assert result.code == MODEL
    assert result.reason == (
        "last Python block defining ModelNew (block 2 of 3, ```python); 1 later Python block without it; "
        "1 earlier Python block ignored"
    )


def test_final_python_block_is_taken_when_none_defines_model_new() -> None:
    result = extract_code(fenced("x = 1\n") + fenced("def f():\n    return 2\n"))
    assert result.code == "def f():\n    return 2\n"
    assert result.reason == (
        "final Python block (block 2 of 2, ```python); no block defines class ModelNew; 1 earlier Python block ignored"
    )


# ---------------------------------------------------------------- unclosed final block


def test_unclosed_final_block_that_does_not_parse_is_truncated() -> None:
    text = "Answer:\n```python\nimport torch\nsrc = \"\"\"\n__global__ void k("
    result = extract_code(text)
    assert result.kind == "truncated" and result.code is None
    assert result.reason.startswith("final Python block (block 1 of 1, ```python) is never closed and does not parse: ")
    assert "at line 2 (line 4 of the completion)" in result.reason


def test_truncated_final_block_is_not_replaced_by_an_earlier_complete_one() -> None:
    text = fenced(MODEL) + "Better:\n```python\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ("
    result = extract_code(text)
    assert result.kind == "truncated"
    assert "block 2 of 2" in result.reason


def test_unclosed_final_block_that_parses_is_accepted() -> None:
    result = extract_code("Here it is:\n```python\n" + MODEL)
    assert result.kind == "ok"
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 1, ```python); its fence is never closed but the code is complete"


def test_unclosed_final_block_whose_model_new_lacks_forward_is_truncated() -> None:
    text = "```python\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        "
    result = extract_code(text)
    assert result.kind == "truncated"
    assert result.reason.endswith("its class ModelNew has no forward method: cut off inside the class")


def test_unclosed_final_block_cut_before_model_new_is_truncated() -> None:
    text = fenced(MODEL) + "Faster:\n```python\nimport torch\nsrc = 'kernel'\n"
    result = extract_code(text)
    assert result.kind == "truncated"
    assert result.reason.endswith("defines no class ModelNew: cut off before it")


def test_unclosed_model_new_subclass_may_inherit_forward() -> None:
    code = "from model import Model\n\nclass ModelNew(Model):\n    pass\n"
    assert extract_code("```python\n" + code).code == code


def test_unclosed_non_python_block_after_the_answer_is_noted() -> None:
    result = extract_code(fenced(MODEL) + "Build with:\n```bash\nnvcc -O3 ")
    assert result.code == MODEL
    assert result.reason.endswith("the text ends inside an unclosed ```bash block after it")


# ---------------------------------------------------------------- closed but not parsing


def test_closed_block_that_does_not_parse_is_returned_with_the_error() -> None:
    code = "import torch\n\nclass ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n"
    result = extract_code("Intro\n" + fenced(code))
    assert result.kind == "ok"
    assert result.code == code
    assert result.reason.startswith("final Python block (block 1 of 1, ```python); does not parse: ")
    assert "at line 4 (line 6 of the completion)" in result.reason


# ---------------------------------------------------------------- no fences


def test_prose_only_is_no_code() -> None:
    result = extract_code("I would fuse the GEMM with the activation.\nThat is all.\n")
    assert result == Extraction(None, "no Python code block and the text is not Python", "no_code")


def test_raw_code_without_fences_is_accepted() -> None:
    result = extract_code(MODEL)
    assert result == Extraction(MODEL, "no code fence; the whole completion is Python", "ok")


def test_raw_code_after_think_is_accepted() -> None:
    result = extract_code("<think>plan</think>\n\n" + MODEL)
    assert result.code == MODEL
    assert result.reason == "no code fence; the whole completion is Python, after 1 <think> section"


def test_raw_code_with_prose_before_it_is_accepted() -> None:
    text = "Okay, here is my answer.\nIt fuses two ops.\n\n" + MODEL
    result = extract_code(text)
    assert result.code == MODEL
    assert result.reason == "no code fence; Python from line 4 to the end, after 2 lines of prose"


def test_raw_code_takes_the_longest_parsing_suffix() -> None:
    text = "import this is prose, not code\n" + MODEL
    result = extract_code(text)
    assert result.code == MODEL
    assert "Python from line 2 to the end" in result.reason


def test_raw_code_without_model_new_is_no_code() -> None:
    result = extract_code("import torch\nx = torch.ones(3)\n")
    assert result == Extraction(
        None, "no Python code block; the text parses as Python but defines no class ModelNew", "no_code"
    )


def test_raw_code_with_prose_after_it_is_no_code_and_says_why() -> None:
    result = extract_code("Answer:\n" + MODEL + "This fuses two operators.\n")
    assert result.kind == "no_code"
    assert result.reason.startswith("no Python code block and the text is not Python (from line 2 it defines ModelNew")


# ---------------------------------------------------------------- odd inputs


@pytest.mark.parametrize("text", ["", "   \n\t\n", "\ufeff", "\r\n"])
def test_empty_input_is_no_code(text: str) -> None:
    assert extract_code(text) == Extraction(None, "empty completion", "no_code")


def test_crlf_is_normalised() -> None:
    text = ("Intro\n" + fenced(MODEL)).replace("\n", "\r\n")
    result = extract_code(text)
    assert result.code == MODEL
    assert "\r" not in result.code


def test_leading_bom_is_stripped() -> None:
    assert extract_code("\ufeff" + MODEL).code == MODEL


def test_code_ends_with_exactly_one_newline() -> None:
    assert extract_code("```python\n\n\n" + MODEL + "\n\n   \n```").code == MODEL


def test_fence_glued_to_the_last_code_line_closes_the_block() -> None:
    result = extract_code("```python\n" + MODEL.rstrip("\n") + "```\nThis fuses ops.\n")
    assert result.code == MODEL
    assert result.reason == "final Python block (block 1 of 1, ```python); closed by a fence at the end of a code line"


def test_null_bytes_do_not_raise() -> None:
    result = extract_code("```python\nclass ModelNew:\x00\n```\n")
    assert result.kind == "ok"
    assert "does not parse" in result.reason and "\n" not in result.reason


def test_binary_junk_is_no_code() -> None:
    junk = bytes(range(256)).decode("latin-1") * 4
    result = extract_code(junk)
    assert result.kind == "no_code" and result.code is None


def test_bytes_input_is_decoded() -> None:
    assert extract_code(MODEL.encode()).code == MODEL


def test_deeply_nested_code_does_not_raise() -> None:
    result = extract_code("```python\nclass ModelNew:\n    x = " + "(" * 5000 + ")" * 5000 + "\n```\n")
    assert result.kind == "ok"


def test_random_inputs_never_raise_and_reasons_are_one_line() -> None:
    pieces = [
        "```", "```python\n", "```cpp\n", "~~~", "~~~py\n", "``` prose here\n", "<think>", "</think>",
        "class ModelNew(nn.Module):\n", "    def forward(self, x):\n", "        return x\n", "import torch\n",
        "from a import b\n", '"""', "(", ")", "\n", "\r\n", "\ufeff", "\x00", "é", "    ", "text ", "def ",
    ]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        result = extract_code(text)
        assert isinstance(result, Extraction)
        assert result.kind in {"ok", "no_code", "truncated"}
        assert result.reason and "\n" not in result.reason and "\r" not in result.reason
        assert (result.code is None) == (result.kind != "ok")
        if result.code is not None:
            assert result.code.endswith("\n") and not result.code.endswith("\n\n")
