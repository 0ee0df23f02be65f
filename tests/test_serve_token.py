"""The service's token never reaches candidate code: not in the environment its processes inherit, not in
the command line they can read through /proc, not in the run header."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.serve import TOKEN_ENV, redacted, take_token

ROOT = Path(__file__).resolve().parent.parent


def test_a_token_on_the_command_line_is_wiped_from_what_proc_shows():
    code = (
        "from pathlib import Path\n"
        "from harness.commands.serve import wipe_argument\n"
        "secret = 'tok-' + 'XYZ123'\n"
        "print(wipe_argument(secret), Path('/proc/self/cmdline').read_bytes().count(secret.encode()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, "--token", "tok-XYZ123"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.split() == ["True", "0"], done.stderr


def test_the_token_variable_leaves_the_environment_candidates_inherit(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert take_token(argparse.Namespace(token="", token_file=None)) == "from-env"
    import os

    assert TOKEN_ENV not in os.environ


def test_a_token_file_is_read_and_a_missing_one_is_a_usage_error(tmp_path, monkeypatch):
    from harness.core.errors import UserError

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    (tmp_path / "token").write_text("from-file\n")
    assert take_token(argparse.Namespace(token="", token_file=str(tmp_path / "token"))) == "from-file"
    with pytest.raises(UserError, match="--token-file"):
        take_token(argparse.Namespace(token="", token_file=str(tmp_path / "none")))


def test_the_run_header_keeps_the_command_line_without_the_token():
    assert redacted(["serve", "--token", "abc", "--port", "1"], "abc") == ["serve", "--token", "***", "--port", "1"]
    assert redacted(["serve"], "") == ["serve"]
