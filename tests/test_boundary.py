"""The boundary around candidate code (harness.worker.sandbox, harness.parent.boundary): a candidate
that rewrites the problem, plants files in the trees and leaves a detached process behind, judged
before an all-zeros kernel, must change nothing a later verdict depends on, on every layer this
machine offers; and the judge loads the problem from the bytes pinned when it was found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.core.boundary import SandboxPolicy
from harness.core.config import Boundary
from harness.core.status import Status
from harness.parent.boundary import TreeWatch, open_boundary, probe
from tests.sources import HONEST_FORWARD, scale_bias_relu

ROOT = Path(__file__).resolve().parent.parent
# the detached process's sleep, found by its command line: this test process's own (its pid in the fraction), so
# another test run on the machine, whose candidates detach sleepers of their own, is never counted here
MARK = f"4242.{os.getpid()}"

TAMPERING = """
import pathlib
import subprocess


def _tamper():
    problem = pathlib.Path({problem!r})
    try:  # the reference would return zeros for every later candidate
        problem.write_text(problem.read_text().replace({forward!r}, "return torch.zeros_like(x)"))
    except OSError:
        pass
    for folder in {plant!r}:
        try:
            (pathlib.Path(folder) / "planted.py").write_text("class ModelNew: pass\\n")
        except OSError:
            pass
    subprocess.Popen(["sh", "-c", "setsid sleep {mark} >/dev/null 2>&1 &"])  # detached, its shell gone


_tamper()
"""

ZEROS = scale_bias_relu("return torch.zeros_like(x)")

SCRATCH_WRITER = scale_bias_relu(before="""
import pathlib
import tempfile

pathlib.Path("own.txt").write_text("its working folder")
with tempfile.NamedTemporaryFile("w", delete=False) as f:  # the system temp folder: its TMPDIR
    f.write("temporary")
""")


def tampering(problem: Path, plant: list[str]) -> str:
    """An honest ModelNew whose import rewrites `problem`'s forward to return zeros, plants
    `planted.py` in each folder of `plant` and leaves a detached `sleep` running."""
    return scale_bias_relu(before=TAMPERING.format(problem=str(problem), forward=HONEST_FORWARD, plant=plant, mark=MARK))


def _layers() -> list[str]:
    """The kernel layers this machine can enter, and the hash fallback."""
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    return [layer for layer in (Boundary.LANDLOCK, Boundary.MOUNT) if probe(layer, str(folder))[0]] + [Boundary.HASH]


def _sleepers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if command[:2] == [b"sleep", MARK.encode()]:
                found.append(int(entry))
    return found


@pytest.fixture
def trees(tmp_path, isolated_tmp):
    """A problem tree, a solutions tree and a results folder of their own."""
    problems = tmp_path / "problems" / "level0"
    problems.mkdir(parents=True)
    shutil.copy(ROOT / "problems" / "level0" / "1_Scale_Bias_ReLU.py", problems)
    solutions = tmp_path / "solutions" / "1_Scale_Bias_ReLU"
    solutions.mkdir(parents=True)
    results = tmp_path / "results"
    results.mkdir()
    problem = problems / "1_Scale_Bias_ReLU.py"
    (solutions / "a_tamper.py").write_text(tampering(problem, [str(problems), str(solutions), str(results)]))
    (solutions / "b_zeros.py").write_text(ZEROS)
    yield {"problems": tmp_path / "problems", "solutions": tmp_path / "solutions", "results": results, "problem": problem, "before": problem.read_bytes()}
    for pid in _sleepers():
        os.kill(pid, 9)


def _overrides(trees, layer):
    return [f"problems_dir={trees['problems']}", f"solutions_dir={trees['solutions']}", f"results_dir={trees['results']}", f"sandbox.layer={layer}"]


def _planted(trees) -> list[Path]:
    return [p for key in ("problems", "solutions", "results") for p in trees[key].rglob("planted.py")]


@pytest.mark.slow
@pytest.mark.parametrize("layer", _layers())
def test_a_tampering_candidate_changes_nothing_a_later_verdict_depends_on_in_a_run(trees, make_config, layer):
    done = subprocess.run(
        [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--json", *[a for o in _overrides(trees, layer) for a in ("--set", o)],
         "--set", f"build_cache_dir={make_config().build_cache_dir}", "--set", "device=cpu", "--set", "check.trials=2", "--set", "timing.enabled=false",
         "--set", "baselines.compile_modes=[]", "--set", "flags.no_custom_kernel=flag"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    records = {r["identity"]["candidate"]: r for r in map(__import__("json").loads, done.stdout.splitlines()) if r.get("identity")}
    assert set(records) == {"a_tamper", "b_zeros"}, done.stderr[-2000:]
    assert trees["problem"].read_bytes() == trees["before"]
    assert records["b_zeros"]["decision"]["status"] == Status.INCORRECT
    assert _planted(trees) == []
    assert _sleepers() == []
    tamper = records["a_tamper"]["decision"]
    if layer == Boundary.HASH:
        assert tamper["status"] == Status.TAMPERED and "(restored)" in tamper["reason"] and "planted" in tamper["reason"], tamper
    else:
        assert tamper["status"] != Status.TAMPERED, tamper
        assert any("left 1 process running" in n for n in tamper["notes"]), tamper  # the detached sleep; its shell had exited
    assert f"boundary around candidates: {layer}" in done.stderr


@pytest.mark.slow
def test_on_the_ray_executor_a_tampering_candidate_changes_nothing_a_later_verdict_depends_on(trees, make_config):
    """The Ray executor's lanes and build tasks enter the same boundary as local lanes (auto: the
    strongest this machine offers), and the run says which."""
    pytest.importorskip("ray")
    import tempfile

    layer = _layers()[0]
    short = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    done = subprocess.run(
        [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--json", "--executor", "ray",
         *[a for o in _overrides(trees, "auto") for a in ("--set", o)],
         "--set", f"build_cache_dir={make_config().build_cache_dir}", "--set", "device=cpu", "--set", "check.trials=2",
         "--set", "timing.enabled=false", "--set", "baselines.compile_modes=[]", "--set", "flags.no_custom_kernel=flag"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "TMPDIR": short},
    )
    shutil.rmtree(short, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    records = {r["identity"]["candidate"]: r for r in map(__import__("json").loads, lines) if r.get("identity")}
    assert set(records) == {"a_tamper", "b_zeros"}, done.stderr[-2000:]
    assert trees["problem"].read_bytes() == trees["before"]
    assert records["b_zeros"]["decision"]["status"] == Status.INCORRECT
    assert _planted(trees) == []
    assert _sleepers() == []
    if layer == Boundary.HASH:
        assert records["a_tamper"]["decision"]["status"] == Status.TAMPERED, records["a_tamper"]["decision"]
    assert f"boundary around the lanes' candidates: {layer}" in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_in_a_session_the_zeros_kernel_is_incorrect_before_and_after_the_tampering(trees, make_config):
    from harness import api

    cfg = make_config(*_overrides(trees, Boundary.AUTO), "timing.enabled=false")
    folder = trees["solutions"] / "1_Scale_Bias_ReLU"
    with api.Session(cfg) as session:
        before = session.evaluate("1_Scale_Bias_ReLU", ZEROS, name="zeros_before")
        session.evaluate("1_Scale_Bias_ReLU", (folder / "a_tamper.py").read_text(), name="tamper")
        after = session.evaluate("1_Scale_Bias_ReLU", ZEROS, name="zeros_after")
    assert before.decision.status is Status.INCORRECT
    assert after.decision.status is Status.INCORRECT, after.decision.reason
    assert trees["problem"].read_bytes() == trees["before"]
    assert _planted(trees) == [] and _sleepers() == []


@pytest.mark.slow
def test_with_no_boundary_the_pinned_problem_is_still_the_one_judged_and_the_change_is_reported(trees, make_config):
    """sandbox.layer=off: the candidate does rewrite the file, but the judge loaded the bytes read
    when the problem was found; the later record says the file changed."""
    from harness import api

    cfg = make_config(*_overrides(trees, Boundary.OFF), "timing.enabled=false")
    folder = trees["solutions"] / "1_Scale_Bias_ReLU"
    with api.Session(cfg) as session:
        session.evaluate("1_Scale_Bias_ReLU", (folder / "a_tamper.py").read_text(), name="tamper")
        after = session.evaluate("1_Scale_Bias_ReLU", ZEROS, name="zeros_after")
    assert trees["problem"].read_bytes() != trees["before"]  # nothing stopped the write
    assert after.decision.status is Status.INCORRECT, after.decision.reason
    assert any("changed on disk during the run" in w for w in after.decision.warnings), after.decision.warnings
    assert _sleepers() == []  # processes end with their worker whatever the layer


@pytest.mark.slow
@pytest.mark.parametrize("layer", _layers())
def test_a_candidate_that_writes_its_own_folder_and_the_temp_folder_still_passes(trees, make_config, layer):
    from harness import api

    cfg = make_config(*_overrides(trees, layer), "timing.enabled=false")
    with api.Session(cfg) as session:
        record = session.evaluate("1_Scale_Bias_ReLU", SCRATCH_WRITER, name="scratch_writer")
    assert record.decision.status is Status.CORRECT, record.decision.reason


ATTACKS = """
import glob
import os
import pathlib


def _attempt(label, action):
    try:
        action()
        return label + "=done"
    except OSError:
        return label + "=refused"


def _poison():
    libraries = glob.glob({cache!r} + "/**/*.so", recursive=True)
    for library in libraries:
        pathlib.Path(library).write_bytes(b"poison")
    pathlib.Path({cache!r}, "planted").write_text("x")


def _siblings():
    own, scratch = os.getcwd(), os.path.dirname(os.getcwd())
    others = [os.path.join(scratch, p) for p in os.listdir(scratch)]  # refused outright where reads are confined
    others = [p for p in others if p != own and os.path.isdir(p)]
    assert others, "no sibling folder to write"
    for other in others:
        pathlib.Path(other, "planted").write_text("x")


def _attack():
    results = []
    try:  # a file outside everything it needs: its content would come back in the reason
        results.append("secret=" + pathlib.Path({secret!r}).read_text().strip())
    except OSError:
        results.append("secret=refused")
    results.append(_attempt("cmdline", lambda: pathlib.Path(f"/proc/{{os.getppid()}}/cmdline").read_bytes()))
    results.append(_attempt("cache", _poison))
    results.append(_attempt("siblings", _siblings))
    results.append(_attempt("shm", lambda: open("/dev/shm/{shm}", "w").close()))
    results.append(_attempt("dev", lambda: os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))))
    results.append(_attempt("root", lambda: open(f"/proc/{{os.getppid()}}/root" + {problem!r}, "a").close()))
    raise RuntimeError("attacks: " + " ".join(results))


_attack()
"""
SECRET = "SECRET-7f3a9c"
# what each layer lets through (docs/integrity.md, "The boundary"): the mount layer confines writes only, and
# its /dev/shm is private to the namespace; the hash layer watches the trees, not the cache or the machine
EXPECTED = {
    Boundary.LANDLOCK: "secret=refused cmdline=refused cache=refused siblings=refused shm=refused dev=refused root=refused",
    Boundary.MOUNT: f"secret={SECRET} cmdline=done cache=refused siblings=refused shm=done dev=refused root=refused",
}


def _attack_run(trees, tmp_path, layer, *extra, env=None):
    """Run the attacking candidate alone under `layer`; check that each attack got what the layer
    allows, and that nothing it wrote or read shows."""
    import json

    cache = tmp_path / "cache"
    fake = cache / ("ab" * 16) / ("cd" * 16)  # another candidate's finished build
    fake.mkdir(parents=True)
    (fake / "ext.so").write_bytes(b"honest library")
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    shm = f"harness-attack-{os.getpid()}-{layer}"
    folder = trees["solutions"] / "1_Scale_Bias_ReLU"
    for old in folder.iterdir():
        old.unlink()
    attack = ATTACKS.format(cache=str(cache), secret=str(secret), shm=shm, problem=str(trees["problem"]))
    (folder / "attacker.py").write_text(attack)
    done = subprocess.run(
        [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--json", "--run-id", "attack", *extra,
         *[a for o in _overrides(trees, layer) for a in ("--set", o)], "--set", f"build_cache_dir={cache}",
         "--set", "device=cpu", "--set", "check.trials=2", "--set", "timing.enabled=false", "--set", "baselines.compile_modes=[]"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env,
    )
    try:
        records = [r for r in map(json.loads, (x for x in done.stdout.splitlines() if x.startswith("{"))) if r.get("identity")]
        assert len(records) == 1, done.stderr[-2000:]
        reason = records[0]["decision"]["reason"]
        assert EXPECTED[layer] in reason, reason
        assert (fake / "ext.so").read_bytes() == b"honest library" and not (cache / "planted").exists()
        assert trees["problem"].read_bytes() == trees["before"]
        assert not list(Path(tempfile.gettempdir()).glob("harness-scratch/*/*/planted"))
        if layer == Boundary.LANDLOCK:  # in no record, view or leaderboard of the run
            for written in (trees["results"] / "attack").rglob("*"):
                if written.is_file():
                    assert SECRET not in written.read_text(errors="replace"), written
        assert not Path("/dev/shm", shm).exists()  # refused, or gone with the namespace
    finally:
        Path("/dev/shm", shm).unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.parametrize("layer", [layer for layer in _layers() if layer != Boundary.HASH])
def test_an_attacking_candidate_reads_and_writes_only_what_its_layer_allows(trees, tmp_path, layer):
    """Reads outside the allow-list, another process's /proc, the build cache, another process's folder,
    /dev/shm, a device node, and the host's root through /proc: each refused or the layer's documented
    limit, and the secret never reaches a record or a leaderboard."""
    _attack_run(trees, tmp_path, layer)


@pytest.mark.slow
@pytest.mark.skipif(_layers()[0] == Boundary.HASH, reason="this machine offers no kernel layer")
def test_on_the_ray_executor_the_attacking_candidate_meets_the_same_boundary(trees, tmp_path):
    pytest.importorskip("ray")
    short = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    try:
        _attack_run(trees, tmp_path, _layers()[0], "--executor", "ray", env={**os.environ, "TMPDIR": short})
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _in_sandbox(policy: SandboxPolicy, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_SANDBOX": policy.to_env(), "PYTHONPATH": str(ROOT)}
    runner = f"from harness.worker import sandbox\nsandbox.enter_from_environment()\nsandbox.enter_pending()\n{code}"
    return subprocess.run([sys.executable, "-c", runner], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(Boundary.LANDLOCK not in _layers(), reason="this kernel has no Landlock")
def test_landlock_allows_writes_beneath_the_writable_folders_only_and_refuses_tcp(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    own.mkdir()
    other.mkdir()
    code = f"""
import socket
open({str(own / 'a')!r}, 'w').write('ok')
for target in ({str(other / 'b')!r}, {str(tmp_path / 'c')!r}):
    try:
        open(target, 'w')
        print('wrote', target)
    except PermissionError:
        pass
try:
    socket.socket().connect(('127.0.0.1', 9))
except PermissionError:
    print('tcp refused')
except OSError:
    print('tcp allowed')
"""
    done = _in_sandbox(SandboxPolicy(Boundary.LANDLOCK, writable=(str(own), "/dev")), code)
    assert done.returncode == 0, done.stderr
    assert (own / "a").read_text() == "ok" and not (other / "b").exists() and not (tmp_path / "c").exists()
    assert "wrote" not in done.stdout
    assert "tcp refused" in done.stdout or "tcp allowed" in done.stdout  # refused where the ABI has network rules (4+)


@pytest.mark.skipif(Boundary.MOUNT not in _layers(), reason="the mount layer needs CAP_SYS_ADMIN (a root parent)")
def test_the_mount_layer_makes_the_trees_read_only_and_they_cannot_be_remounted(tmp_path):
    kept, free, single = tmp_path / "kept", tmp_path / "free", tmp_path / "run.py"
    kept.mkdir()
    free.mkdir()
    single.write_text("main()\n")
    code = f"""
import subprocess
open({str(free / 'a')!r}, 'w').write('ok')
subprocess.run(['mount', '-o', 'remount,rw', {str(kept)!r}], capture_output=True)
for path in ({str(kept / 'b')!r}, {str(single)!r}):
    try:
        open(path, 'a').write('forged')
        print('wrote')
    except OSError:
        print('refused')
"""
    done = _in_sandbox(SandboxPolicy(Boundary.MOUNT, protected=(str(kept), str(single))), code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["refused", "refused"], done.stdout
    assert not (kept / "b").exists() and (free / "a").exists() and single.read_text() == "main()\n"


def test_a_layer_that_cannot_be_entered_ends_the_process_before_candidate_code(tmp_path):
    policy = SandboxPolicy(Boundary.LANDLOCK, writable=(str(tmp_path),))
    env = {**os.environ, "HARNESS_SANDBOX": policy.to_env().replace('"landlock"', '"nonsense"'), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", "from harness.worker import sandbox\nsandbox.enter_from_environment()\nprint('ran')"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 70 and "ran" not in done.stdout and "cannot enter the boundary" in done.stderr


def test_the_hash_watch_removes_planted_files_and_restores_changed_ones(tmp_path):
    problems, results = tmp_path / "problems", tmp_path / "results"
    problems.mkdir()
    (results / "this-run").mkdir(parents=True)
    problem = problems / "p.py"
    problem.write_text("original\n")
    watch = TreeWatch((problems, results), keep=(problems,), skip=(results / "this-run",))
    assert watch.check() == []
    time.sleep(0.01)
    problem.write_text("changed!\n")
    (results / "planted.py").write_text("x")
    (results / "this-run" / "records.jsonl").write_text("the run's own writes are not watched")
    changes = watch.check()
    assert problem.read_text() == "original\n" and not (results / "planted.py").exists()
    assert any(c.startswith("planted") for c in changes) and any("(restored)" in c for c in changes)
    assert watch.check() == []


def test_a_named_layer_this_machine_cannot_enter_is_a_usage_error(tmp_path, make_config, monkeypatch):
    from harness.core.errors import UserError
    from harness.parent import boundary

    monkeypatch.setattr(boundary, "probe", lambda layer, folder, *reads: (False, "not here"))
    with pytest.raises(UserError, match="sandbox.layer=landlock: this machine cannot enter it"):
        open_boundary(make_config("sandbox.layer=landlock"), tmp_path)
    chosen = open_boundary(make_config("sandbox.layer=auto"), tmp_path)
    assert chosen.layer == Boundary.HASH and "no landlock: not here" in chosen.why and chosen.watch is not None


def test_the_hash_watch_sees_a_same_size_edit_whose_modification_time_was_put_back(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    problem = problems / "p.py"
    problem.write_text("return x * 2\n")
    before = problem.stat()
    watch = TreeWatch((problems,), keep=(problems,))
    time.sleep(0.01)
    problem.write_text("return x * 0\n")  # the same size
    os.utime(problem, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old modification time
    changes = watch.check()
    assert changes == [f"changed {problem} (restored)"] and problem.read_text() == "return x * 2\n"


def test_the_hash_watch_restores_a_changed_harness_file_and_watches_a_single_file(tmp_path):
    package, entry = tmp_path / "harness", tmp_path / "run.py"
    package.mkdir()
    (package / "verdict.py").write_text("PASS = False\n")
    entry.write_text("main()\n")
    watch = TreeWatch((package, entry), keep=(package, entry))
    time.sleep(0.01)
    (package / "verdict.py").write_text("PASS = True\n")
    entry.write_text("forged()\n")
    changes = watch.check()
    assert sorted(changes) == sorted([f"changed {package / 'verdict.py'} (restored)", f"changed {entry} (restored)"])
    assert (package / "verdict.py").read_text() == "PASS = False\n" and entry.read_text() == "main()\n"


def test_a_record_appended_to_the_run_by_something_else_is_cut_and_named(tmp_path):
    from harness.core.records import RunEnd
    from harness.core.store import RunStore, read_records

    store = RunStore(tmp_path, "run")
    assert store.foreign() == ""  # nothing written yet
    store.append(RunEnd("run", "now", {}))
    assert store.foreign() == ""
    honest = store.records_path.read_bytes()
    with open(store.records_path, "a") as f:  # a forged 99x, appended by a candidate under the hash layer
        f.write('{"kind": "candidate", "forged": 99}\n')
    said = store.foreign()
    assert said.startswith("appended 36 bytes to") and said.endswith("(cut)"), said
    assert store.records_path.read_bytes() == honest and len(read_records(store.records_path)) == 1
    assert store.foreign() == ""


def test_every_protected_tree_includes_the_entry_point_and_the_configs_of_a_checkout(make_config):
    from harness.parent.boundary import protected_trees

    trees = protected_trees(make_config())
    assert ROOT / "run.py" in trees and ROOT / "configs" in trees and ROOT / "harness" in trees


def test_the_watchdog_continues_a_stopped_process_and_ends_with_it():
    import signal
    import threading

    from harness.parent import watchdog
    from harness.parent.scratch import process_start_time

    sleeper = subprocess.Popen(["sleep", "30"])
    counted: list[int] = []
    thread = threading.Thread(target=lambda: counted.append(watchdog.watch(sleeper.pid, process_start_time(sleeper.pid), 0.3)))
    thread.start()
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while watchdog.state(sleeper.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        while watchdog.state(sleeper.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watchdog.state(sleeper.pid) in ("S", "R")  # continued, not left stopped
    finally:
        sleeper.kill()
        sleeper.wait()
    thread.join(timeout=10)
    assert counted == [1]  # it ended with its process


STOPPER = scale_bias_relu(before="""
import os
import signal

os.kill(os.getppid(), signal.SIGSTOP)  # the worker's parent: the run itself
""")


@pytest.mark.slow
def test_a_candidate_that_stops_the_run_does_not_hang_it(trees, make_config):
    """Under a layer that lets the signal through (hash), the watchdog continues the run."""
    import json

    folder = trees["solutions"] / "1_Scale_Bias_ReLU"
    for old in folder.iterdir():
        old.unlink()
    (folder / "stopper.py").write_text(STOPPER)
    done = subprocess.run(
        [sys.executable, "run.py", "--problem", "1_Scale_Bias_ReLU", "--json",
         *[a for o in _overrides(trees, Boundary.HASH) for a in ("--set", o)],
         "--set", "device=cpu", "--set", "check.trials=2", "--set", "timing.enabled=false", "--set", "baselines.compile_modes=[]",
         "--set", "flags.no_custom_kernel=flag"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    (record,) = [r for r in map(json.loads, (x for x in done.stdout.splitlines() if x.startswith("{"))) if r.get("identity")]
    assert record["decision"]["status"] == Status.CORRECT, record["decision"]
    assert "the watchdog continued it" in done.stderr, done.stderr[-2000:]
