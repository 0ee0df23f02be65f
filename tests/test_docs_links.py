"""Every relative link and image in the README and docs/ points to a file that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for match in LINK.finditer(page.read_text(errors="replace")):
            target = match.group(1).split("#")[0]
            if target and not target.startswith(("http://", "https://", "mailto:")) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
