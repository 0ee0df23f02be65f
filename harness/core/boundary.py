"""What the parent hands a candidate's processes about their boundary (harness.parent.boundary
decides it, harness.worker.sandbox enters it): one JSON value in the environment."""

from __future__ import annotations

import dataclasses
import json

from harness.core.config import Boundary

ENV = "HARNESS_SANDBOX"  # the policy, for the processes that enter it (they remove it from their environment)


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """What a candidate's process may touch. Its own folder (its temporary files, JIT caches and
    staged builds) is added when the process learns it (harness.worker.sandbox.take_own)."""

    layer: Boundary  # landlock | mount | off (the layers a process enters itself)
    writable: tuple[str, ...] = ()  # landlock: besides its own folder, the only paths it may write (device nodes)
    protected: tuple[str, ...] = ()  # mount: the folders made read-only
    confine_reads: bool = False  # landlock: reads only beneath the allow-list (harness.worker.sandbox.read_roots)
    readable: tuple[str, ...] = ()  # landlock with confine_reads: read roots the parent adds (the harness package)

    def to_env(self) -> str:
        return json.dumps(
            {
                "layer": self.layer.value,
                "writable": list(self.writable),
                "protected": list(self.protected),
                "confine_reads": self.confine_reads,
                "readable": list(self.readable),
            }
        )

    @classmethod
    def from_env(cls, text: str) -> "SandboxPolicy":
        data = json.loads(text)
        return cls(
            Boundary(data["layer"]),
            tuple(data.get("writable", ())),
            tuple(data.get("protected", ())),
            bool(data.get("confine_reads", False)),
            tuple(data.get("readable", ())),
        )
