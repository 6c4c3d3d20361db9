"""Modules no process may import for a task run's name call ``mark()`` as they are
imported: the test process sees it in ``MARKED``, and a worker subprocess started with
``EVERYSTEP_TEST_MARKER_DIR`` leaves a file named after the module there."""

from __future__ import annotations

import os
from pathlib import Path

MARKED: list[str] = []


def mark(module: str) -> None:
    """Record that ``module`` is being imported (or its code run) in this process."""
    MARKED.append(module)
    directory = os.environ.get("EVERYSTEP_TEST_MARKER_DIR")
    if directory:
        Path(directory, module).touch()
