"""The reference cache (harness.parent.reference_cache.ProfileCache): what a reference pass measured on a GPU
(its profiled call, its speed-of-light) is reused only under the very key it was measured with."""
import json

import pytest

from tests.records import reference_record
from harness.core.records import CallProfile, KernelTime, ReferenceRecord, SpeedOfLight
from harness.parent.reference_cache import ProfileCache

PROFILE = CallProfile(kernel_ms=0.5, span_ms=0.6, launches=2, streams=1, after_return=0, kernels=(KernelTime("k", 2, 0.5),))
SOL = SpeedOfLight(flops=10, min_bytes=100, dtype="float32", peak_tflops=1.0, peak_gbps=1.0, floor_ms=0.1, bound="memory")


def reference(run_id="first", profile=PROFILE, sol=SOL):
    return reference_record(run_id=run_id, problem="p", problem_hash="h", problem_path="p.py", device="cuda", device_name="GPU", ok=True, reason="ok", profile=profile, speed_of_light=sol)


@pytest.fixture
def cfg(make_config, tmp_path):
    return make_config(f"measurement_cache_dir={tmp_path / 'measurements'}")


def test_a_saved_profile_is_read_back_under_the_same_key_with_the_run_that_measured_it(cfg):
    ProfileCache(cfg, "h").save(reference())
    learned = ProfileCache(cfg, "h").load()
    assert learned is not None and learned.run_id == "first"
    assert learned.profile == PROFILE and learned.speed_of_light == SOL


@pytest.mark.parametrize("change", ["problem file", "tf32", "L2 flush", "torch"])
def test_any_change_to_the_key_is_a_miss(cfg, make_config, tmp_path, monkeypatch, change):
    ProfileCache(cfg, "h").save(reference())
    if change == "problem file":
        assert ProfileCache(cfg, "h2").load() is None
    elif change == "tf32":
        assert ProfileCache(make_config(f"measurement_cache_dir={tmp_path / 'measurements'}", "check.allow_tf32=true"), "h").load() is None
    elif change == "L2 flush":
        assert ProfileCache(make_config(f"measurement_cache_dir={tmp_path / 'measurements'}", "timing.flush_l2=false"), "h").load() is None
    else:
        monkeypatch.setattr("torch.__version__", "0.0.1")
        assert ProfileCache(cfg, "h").load() is None


def test_an_entry_whose_stored_key_differs_or_that_is_corrupt_is_never_read(cfg):
    cache = ProfileCache(cfg, "h")
    cache.save(reference())
    data = json.loads(cache.path.read_text())
    data["key"]["gpu"] = ["another GPU", "1.0"]  # copied from another machine under this file name
    cache.path.write_text(json.dumps(data))
    assert ProfileCache(cfg, "h").load() is None
    cache.path.write_text('{"key": ')  # half-written
    assert ProfileCache(cfg, "h").load() is None


def test_an_entry_without_a_speed_of_light_still_gives_the_profile(cfg):
    ProfileCache(cfg, "h").save(reference(sol=None))
    learned = ProfileCache(cfg, "h").load()
    assert learned is not None and learned.profile == PROFILE and learned.speed_of_light is None
