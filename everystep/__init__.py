"""everystep: durable workflow execution for Django.

``import everystep`` does not import Django; the public names load on first use.

The package, in layers that import downwards only (``tests/unit/test_layers.py``):

- foundations: ``values``, ``errors``, ``options`` (the worker's options, declared once),
  ``cpus`` (the CPUs this process may use: ``--processes auto``),
  ``signals``, ``tallies``, ``tracing``, ``safe_text``, ``serde`` (stored values),
  ``shapes`` (values typed by annotations), ``stored_errors`` (stored exceptions),
  ``stored_types`` (the classes a stored value may name), ``failure_detail`` (stored
  tracebacks),
  ``wait_words``, ``times``, ``registry``, ``task_framework`` (``django.tasks`` or its
  backport), ``conf`` (settings), ``checks`` (system checks), ``code_version`` (which
  version of the project's code this process runs), ``sync_callers`` (sync code and
  event loops);
- ``models/`` (tables, status transitions, the fencing rule) and ``migrations``;
- ``store/``: every query and write;
- ``engine/`` (replay and the body's operations), and beside it ``context``, ``metrics``,
  ``logs``, ``sentry``;
- ``worker/``: the long-running ``Worker``;
- above the engine, beside the worker: ``waiting/`` (waiting from outside a run),
  ``replays/`` (the replay check and forks), ``builtins/`` (everystep's own workflows),
  ``task_runs`` (a Django ``@task``'s run, found through the registry's resolver) and
  ``task_signals`` (Django's task signals sent for it);
- edges: ``api`` (the public surface), ``async_api`` (its async twins), ``decorators``
  (``@workflow``, ``@step``), ``scheduling`` (``schedule``, ``start``), ``cancelling``
  (``cancel``), ``tasks`` (the
  ``django.tasks`` backend), ``testing``, ``management/`` (commands), ``ui/`` and ``urls``,
  ``admin``, ``apps``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one version number: pyproject.toml reads it (statically, without importing this
# module), and the runner distribution pins the library to it.
__version__ = "0.1.0"

__all__ = [
    "Terminal",
    "acancel",
    "agather",
    "aresult",
    "aschedule",
    "asend",
    "asleep",
    "asleep_until",
    "astart",
    "await_for",
    "awatch",
    "cancel",
    "deprecate_patch",
    "fork",
    "gather",
    "parallel",
    "patched",
    "publish",
    "published",
    "register_type",
    "result",
    "schedule",
    "send",
    "sleep",
    "sleep_until",
    "start",
    "step",
    "wait_for",
    "watch",
    "workflow",
]
_API = set(__all__) - {"Terminal", "register_type"}

if TYPE_CHECKING:
    from everystep.api import (
        acancel,
        agather,
        aresult,
        aschedule,
        asend,
        asleep,
        asleep_until,
        astart,
        await_for,
        awatch,
        cancel,
        deprecate_patch,
        fork,
        gather,
        parallel,
        patched,
        publish,
        published,
        result,
        schedule,
        send,
        sleep,
        sleep_until,
        start,
        step,
        wait_for,
        watch,
        workflow,
    )
    from everystep.errors import Terminal
    from everystep.stored_types import register_type


def __dir__() -> list[str]:
    """The public API too (``dir(everystep)``, a shell's completion), loaded or not."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "Terminal":
        from everystep.errors import Terminal

        return Terminal
    if name == "register_type":
        from everystep.stored_types import register_type

        return register_type
    if name in _API:
        from everystep import api

        return getattr(api, name)
    raise AttributeError(f"module 'everystep' has no attribute {name!r}")
