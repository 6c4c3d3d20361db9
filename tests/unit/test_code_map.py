"""The map of the code in docs/contributing.md ("Layout") matches the tree: every module
of the library and of the runner is named there, and every ``name.py`` it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "contributing.md"
PACKAGES = (ROOT / "everystep", ROOT / "image" / "everystep_runner")


def layout_block() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Layout") :]
    return section[section.index("```text") : section.index("```", section.index("```text") + 7)]


def modules() -> set[str]:
    return {
        path.name
        for package in PACKAGES
        for path in package.rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    }


def test_every_module_is_on_the_map() -> None:
    named = set(re.findall(r"\b(\w+\.py)\b", layout_block()))
    missing = sorted(modules() - named)
    assert not missing, f"docs/contributing.md's Layout does not name: {missing}"


def test_the_map_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"\b(\w+\.py)\b", layout_block()))
    everywhere = {path.name for path in ROOT.rglob("*.py") if ".venv" not in path.parts}
    gone = sorted(named - everywhere)
    assert not gone, f"docs/contributing.md's Layout names files that do not exist: {gone}"
