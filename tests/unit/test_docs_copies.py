"""A page that shows a file of the repository whole shows it as it is (issue 54): the
copy is in the Markdown itself, readable on GitHub and in the sdist, not included by a
build step; this test keeps the copy and the file the same.

A copy is the fenced block after a comment naming the file: ``<!-- file: PATH -->``, or a
``<!-- fragment: PATH as it is … -->`` for a Python block the docs' example runner skips.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.markdown import fences

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"^<!-- (?:file: (?P<file>\S+) -->|fragment: (?P<fragment>\S+) as it is\b)")
FENCE = re.compile(r"^```\w+$")


def copies() -> list[tuple[str, int, str, str]]:
    """(page, line, path, the block's text) for every copy in the docs."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        lines = page.read_text().splitlines()
        named: str | None = None
        for number, line in enumerate(lines):
            match = NAMED.match(line)
            if match:
                named = match.group("file") or match.group("fragment")
            elif FENCE.match(line) and named is not None:
                start, end, _ = next(fences(lines[number:], FENCE))
                text = "\n".join(lines[number + start + 1 : number + end])
                found.append((str(page.relative_to(ROOT)), number + 1, named, text))
                named = None
    return found


def test_the_progress_page_shows_the_example_projects_stream_whole():
    shown = {path for _, _, path, _ in copies()}
    assert {
        "image/example_project/shop/views.py",
        "image/example_project/shop/templates/shop/import.html",
    } <= shown


def test_no_page_needs_a_build_step_to_show_an_example():
    for page in sorted((ROOT / "docs").rglob("*.md")):
        assert "--8<--" not in page.read_text(), f"{page}: a snippet only the docs build expands"


@pytest.mark.parametrize("page, line, path, text", copies())
def test_a_copy_in_the_docs_is_the_file_as_it_is(page, line, path, text):
    assert text == (ROOT / path).read_text().rstrip("\n"), (
        f"{page}:{line} shows {path} otherwise than the file: copy the file into the page"
    )
