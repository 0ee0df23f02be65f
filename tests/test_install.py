"""The README's install lines install the package itself, so `from harness import api` works outside
the checkout, and CI installs what the README's test line does before running its test command."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.venvs import venv_seeing_this_python

ROOT = Path(__file__).resolve().parent.parent


def _readme_lines() -> list[str]:
    """The first two command lines of the README: the main job and the tests."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()][:2]


def _install_words(line: str) -> list[str]:
    """The arguments of the line's `pip install`."""
    install = line.split("&&", 1)[0]
    words = shlex.split(install)
    assert words[:2] == ["pip", "install"], line
    return words[2:]


def _package_words(words: list[str]) -> list[str]:
    """The install arguments left once torch and the requirement files are taken out: the package."""
    kept: list[str] = []
    for index, word in enumerate(words):
        if word.startswith("torch==") or word == "-r" or (index and words[index - 1] == "-r"):
            continue
        kept.append(word)
    return kept


def test_the_readme_install_lines_install_the_package_itself():
    main_job, tests = _readme_lines()
    assert main_job.endswith("&& python3 run.py --all") and tests.endswith("&& python3 -m pytest -q")
    for line in (main_job, tests):
        assert _package_words(_install_words(line)) == ["-e", "."], line


def test_ci_installs_what_the_readme_test_line_does_and_runs_its_test_command():
    _, tests = _readme_lines()
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    installs = [shlex.split(line)[4:] for line in script if line.startswith("python3 -m pip install")]
    installed = [word for words in installs for word in words if word != "-q"]
    assert sorted(installed) == sorted(_install_words(tests))
    assert tests.split("&&", 1)[1].strip() in [line.strip() for line in script]


@pytest.mark.slow
def test_the_readme_install_makes_the_api_importable_outside_the_checkout(tmp_path):
    venv = tmp_path / "venv"
    python = venv_seeing_this_python(venv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    source = tmp_path / "source"  # a copy of the checkout's package: the install leaves its metadata there
    shutil.copytree(ROOT / "harness", source / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    package = _package_words(_install_words(_readme_lines()[0]))  # the dependencies are installed already: no download
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", *package]
    build_env = {**env, "TMPDIR": str(tmp_path)}
    installed = subprocess.run(install, capture_output=True, text=True, cwd=source, env=build_env, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    code = "from harness import api; import harness; print(harness.__file__)"
    where = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=outside, env=env, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(source / "harness" / "__init__.py")  # the checkout it was installed from
