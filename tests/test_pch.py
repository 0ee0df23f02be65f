"""The build pool's precompiled torch/extension.h (harness.parent.pch): made once by a process of the harness's own,
used by every build that starts once it is ready (gcc finds it first), only where candidates cannot write the build
cache, and a header gcc cannot use never turns into a build failure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.parent import pch
from harness.parent.boundary import RunBoundary

# a candidate that proves, from inside its build process, that the header is there, readable through the boundary,
# and used: gcc finds it first (CPATH), and -Werror=invalid-pch turns a header found but not usable into an error;
# its cpp_sources include the header again after load_inline's own include, as some candidates do
USES_HEADER = """
import os
import pathlib

from torch.utils.cpp_extension import load_inline

folder = pathlib.Path(os.environ["CPATH"].split(os.pathsep)[0])
with open(folder / "torch" / "extension.h.gch", "rb") as header:
    assert header.read(4) == b"gpch", "not a precompiled header"
twice = load_inline(
    name="pch_twice",
    cpp_sources="#include <torch/extension.h>\\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }",
    functions=["twice"],
    extra_cflags=["-Werror=invalid-pch"],
)
"""

# its own optimisation level: gcc must read the header as before (the precompiled one is not for these options)
OWN_FLAGS = """
from torch.utils.cpp_extension import load_inline

thrice = load_inline(
    name="pch_thrice",
    cpp_sources="torch::Tensor thrice(torch::Tensor x) { return x * 3; }",
    functions=["thrice"],
    extra_cflags=["-O1"],
)
"""


@pytest.mark.heavy
def test_builds_that_start_once_the_header_is_ready_compile_against_it_inside_the_boundary(tmp_path, make_config):
    from harness.parent.boundary import open_boundary
    from harness.parent.prebuild import BuildAhead

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    boundary = open_boundary(make_config("sandbox.layer=auto"), scratch)
    if not boundary.cache_read_only:
        pytest.skip(f"this machine's boundary ({boundary.layer}) lets candidates write the build cache")
    pool = BuildAhead(
        tmp_path / "cache", "cpu", builds=1, jobs_per_build=1, timeout=600, env=boundary.env, precompiled_header=True
    )
    try:
        assert pool.header is not None
        pool.header.make()  # what a build waiting for a slot starts; it waits for the pool's look for one first
        folder = pool.header.folder()
        assert folder is not None, pool.header.note
        assert folder.parent == tmp_path / "cache" / pch.FOLDER and (folder / "torch" / "extension.h.gch").is_file()
        for name, source in (("uses_header.py", USES_HEADER), ("own_flags.py", OWN_FLAGS)):
            path = tmp_path / name
            path.write_text(source)
            pool.submit(path)
        used = pool.wait(tmp_path / "uses_header.py")
        own = pool.wait(tmp_path / "own_flags.py")
    finally:
        pool.close()
    assert used.outcome == "built" and used.detail == "[('pch_twice', 'built')]" and used.header, used
    assert own.outcome == "built" and own.detail == "[('pch_thrice', 'built')]" and own.header, own  # given; not used
    # a second run knows it before its first build (named under a fingerprint read without torch) and compiles
    # nothing; with the name gone, its pool's look finds it (a process that imports torch to learn the flags)
    again = pch.PrecompiledHeader(tmp_path / "cache", "cpu")
    assert again.folder() == folder and again.note == "known"
    for name in (tmp_path / "cache" / pch.FOLDER).glob("*.key"):
        name.unlink()
    looked = pch.PrecompiledHeader(tmp_path / "cache", "cpu")
    assert looked.folder() is None
    looked.find()
    assert looked.folder() == folder and looked.note.startswith("found in"), looked.note
    assert pch.known(tmp_path / "cache", "cpu") == folder  # named again


def test_a_header_that_does_not_compile_is_kept_failed_and_not_tried_again(tmp_path, monkeypatch):
    header = tmp_path / "extension.h"
    header.write_text("#error not a header\n")
    plan = pch.HeaderPlan(("c++",), ("-std=c++17",), header, "k" * 32)
    monkeypatch.setattr(pch, "plan", lambda cuda: plan)
    with pytest.raises(RuntimeError, match="the header did not compile"):
        pch.make(tmp_path, cuda=False)
    assert (tmp_path / pch.FOLDER / f"{'k' * 32}.failed").is_file()
    assert not (tmp_path / pch.FOLDER / ("k" * 32)).exists()  # no folder a build would find
    assert [p.name for p in (tmp_path / pch.FOLDER).iterdir()] == [f"{'k' * 32}.failed"]  # its work folder removed

    def compiles(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(pch, "_run", compiles)
    with pytest.raises(RuntimeError, match="the header did not compile"):
        pch.make(tmp_path, cuda=False)


def test_a_header_gcc_would_not_use_is_not_published(tmp_path, monkeypatch):
    header = tmp_path / "torch" / "extension.h"
    header.parent.mkdir()
    header.write_text("#pragma once\n#if HARNESS_SIDE == 1\nint harness_side_one();\n#endif\n")
    # made with one definition of a macro the header reads, checked with another: gcc reads the header itself
    flags = ("-std=c++17", "-isystem", str(tmp_path))
    plan = pch.HeaderPlan(("c++",), (*flags, "-DHARNESS_SIDE=1"), header, "u" * 32)
    monkeypatch.setattr(pch, "plan", lambda cuda: plan)
    original = pch.check
    other = pch.HeaderPlan(plan.cxx, (*flags, "-DHARNESS_SIDE=2"), header, plan.key)
    monkeypatch.setattr(pch, "check", lambda header_plan, made, work: original(other, made, work))
    with pytest.raises(RuntimeError, match="gcc did not use it: .*HARNESS_SIDE"):
        pch.make(tmp_path / "cache", cuda=False)
    assert not (tmp_path / "cache" / pch.FOLDER / ("u" * 32)).exists()  # no build finds it
    assert (tmp_path / "cache" / pch.FOLDER / f"{'u' * 32}.failed").is_file()


def test_only_layers_that_keep_candidates_from_writing_the_build_cache_use_the_header(
    tmp_path, make_config, monkeypatch
):
    from harness.parent.quiet import QuietHost
    from harness.parent.resources import start_builds

    assert RunBoundary("landlock (ABI 7)", {}).cache_read_only
    assert RunBoundary("mount", {}).cache_read_only
    assert not RunBoundary("hash", {}).cache_read_only
    assert not RunBoundary("off", {}).cache_read_only
    monkeypatch.setattr(pch.PrecompiledHeader, "find", lambda self: None)
    monkeypatch.setattr(pch.PrecompiledHeader, "make", lambda self: None)
    cfg = make_config("builds.ahead=always", "builds.precompiled_header=true")  # the tests' config has it off
    for read_only, expected in ((True, True), (False, False)):
        pool = start_builds(cfg, "cpu", QuietHost(), {}, cache_read_only=read_only)
        assert pool is not None
        try:
            assert (pool.header is not None) is expected
        finally:
            pool.close()
    off = start_builds(
        make_config("builds.ahead=always", "builds.precompiled_header=false"), "cpu", QuietHost(), {}, True
    )
    assert off is not None and off.header is None
    off.close()


def test_the_build_command_hands_the_header_folder_to_the_build_process(tmp_path):
    from harness.parent.prebuild import build_command

    with_header = build_command(
        tmp_path / "c.py", tmp_path, "9.0", tmp_path / "k", tmp_path / "own", header=tmp_path / "h"
    )
    assert with_header[-2:] == ["--pch", str(tmp_path / "h")]
    assert "--pch" not in build_command(tmp_path / "c.py", tmp_path, "9.0", tmp_path / "k", tmp_path / "own")


def test_a_build_that_could_not_read_a_precompiled_header_is_not_kept_failed(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    from harness.device.buildcache import BuildCache, BuildFailedError

    cache = BuildCache(tmp_path, "cpu", cuda=False)
    cache.install()
    original = cpp_extension.load_inline

    said = [
        "main.cpp:1:29: error: while reading precompiled header: No such file or directory",
        "main.cpp:3:10: fatal error: /c/_pch/0123/torch/extension.h: No such file or directory",
    ]

    try:
        for number, message in enumerate(said):

            def unreadable(message=message, **kwargs):
                raise RuntimeError(message)

            monkeypatch.setattr(cache, "_original", unreadable)
            with pytest.raises(BuildFailedError):
                cpp_extension.load_inline(name=f"unreadable_header{number}", cpp_sources="int f();", functions=None)
    finally:
        cpp_extension.load_inline = original
    assert not list(tmp_path.rglob("*.failed"))  # the worker's own build, without the header, tries again


@pytest.mark.slow
def test_a_run_that_ends_while_the_header_compiles_ends_its_compiler_and_leaves_nothing(tmp_path):
    import threading

    from harness.parent.sessions import session_members

    header = pch.PrecompiledHeader(tmp_path / "cache", "cpu")
    maker = threading.Thread(target=header.make)
    maker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the compiler at work: its output file begun in the work folder
        if any((tmp_path / "cache" / pch.FOLDER).glob("work-*/folder/torch/extension.h.gch")):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the header's compile did not start: {header.note}")
    proc = header._proc
    assert proc is not None
    header.close()
    maker.join(timeout=30)
    assert not maker.is_alive() and proc.poll() is not None
    deadline = time.monotonic() + 10
    while session_members(proc.pid) and time.monotonic() < deadline:  # killed ones reaped by whoever adopted them
        time.sleep(0.1)
    assert session_members(proc.pid) == []  # gcc too
    assert header.folder() is None and list((tmp_path / "cache" / pch.FOLDER).iterdir()) == []


def test_the_header_is_looked_for_at_once_and_made_only_once_a_build_waits_for_a_slot(tmp_path, monkeypatch):
    import threading

    from harness.core.records import AheadBuild, AheadOutcome
    from harness.parent.prebuild import BuildAhead

    calls: list[str] = []
    monkeypatch.setattr(pch.PrecompiledHeader, "find", lambda self: calls.append("find"))
    monkeypatch.setattr(pch.PrecompiledHeader, "make", lambda self: calls.append("make"))
    release = threading.Event()

    def held(self, path, problem=None):  # a build that runs until the test lets it end
        release.wait(30)
        return AheadBuild(AheadOutcome.NOTHING, "", 0.0)

    monkeypatch.setattr(BuildAhead, "_build", held)
    pool = BuildAhead(tmp_path / "cache", "cpu", builds=2, jobs_per_build=1, timeout=60, precompiled_header=True)
    try:
        paths = []
        for number in range(4):
            path = tmp_path / f"c{number}.py"
            path.write_text(f"# candidate {number}\n")
            paths.append(path)
        for path in paths[:2]:  # both start at once: nothing to gain
            pool.submit(path)
        time.sleep(0.2)
        assert calls == ["find"]
        pool.submit(paths[2])  # waits for a slot: the builds after it can use the header
        pool.submit(paths[3])
        deadline = time.monotonic() + 10
        while "make" not in calls and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert calls == ["find", "make"]  # once
    finally:
        release.set()
        pool.close()


def test_a_ray_build_task_compiles_against_a_header_made_before_on_its_node(tmp_path, make_config, monkeypatch):
    import subprocess

    from harness.parent import ray_executor
    from harness.parent.boundary import RunBoundary

    cfg = make_config("builds.precompiled_header=true")
    cache = cfg.path(cfg.build_cache_dir)
    folder = cache / pch.FOLDER / ("a" * 32)
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "extension.h.gch").write_bytes(b"gpch")
    pch._name(cache, "cpu", folder)
    commands = []

    real = subprocess.run

    def ran(command, **kwargs):  # the build process's command is kept, not run; the boundary's probe runs
        if "harness.worker.build" not in command:
            return real(command, **kwargs)
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, b"", b"")

    monkeypatch.setattr(ray_executor.subprocess, "run", ran)
    monkeypatch.setattr(RunBoundary, "cache_read_only", property(lambda self: True))
    ray_executor.build_remote(cfg.to_dict(), "c.py", "# a candidate\n", "cpu", 1, 60)
    assert commands and commands[0][-2:] == ["--pch", str(folder)]
    monkeypatch.setattr(RunBoundary, "cache_read_only", property(lambda self: False))
    ray_executor.build_remote(cfg.to_dict(), "c.py", "# a candidate\n", "cpu", 1, 60)
    assert "--pch" not in commands[1]  # a layer that lets candidates write the cache: no header


@pytest.mark.slow
def test_a_build_ahead_says_whether_it_was_given_the_header(tmp_path):
    from harness.parent.prebuild import BuildAhead

    cache = tmp_path / "cache"
    folder = cache / pch.FOLDER / ("b" * 32)
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "extension.h.gch").write_bytes(b"gpch")
    pch._name(cache, "cpu", folder)  # made by an earlier run: known before the first build
    source = tmp_path / "plain.py"
    source.write_text("import torch\n")  # builds nothing: the process still runs, with or without the header
    for given in (True, False):
        pool = BuildAhead(cache, "cpu", builds=1, jobs_per_build=1, timeout=120, precompiled_header=given)
        try:
            if given:
                assert pool.header is not None and pool.header.folder() == folder
            pool.submit(source)
            outcome = pool.wait(source)
        finally:
            pool.close()
        assert outcome.outcome == "nothing" and outcome.header is given, outcome


def test_a_header_that_could_not_be_made_is_said_once_on_stderr_and_the_run_goes_on_without_it(
    tmp_path, monkeypatch, capsys
):
    import sys

    said = "failed the header did not compile: cc1plus: out of memory"
    header = pch.PrecompiledHeader(tmp_path / "cache", "cpu")
    monkeypatch.setattr(header, "command", lambda work: [sys.executable, "-c", f"print({said!r})"])
    header.make()
    assert header.folder() is None and header.note == said.removeprefix("failed ")
    err = capsys.readouterr().err
    assert err.count("note: builds.precompiled_header: not made (the header did not compile") == 1, err
    header.find()  # a look that finds none says nothing: most runs have none yet
    assert "note:" not in capsys.readouterr().err
