"""The blocks of ``docs/quickstart.md`` that the quickstart tier applies, read from the page.

A fenced block is part of the quickstart when an HTML comment ``<!-- quickstart: ACTION -->``
precedes it (blank lines and other comments, such as ``<!-- fragment: ... -->``, may sit in
between; the comments are invisible on the site). The actions:

- ``new-project`` (```sh): run with bash in an empty directory; it leaves one Django
  project (a directory with ``manage.py``) behind.
- ``append PATH`` (```python): appended to the project's file ``PATH``. A line
  ``NAME = [..., items]`` means "add ``items`` to ``NAME``" and is applied as
  ``NAME = [*NAME, items]``.
- ``write PATH`` (```python): written as the new file ``PATH`` of the project.
- ``run`` (```sh): run with bash in the project directory; it must exit 0.
- ``backport`` (```sh): run as ``run`` is, but only when the virtualenv's Django has no
  ``django.tasks`` (Django 5.2), as the page tells Django 5.2 users to.
- ``worker`` (```sh, one command): started in the background as the worker process; a
  later ``worker`` block restarts it (SIGTERM, which must end it with 0, then the command
  again), as a user restarts a worker to load new settings.
- ``shell`` (```python, after the worker): run with ``python manage.py shell`` in the
  project directory while the worker runs, after ``from MODULE import *`` of each module the
  page wrote (the page's examples share one namespace; a user imports them in the shell).
  Consecutive ``shell`` blocks run in one shell, as a user types them one after the other,
  and that shell runs several times, so a block that races the worker fails here.

Blocks are applied in the order of the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.markdown import fences

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
MARKER = re.compile(r"^<!--\s*quickstart:\s*(?P<action>[\w-]+)(?:\s+(?P<target>\S+))?\s*-->$")
COMMENT = re.compile(r"^<!--.*-->$")
LANGUAGES = {
    "new-project": "sh",
    "append": "python",
    "write": "python",
    "run": "sh",
    "backport": "sh",
    "worker": "sh",
    "shell": "python",
}
TARGETED = {"append", "write"}
EXTEND = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*) = \[\.\.\.,\s*", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One marked block of the page: what to do with it, and its code."""

    action: str
    target: str | None
    code: str
    line: int  # 1-based line of the opening fence, for messages


def blocks(page: Path = PAGE) -> list[Block]:
    """The marked blocks of ``page``, in order; a marker that marks no block of the
    language its action needs (a typo, a moved block) raises ``ValueError``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    used: set[int] = set()
    for i, end, opening in fences(lines, FENCE):
        if end == len(lines):
            raise ValueError(f"{page.name}:{i + 1}: a code block that is never closed")
        for at, marker in _markers_before(lines, i):
            used.add(at)
            action, target = marker["action"], marker["target"]
            if LANGUAGES.get(action) != opening["lang"] or (action in TARGETED) != bool(target):
                raise ValueError(f"{page.name}:{at + 1}: {lines[at]!r} does not fit its block")
            found.append(Block(action, target, "\n".join(lines[i + 1 : end]) + "\n", i + 1))
    stray = [n + 1 for n, line in enumerate(lines) if "quickstart:" in line and n not in used]
    if stray:
        raise ValueError(f"{page.name}: quickstart markers that mark no block, lines {stray}")
    return found


def _markers_before(lines: list[str], fence: int) -> list[tuple[int, re.Match[str]]]:
    markers = []
    at = fence - 1
    while at >= 0 and (not lines[at].strip() or COMMENT.match(lines[at].strip())):
        match = MARKER.match(lines[at].strip())
        if match:
            markers.append((at, match))
        at -= 1
    return markers[::-1]


def extend_lists(code: str) -> str:
    """A settings excerpt as code to append: ``NAME = [..., x]`` -> ``NAME = [*NAME, x]``."""
    applied = EXTEND.sub(lambda m: f"{m['name']} = [*{m['name']}, ", code)
    if "..." in applied:
        raise ValueError(f"an excerpt with '...' the quickstart tier cannot apply:\n{code}")
    return applied
