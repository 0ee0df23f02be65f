"""What the parent hands a candidate's processes about their boundary (harness.parent.boundary
decides it, harness.worker.sandbox enters it): one JSON value in the environment."""

from __future__ import annotations

import dataclasses
import json

from harness.core.config import Boundary

ENV = "HARNESS_SANDBOX"  # the policy, for the processes that enter it (they remove it from their environment)


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """What a candidate's process may touch."""

    layer: Boundary  # landlock | mount (the layers a process enters itself)
    writable: tuple[str, ...] = ()  # landlock: the only folders it may write beneath
    protected: tuple[str, ...] = ()  # mount: the folders made read-only

    def to_env(self) -> str:
        return json.dumps(
            {"layer": self.layer.value, "writable": list(self.writable), "protected": list(self.protected)}
        )

    @classmethod
    def from_env(cls, text: str) -> "SandboxPolicy":
        data = json.loads(text)
        return cls(Boundary(data["layer"]), tuple(data.get("writable", ())), tuple(data.get("protected", ())))
