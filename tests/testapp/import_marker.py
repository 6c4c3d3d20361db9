"""A module no process may import because a stored row names one of its classes.

Importing it has a side effect a test can see from outside the process: it writes its
process id to the file named by ``EVERYSTEP_TEST_IMPORT_MARKER`` (when set). The tests
that plant rows naming ``Tint`` or ``Planted`` check that the module stays out of
``sys.modules`` and that the marker file never appears.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path

_MARKER = os.environ.get("EVERYSTEP_TEST_IMPORT_MARKER")
if _MARKER:
    Path(_MARKER).write_text(str(os.getpid()), encoding="utf-8")

MODULE = __name__


class Tint(enum.Enum):
    """An enum a planted row names."""

    RED = "red"


class Planted(Exception):
    """An exception type a planted row names."""
