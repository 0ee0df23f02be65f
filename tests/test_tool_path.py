"""A candidate's processes find the tools installed beside the interpreter (pip's `ninja`), also when the
interpreter's virtual environment was never activated (`venv/bin/python run.py`): the README's install into a
fresh venv, used that way, failed every C++ build with "Ninja is required to load C++ extensions"."""

import os
import sys
from pathlib import Path

from harness.parent.boundary import candidate_env, tool_path


def test_the_interpreters_folder_is_added_to_a_path_that_lacks_it(monkeypatch):
    own = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))
    assert tool_path().split(os.pathsep) == ["/usr/bin", "/bin", own]


def test_a_path_that_has_it_is_left_as_it_is(monkeypatch):
    own = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join([own, "/usr/bin"]))
    assert tool_path() == os.pathsep.join([own, "/usr/bin"])


def test_every_candidate_process_gets_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    env = candidate_env(tmp_path / "scratch", tmp_path / "builds")
    assert env["PATH"].split(os.pathsep)[-1] == str(Path(sys.executable).parent)
