"""The pure layers need no torch: harness.core, the sources, the views and the verdict import in a
process where importing torch fails, so a machine without torch can read records, gate and rank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BLOCK_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is blocked in this test ({name})")
        return None
sys.meta_path.insert(0, NoTorch())
"""


def _imports_without_torch(modules: list[str]) -> subprocess.CompletedProcess:
    code = BLOCK_TORCH + "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + "assert 'torch' not in sys.modules\nprint('ok')\n"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _modules(package: str) -> list[str]:
    folder = ROOT / "harness" / package
    return [f"harness.{package}"] + [f"harness.{package}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"]


def test_core_sources_views_and_the_verdict_import_where_torch_cannot() -> None:
    modules = [*_modules("core"), *_modules("sources"), *_modules("views"), "harness.parent.verdict"]
    done = _imports_without_torch(modules)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_torch_block_itself_stops_a_module_that_needs_torch() -> None:
    done = _imports_without_torch(["harness.device.timing"])
    assert done.returncode != 0 and "torch is blocked" in done.stderr
