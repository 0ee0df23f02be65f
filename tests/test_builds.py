"""Real load_inline builds on the CPU path: content-addressed cache, compiler errors as verdicts."""
import shutil

import pytest

from harness.core.config import ROOT
from harness.core.status import Status
from harness.core.store import RunStore
from harness.device.buildcache import first_error_line
from harness.sources.candidate import Candidate
from harness.sources.problem import resolve_problem
from tests.evaluations import evaluate_problem

CPP_CANDIDATE = ROOT / "solutions" / "1_Scale_Bias_ReLU" / "cpp_fused.py"
# The extensions these tests compile afresh include torch/python.h instead of the implicit torch/extension.h (all of
# libtorch's C++ API): 9 s a build instead of 13 on 2 cores. The ones that must fail fail at their first line, on a
# header that does not exist, before any of torch's is read: at once instead of after 13 s.
LIGHT = ("#include <torch/extension.h>", "#include <torch/python.h>")

BROKEN_CPP = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include "undefined_thing.h"
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x) { return x; }
"""
ext = load_inline(name="broken_cpp_ext", cpp_sources=source, functions=["f"], no_implicit_headers=True)

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
    def forward(self, x):
        return ext.f(x)
'''


def evaluate(cfg, candidates, run_id):
    problem = resolve_problem("1_Scale_Bias_ReLU", cfg.path(cfg.problems_dir))
    store = RunStore(cfg.path(cfg.results_dir), run_id)
    return {r.identity.candidate: r for r in evaluate_problem(problem, candidates, cfg, "cpu", store)}, store


@pytest.mark.slow
def test_cpp_candidate_builds_runs_and_is_reused_from_the_cache(make_config, tmp_path):
    cfg = make_config("timing.enabled=false")
    copy = tmp_path / "same_kernels.py"
    shutil.copy(CPP_CANDIDATE, copy)  # another file with identical kernels shares the build
    first, _ = evaluate(cfg, [Candidate("cpp_fused", CPP_CANDIDATE)], "first")
    second, _ = evaluate(cfg, [Candidate("same_kernels", copy)], "second")
    built, reused = first["cpp_fused"], second["same_kernels"]
    assert built.decision.status is Status.CORRECT, built.decision.reason
    assert reused.decision.status is Status.CORRECT, reused.decision.reason
    assert [b.name for b in built.provenance.builds] == ["cpp_scale_bias_relu"]
    assert reused.provenance.builds[0].cache_key == built.provenance.builds[0].cache_key
    assert reused.provenance.builds[0].cached is True


@pytest.mark.slow
def test_compile_error_is_build_failed_with_first_error_line_and_full_log(make_config, tmp_path):
    cfg = make_config()
    path = tmp_path / "broken.py"
    path.write_text(BROKEN_CPP)
    records, store = evaluate(cfg, [Candidate("broken", path)], "broken")
    record = records["broken"]
    assert record.decision.status is Status.BUILD_FAILED
    assert "error" in record.decision.reason and "undefined_thing" in record.decision.reason
    log = (store.dir / record.provenance.log_path).read_text()
    assert "undefined_thing" in log


@pytest.mark.parametrize(
    "log, expected",
    [
        ("[1/2] c++ ...\nFAILED: main.o\n/tmp/x/main.cpp:3:41: error: 'y' was not declared\n", "main.cpp:3:41: error: 'y' was not declared"),
        ("/b/cuda.cu(12): error: identifier \"foo\" is undefined\n", "cuda.cu(12): error: identifier \"foo\" is undefined"),
        ("ImportError: /b/ext.so: undefined symbol: _Z3foov", "ImportError: /b/ext.so: undefined symbol: _Z3foov"),
        ("", "no compiler output"),
    ],
)
def test_first_error_line_is_the_compilers_first_complaint(log, expected):
    assert first_error_line(log) == expected


BUILD_IN_INIT = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale
        self.ext = load_inline(name="built_in_init", functions=["f"], no_implicit_headers=True, cpp_sources="""
#include <torch/python.h>
torch::Tensor f(torch::Tensor x, torch::Tensor b, double s) { return torch::relu(x * s + b); }
""")

    def forward(self, x):
        return self.ext.f(x, self.bias, self.scale)
'''


@pytest.mark.slow
def test_build_inside_init_runs_under_the_load_limit_not_construct(make_config, tmp_path):
    cfg = make_config("timeouts.construct=2", "timing.enabled=false")
    path = tmp_path / "builds_in_init.py"
    path.write_text(BUILD_IN_INIT)
    records, _ = evaluate(cfg, [Candidate("builds_in_init", path)], "init-build")
    record = records["builds_in_init"]
    assert record.decision.status is Status.CORRECT, record.decision.reason
    assert [b.name for b in record.provenance.builds] == ["built_in_init"]


@pytest.mark.slow
def test_builds_run_ahead_in_a_pool_and_the_worker_loads_them_finished(make_config, tmp_path):
    from harness.parent.quiet import QuietHost
    from harness.parent.resources import start_builds
    from harness.commands.run import run
    from harness.core.store import read_records

    folder = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    source = CPP_CANDIDATE.read_text()
    for variant in ("ahead_a", "ahead_b"):  # distinct extension names: two fresh builds
        light = source.replace(*LIGHT).replace('name="cpp_scale_bias_relu",', f'name="cpp_{variant}", no_implicit_headers=True,')
        (folder / f"{variant}.py").write_text(light)
    cfg = make_config("builds.ahead=always", "builds.parallel=2", "timing.enabled=false", f"solutions_dir={tmp_path / 'solutions'}")
    from harness.commands.run import select_targets
    from harness.core.records import CandidateRecord

    targets = select_targets(cfg, problem="1_Scale_Bias_ReLU", solution=None, everything=False)
    assert start_builds(make_config("builds.ahead=auto"), "cpu", QuietHost()) is None  # never on a CPU run unless asked
    assert run(cfg, targets, run_id="ahead", quiet=True, argv=()) == 0
    records = [r for r in read_records(cfg.path(cfg.results_dir) / "ahead") if isinstance(r, CandidateRecord)]
    assert {r.identity.candidate for r in records} == {"ahead_a", "ahead_b"}
    for record in records:
        assert record.decision.status is Status.CORRECT, record.decision.reason
        assert record.provenance.builds and all(b.cached for b in record.provenance.builds), record.provenance.builds  # the pool built it first
        assert record.provenance.ahead.outcome == "built" and not record.decision.warnings, record.provenance.ahead


def test_a_candidate_may_build_in_its_constructor_only_when_its_import_built_nothing_and_it_names_a_loader(tmp_path):
    from harness.worker.build import builds_when_constructed

    source = tmp_path / "c.py"
    source.write_text(BUILD_IN_INIT)
    assert builds_when_constructed(source, [])
    assert not builds_when_constructed(source, [{"name": "built_at_import"}])  # the import built it: nothing to construct
    source.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    assert not builds_when_constructed(source, [])  # torch only: constructing would build nothing


@pytest.mark.slow
def test_a_build_ahead_constructs_a_candidate_that_compiles_in_its_constructor(tmp_path):
    from harness.parent.prebuild import BuildAhead

    path = tmp_path / "builds_in_init_ahead.py"
    path.write_text(BUILD_IN_INIT.replace('name="built_in_init"', 'name="built_in_init_ahead"'))
    problem = ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py"
    pool = BuildAhead(tmp_path / "cache", "cpu", builds=1, jobs_per_build=2, timeout=600)
    try:
        pool.submit(path, problem)
        outcome = pool.wait(path)
    finally:
        pool.close()
    assert outcome.outcome == "built" and outcome.detail == "[('built_in_init_ahead', 'built')]", outcome
    without = tmp_path / "no_problem.py"
    without.write_text(BUILD_IN_INIT.replace('name="built_in_init"', 'name="built_in_init_never"'))
    pool = BuildAhead(tmp_path / "cache", "cpu", builds=1, jobs_per_build=2, timeout=600)
    try:
        pool.submit(without)  # no problem given: the import alone, which builds nothing here
        assert pool.wait(without).outcome == "nothing"
    finally:
        pool.close()


def test_a_compile_that_failed_is_kept_failed_and_the_next_load_reports_it_without_compiling(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    from harness.device.buildcache import BuildCache, BuildFailedError

    source = '#include "undefined_thing.h"\n#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n'
    original = cpp_extension.load_inline
    cache = BuildCache(tmp_path, "cpu", cuda=False)
    cache.install()
    try:
        with pytest.raises(BuildFailedError) as first:
            cpp_extension.load_inline(name="kept_failed_ext", cpp_sources=source, functions=["f"], no_implicit_headers=True)
        assert "undefined_thing" in first.value.first_error
        assert len(list(tmp_path.rglob("*.failed"))) == 1
        compiled = []
        monkeypatch.setattr(cache, "_original", lambda **kw: compiled.append(kw))
        with pytest.raises(BuildFailedError) as again:
            cpp_extension.load_inline(name="kept_failed_ext", cpp_sources=source, functions=["f"], no_implicit_headers=True)
        assert compiled == [] and again.value.first_error == first.value.first_error
    finally:
        cpp_extension.load_inline = original


def test_a_build_that_may_pass_another_time_is_not_kept_failed(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    from harness.device.buildcache import BuildCache, BuildFailedError

    def killed(**arguments):
        raise RuntimeError("Error building extension: c++: fatal error: Killed signal terminated program cc1plus")

    original = cpp_extension.load_inline
    cache = BuildCache(tmp_path, "cpu", cuda=False)
    cache.install()
    monkeypatch.setattr(cache, "_original", killed)
    try:
        with pytest.raises(BuildFailedError):
            cpp_extension.load_inline(name="killed_ext", cpp_sources="int x;", functions=[])
    finally:
        cpp_extension.load_inline = original
    assert not list(tmp_path.rglob("*.failed"))


def test_a_build_process_is_told_its_target_and_never_asks_the_device(tmp_path, monkeypatch):
    import torch

    import torch.utils.cpp_extension as cpp_extension

    from harness.device.buildcache import BuildCache, NeedsCudaError

    def refused():
        raise AssertionError("the build role asked for a CUDA device")

    monkeypatch.setattr(torch.cuda, "is_available", refused)
    original = cpp_extension.load_inline
    BuildCache(tmp_path, "cpu", cuda=False).install()
    try:
        with pytest.raises(NeedsCudaError):
            cpp_extension.load_inline(name="wants_cuda", cpp_sources="", cuda_sources="__global__ void k() {}")
    finally:
        cpp_extension.load_inline = original


PLAIN_MODEL = """

class ModelNew(torch.nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = torch.nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)
"""
REPORTS_ITS_DEVICE = """
import os
import torch
if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # the build process: no GPU, the target given
    raise RuntimeError(f"build role: TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST')}")
""" + PLAIN_MODEL


def test_a_build_process_sees_no_gpu_and_gets_the_target_architecture(tmp_path):
    from harness.parent.prebuild import BuildAhead

    path = tmp_path / "reports.py"
    path.write_text(REPORTS_ITS_DEVICE)
    pool = BuildAhead(tmp_path / "cache", "9.0", builds=1, jobs_per_build=1, timeout=120)
    try:
        pool.submit(path)
        outcome = pool.wait(path)
    finally:
        pool.close()
    assert outcome.outcome == "failed" and "build role: TORCH_CUDA_ARCH_LIST=9.0" in outcome.detail, outcome
    assert pool.wait(tmp_path / "never.py").outcome == "skipped"


@pytest.mark.slow
def test_a_build_ahead_that_failed_while_the_lane_loaded_the_candidate_is_a_warning(make_config, tmp_path):
    from harness.commands.run import run, select_targets
    from harness.core.records import CandidateRecord
    from harness.core.store import read_records

    folder = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    (folder / "reports.py").write_text(REPORTS_ITS_DEVICE)
    cfg = make_config("builds.ahead=always", "timing.enabled=false", f"solutions_dir={tmp_path / 'solutions'}")
    targets = select_targets(cfg, problem="1_Scale_Bias_ReLU", solution=None, everything=False)
    run(cfg, targets, run_id="warned", quiet=True, argv=())
    (record,) = [r for r in read_records(cfg.path(cfg.results_dir) / "warned") if isinstance(r, CandidateRecord)]
    assert record.provenance.ahead.outcome == "failed"
    assert any(w.startswith("the build ahead failed: import error") for w in record.decision.warnings), record


BOOK_LOAD = """
import json, sys
import torch.utils.cpp_extension as cpp_extension
from harness.device.buildcache import BuildCache
cache = BuildCache(__import__("pathlib").Path(sys.argv[1]), "cpu", cuda=False)
cache.install()
source = "#include <torch/python.h>\\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }\\n"
module = cpp_extension.load_inline(name="book_ext", cpp_sources=source, functions=["twice"], no_implicit_headers=True)
print(json.dumps(cache.events))
"""


def test_a_cached_build_changed_after_it_was_recorded_is_rebuilt_and_named_never_loaded(tmp_path):
    """The build book (harness.core.buildbook): the parent records a finished build's digest; a
    library overwritten later (another candidate poisoning the cache) is not loaded but built again."""
    import json
    import subprocess
    import sys

    from harness.core import buildbook

    cache_root = tmp_path / "builds"

    def load():
        done = subprocess.run([sys.executable, "-c", BOOK_LOAD, str(cache_root)], capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        (event,) = json.loads(done.stdout.strip().splitlines()[-1])
        return event

    built = load()
    assert built["cached"] is False and built["tampered"] == ""
    folder = buildbook.owner_folder(cache_root, "") / built["cache_key"]  # a build outside any candidate: shared
    buildbook.record(cache_root, "", built["cache_key"])
    assert load()["cached"] is True  # unchanged: loaded as it is
    library = next(folder.glob("*.so"))
    library.write_bytes(library.read_bytes() + b"poison")  # a write from outside the boundary
    rebuilt = load()
    assert rebuilt["cached"] is False and rebuilt["tampered"].startswith("its cached libraries changed after"), rebuilt
    assert not next(folder.glob("*.so")).read_bytes().endswith(b"poison")


def test_publishing_installs_a_finished_build_under_its_owner_keeps_an_intact_one_and_replaces_a_changed_one(tmp_path):
    from harness.core import buildbook

    cache, owner, key = tmp_path / "builds", buildbook.owner_of("candidate source"), "ab" * 16
    staged = tmp_path / "own" / "builds"
    (staged / key).mkdir(parents=True)
    (staged / key / "ext.so").write_bytes(b"first")
    (staged / key / "main.o").write_bytes(b"object")  # intermediates stay behind
    (staged / ("cd" * 16 + ".failed")).write_text('{"first_error": "main.cpp:1: error: x"}')
    (staged / ("ef" * 16)).symlink_to(tmp_path)  # a link to elsewhere is never followed
    assert buildbook.publish(staged, cache, owner) == [key]
    installed = buildbook.owner_folder(cache, owner) / key
    assert sorted(p.name for p in installed.iterdir()) == ["ext.so"]
    assert (buildbook.owner_folder(cache, owner) / ("cd" * 16 + ".failed")).is_file()
    assert buildbook.intact(cache, owner, key) and not buildbook.intact(cache, buildbook.owner_of("another"), key)
    (staged / key / "ext.so").write_bytes(b"second")
    assert buildbook.publish(staged, cache, owner) == []  # the cache holds it intact: kept
    assert (installed / "ext.so").read_bytes() == b"first"
    (installed / "ext.so").write_bytes(b"poisoned")  # changed from outside the boundary
    assert not buildbook.intact(cache, owner, key)
    assert buildbook.publish(staged, cache, owner) == [key]  # replaced by the rebuilt one
    assert (installed / "ext.so").read_bytes() == b"second" and buildbook.intact(cache, owner, key)

def test_builds_ahead_are_sized_by_the_cores_this_run_may_use_not_the_machines(monkeypatch):
    # a run pinned to 4 of 32 cores (taskset, a container's CPU set, a batch job's allocation) runs three builds of
    # two jobs each (a build keeps about 1.25 cores busy), not twenty-four
    import os

    from harness.parent import prebuild

    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.setattr(os, "sysconf", lambda name: 4096 if name == "SC_PAGE_SIZE" else (256 << 30) // 4096)  # 256 GiB
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert prebuild.usable_cores() == 4
    assert prebuild.default_parallelism() == (3, 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert prebuild.default_parallelism() == (24, 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # CI's two cores: one build
    assert prebuild.default_parallelism() == (1, 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    monkeypatch.setattr(os, "sysconf", lambda name: 4096 if name == "SC_PAGE_SIZE" else (64 << 30) // 4096)  # 64 GiB
    assert prebuild.default_parallelism() == (16, 2)  # memory bounds it before the cores do


def test_a_build_process_and_its_compilers_run_below_the_runs_cpu_priority(tmp_path):
    # builds ahead are throughput work: when the CPUs are short, the lane's judge, workers and memcheck (at the run's
    # priority) must get them first. The candidate's import reports its own niceness and a child's (ninja and the
    # compilers are its children) by failing with them.
    import os

    from harness.parent.prebuild import BuildAhead

    path = tmp_path / "reports_priority.py"
    path.write_text(
        "import os, subprocess\n"
        "child = subprocess.run(['nice'], capture_output=True, text=True).stdout.strip()\n"
        "raise RuntimeError(f'niceness {os.nice(0)} child {child}')\n"
    )
    run = os.nice(0)
    for nice, expected in ((7, min(19, run + 7)), (0, run)):
        pool = BuildAhead(tmp_path / f"cache{nice}", "cpu", builds=1, jobs_per_build=1, timeout=120, nice=nice)
        try:
            pool.submit(path)
            outcome = pool.wait(path)
        finally:
            pool.close()
        assert outcome.outcome == "failed" and f"niceness {expected} child {expected}" in outcome.detail, outcome


def test_a_build_priority_outside_the_nice_range_is_refused(make_config):
    from harness.core.errors import UserError

    with pytest.raises(UserError, match="builds.nice must be 0 to 19, got 20"):
        make_config("builds.nice=20")


BUILD_HELD = """
import os
import time
import torch
if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # the build process: it ends once {release!r} exists (or after 90 s)
    deadline = time.monotonic() + 90
    while not os.path.exists({release!r}) and time.monotonic() < deadline:
        time.sleep(0.1)
"""
BUILD_MARKED = """
import os
import torch
if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # the build process: it says it has ended
    open({marker!r}, "w").close()
"""


@pytest.mark.slow
def test_a_slow_build_ahead_holds_back_only_its_own_candidate(make_config, tmp_path):
    # one lane, three candidates queued a, b, c: a's build ahead ends once c's has, and b's only once c has its
    # record. After a, the lane takes c, whose build has ended, before b, whose build still runs; taking b first
    # would wait out b's 90 s and fail here. (The boundary is off: c's build process writes its marker.)
    import threading
    import time

    from harness.commands.run import run, select_targets
    from harness.core.records import CandidateRecord
    from harness.core.store import read_records

    release, c_built = tmp_path / "release", tmp_path / "c_built"
    folder = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    (folder / "a_first.py").write_text(BUILD_HELD.format(release=str(c_built)) + PLAIN_MODEL)
    (folder / "b_built_slowly.py").write_text(BUILD_HELD.format(release=str(release)) + PLAIN_MODEL)
    (folder / "c_built_at_once.py").write_text(BUILD_MARKED.format(marker=str(c_built)) + PLAIN_MODEL)
    cfg = make_config(
        "builds.ahead=always", "builds.parallel=3", "timing.enabled=false", "sandbox.layer=off",
        f"solutions_dir={tmp_path / 'solutions'}",
    )
    targets = select_targets(cfg, problem="1_Scale_Bias_ReLU", solution=None, everything=False)
    results = cfg.path(cfg.results_dir) / "order"

    def finished() -> list[str]:
        try:
            return [r.identity.candidate for r in read_records(results) if isinstance(r, CandidateRecord)]
        except Exception:  # a line being written
            return []

    done = threading.Event()

    def release_b_after_c() -> None:
        while not done.is_set():
            if "c_built_at_once" in finished():
                release.touch()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=release_b_after_c, daemon=True)
    watcher.start()
    try:
        run(cfg, targets, run_id="order", quiet=True, argv=())
    finally:
        done.set()
        watcher.join(5)
    order = finished()
    assert sorted(order) == ["a_first", "b_built_slowly", "c_built_at_once"], order
    assert order.index("c_built_at_once") < order.index("b_built_slowly"), order
    assert release.exists()  # b's build was let end only after c's record was written


@pytest.mark.slow
def test_a_lane_with_no_candidate_built_takes_whichever_build_ends_first(make_config, tmp_path):
    # one lane, two candidates queued a, b, neither built when the lane starts: a's build ahead ends only once b has
    # its record (or after 90 s), b's at once. The lane runs the problem's reference pass while both build, then
    # takes b, whose build ended first; taking a, the oldest, and waiting for its build would wait out the 90 s and
    # fail here. The reference pass runs once: ahead of both, not again for them.
    import threading
    import time

    from harness.commands.run import run, select_targets
    from harness.core.records import CandidateRecord, ReferenceRecord
    from harness.core.store import read_records

    release = tmp_path / "release"
    folder = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    (folder / "a_built_last.py").write_text(BUILD_HELD.format(release=str(release)) + PLAIN_MODEL)
    (folder / "b_built_first.py").write_text(BUILD_MARKED.format(marker=str(tmp_path / "b_built")) + PLAIN_MODEL)
    cfg = make_config(
        "builds.ahead=always", "builds.parallel=2", "timing.enabled=false", "sandbox.layer=off",
        f"solutions_dir={tmp_path / 'solutions'}",
    )
    targets = select_targets(cfg, problem="1_Scale_Bias_ReLU", solution=None, everything=False)
    results = cfg.path(cfg.results_dir) / "first-built"

    def records() -> list:
        try:
            return list(read_records(results))
        except Exception:  # a line being written
            return []

    done = threading.Event()

    def release_a_after_b() -> None:
        while not done.is_set():
            if any(isinstance(r, CandidateRecord) and r.identity.candidate == "b_built_first" for r in records()):
                release.touch()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=release_a_after_b, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        run(cfg, targets, run_id="first-built", quiet=True, argv=())
    finally:
        done.set()
        watcher.join(5)
    order = [r.identity.candidate for r in records() if isinstance(r, CandidateRecord)]
    assert order == ["b_built_first", "a_built_last"], order
    assert release.exists() and time.monotonic() - started < 85  # a's build was let end by b's record, not its 90 s
    assert sum(isinstance(r, ReferenceRecord) for r in records()) == 1


@pytest.mark.slow
def test_a_run_stopped_while_its_lane_waits_for_any_build_ends_at_once_and_leaves_no_build_running(tmp_path):
    # one candidate whose build ahead never ends by itself (90 s): the lane runs the problem's reference pass, then
    # waits for a build to end. SIGTERM then ends the run as an interruption (exit 130), at once, with the reference's
    # record kept, no record for the candidate (--resume redoes it), and the held build process ended with the run.
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from harness.core.errors import ExitCode

    folder = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    folder.mkdir(parents=True)
    pid_file = tmp_path / "build.pid"
    held = BUILD_HELD.format(release=str(tmp_path / "never")).replace(
        "    deadline =", f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    deadline =", 1
    )
    (folder / "held_build.py").write_text(held + PLAIN_MODEL)
    records = tmp_path / "results" / "stopped" / "records.jsonl"
    run = subprocess.Popen(
        [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--solution", str(folder / "held_build.py"),
         "--device", "cpu", "--no-timing", "--results", str(tmp_path / "results"), "--run-id", "stopped",
         "--set", "builds.ahead=always", "--set", "sandbox.layer=off", "--set", f"build_cache_dir={tmp_path / 'builds'}",
         "--set", "baselines.compile_modes=[]", "--set", "check.trials=1"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )

    def kinds() -> list[str]:
        try:
            return [json.loads(line)["kind"] for line in records.read_text().splitlines()]
        except (OSError, ValueError):
            return []

    try:
        deadline = time.monotonic() + 60
        def held() -> bool:  # the build process says who it is once it holds
            return pid_file.is_file() and bool(pid_file.read_text().strip())

        while not ("reference" in kinds() and held()) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.1)
        assert "reference" in kinds(), "the lane did not run the reference pass while it waited"
        assert held() and "candidate" not in kinds(), "the build was not held while the lane waited"
        build = int(pid_file.read_text())
        stopped_at = time.monotonic()
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
        took = time.monotonic() - stopped_at
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == ExitCode.INTERRUPTED, err
    assert took < 20, took
    assert "candidate" not in kinds()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{build}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{build}"), "the held build outlived its run"
