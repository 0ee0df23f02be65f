"""A virtual environment for install tests that sees what this interpreter has installed, whether this
interpreter is the system's Python or a virtual environment of its own (made the README's way)."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_seeing_this_python(folder: Path) -> Path:
    """Make a venv without pip at `folder` whose path holds this interpreter's site-packages ahead of the
    base Python's (`--system-site-packages` alone would see only the base's, with its older setuptools),
    so pip builds and installs with no download; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    ours = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]) if Path(p).is_dir()]
    Path(own, "_outer_site_packages.pth").write_text("\n".join(ours) + "\n")
    return python
