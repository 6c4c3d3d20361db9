"""Fenced code blocks of a Markdown page, for the tests that run the docs' examples
(``tests/integration/test_docs_examples.py``) and follow the Quickstart
(``tests/packaging/quickstart_page.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterator


def fences(lines: list[str], opening: re.Pattern[str]) -> Iterator[tuple[int, int, re.Match[str]]]:
    """Each block whose first line matches ``opening``: the index of that line, the index
    of its closing fence (``len(lines)`` if the page ends first) and the match."""
    i = 0
    while i < len(lines):
        match = opening.match(lines[i])
        if match is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        yield i, end, match
        i = end + 1
