"""A module whose module-level ``__getattr__`` imports another module: reading a name it
does not define runs code. A task run's name must be looked up without calling it."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from tests.testapp.import_marks import mark

mark(__name__)


def __getattr__(name: str) -> Any:
    target = import_module("tests.testapp.lazy_target")
    return getattr(target, name)
