"""everystep: durable workflow execution for Django.

``import everystep`` does not import Django; the public names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one version number: pyproject.toml reads it (statically, without importing this
# module), and the runner distribution pins the library to it.
__version__ = "0.1.0"

__all__ = [
    "Terminal",
    "deprecate_patch",
    "fork",
    "gather",
    "parallel",
    "patched",
    "result",
    "schedule",
    "send",
    "sleep",
    "sleep_until",
    "start",
    "step",
    "wait_for",
    "workflow",
]
_API = set(__all__) - {"Terminal"}

if TYPE_CHECKING:
    from everystep.api import (
        deprecate_patch,
        fork,
        gather,
        parallel,
        patched,
        result,
        schedule,
        send,
        sleep,
        sleep_until,
        start,
        step,
        wait_for,
        workflow,
    )
    from everystep.errors import Terminal


def __getattr__(name: str) -> Any:
    if name == "Terminal":
        from everystep.errors import Terminal

        return Terminal
    if name in _API:
        from everystep import api

        return getattr(api, name)
    raise AttributeError(f"module 'everystep' has no attribute {name!r}")
