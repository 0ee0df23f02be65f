"""A candidate's processes find the tools installed beside the interpreter (pip's `ninja`) first, also when the
interpreter's virtual environment was never activated (`venv/bin/python run.py`): the README's install into a
fresh venv, used that way, failed every C++ build under the boundary with "Ninja is required to load C++
extensions" (the `ninja` first on the PATH was a pyenv shim, which confined reads cannot run)."""

import os
import sys
from pathlib import Path

from harness.parent.boundary import candidate_env, tool_path


def test_the_interpreters_folder_comes_first_on_a_path_that_lacks_it(monkeypatch):
    own = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))
    assert tool_path().split(os.pathsep) == [own, "/usr/bin", "/bin"]


def test_a_path_that_has_it_is_left_as_it_is(monkeypatch):
    own = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", own]))
    assert tool_path() == os.pathsep.join(["/usr/bin", own])


def test_every_candidate_process_gets_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    env = candidate_env(tmp_path / "scratch", tmp_path / "builds")
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
