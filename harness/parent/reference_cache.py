"""The reference caches, on disk under measurement_cache_dir: what a reference pass learned that a
later pass of the same key reuses (`ProfileCache`: the profiled call and speed-of-light, under
timing.reuse_profile) and the compile baselines' timings (`TimingCache`). Tensors are never cached;
an entry holds its whole key and is read only under an equal one."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

import torch

from harness.core.config import Config
from harness.core.records import SCHEMA_VERSION, CallProfile, ReferenceRecord, SpeedOfLight, from_dict, to_dict
from harness.device.environment import device_identity, query_gpu


def write_json(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, whole or not at all: a concurrent reader (another lane, another
    run) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


@dataclasses.dataclass(frozen=True)
class Learned:
    """What a reference pass measured that a later pass of the same key can reuse."""

    run_id: str  # the run that measured it
    profile: CallProfile  # the reference's profiled call
    speed_of_light: Optional[SpeedOfLight]  # its roofline floor (None: not measured)


class ProfileCache:
    """The reference cache: the reference's profiled call and speed-of-light, per (problem file,
    GPU model, driver, torch, CUDA, the settings that change which kernels run), reused across runs
    and sessions when timing.reuse_profile is set. Tensors and timings are never cached. An entry
    holds its full key and is read only when that key equals this pass's: a miss recomputes."""

    VERSION = 1

    def __init__(self, cfg: Config, problem_hash: str, gpu: str = "") -> None:
        self.key = {
            "version": self.VERSION,
            "problem": problem_hash,
            "gpu": query_gpu(["name", "driver_version"], ["-i", gpu] if gpu else None) or ["unknown GPU"],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "allow_tf32": cfg.check.allow_tf32,
            "flush_l2": cfg.timing.flush_l2,
            "speed_of_light": cfg.speed_of_light.enabled,
        }
        digest = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:24]
        self.path = cfg.path(cfg.measurement_cache_dir) / "reference" / f"{digest}.json"

    def load(self) -> Optional[Learned]:
        try:
            data = json.loads(self.path.read_text())
            if data.get("key") != json.loads(json.dumps(self.key)):
                return None
            return Learned(
                str(data["run_id"]),
                from_dict(CallProfile, data["profile"]),
                from_dict(SpeedOfLight, data["speed_of_light"]) if data.get("speed_of_light") else None,
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    def save(self, record: ReferenceRecord) -> None:
        write_json(
            self.path,
            {
                "key": self.key,
                "run_id": record.identity.run_id,
                "profile": to_dict(record.profile.profile),
                "speed_of_light": to_dict(record.profile.speed_of_light) if record.profile.speed_of_light else None,
            },
        )


class TimingCache:
    """The torch.compile baselines (each timed in turns with the eager reference) and the
    speed-of-light, per (problem hash, device, torch version, timing config), reused across runs
    when timing.reuse_reference is set."""

    def __init__(self, cfg: Config, problem_hash: str, device: str, gpu: str = "") -> None:
        timing = dataclasses.asdict(cfg.timing)
        for name in ("reuse_reference", "reuse_profile", "unstable_iqr", "null_candidate", "quiet", "null_tolerance"):
            timing.pop(name)
        key = {
            "problem": problem_hash,
            "device": device_identity(device, cfg.timing.cpu_threads, gpu),
            "torch": torch.__version__,
            "timing": timing,
            "allow_tf32": cfg.check.allow_tf32,
            "compile_modes": list(cfg.baselines.compile_modes),
            "speed_of_light": cfg.speed_of_light.enabled,
            "record_layout": SCHEMA_VERSION,  # an entry holds a reference record: another layout is a miss
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        self.path = cfg.path(cfg.measurement_cache_dir) / "reference-timing" / f"{digest}.json"

    def load(self) -> Optional[ReferenceRecord]:
        try:
            return from_dict(ReferenceRecord, json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def save(self, record: ReferenceRecord) -> None:
        write_json(self.path, to_dict(record))
