"""Workflow and step definitions, the process-wide registry of workflow names, and that
of the Django ``@task`` objects defined for an everystep backend."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from everystep.errors import EverystepError
from everystep.serde import qualified_name


@dataclass(frozen=True)
class WorkflowDef:
    """A registered workflow: the name stored on runs and the body to replay."""

    name: str
    fn: Callable[..., Any]
    # The Django ``Task`` whose function ``fn`` calls, for a task's run
    # (``everystep.engine.task_runs``); None for a ``@workflow``.
    task: Any = None
    # An ``async def`` body: its passes run on an event loop (``engine.async_body``).
    is_async: bool = False


@dataclass(frozen=True)
class StepDef:
    """A step function; ``name`` is what its ``Step`` rows record."""

    name: str
    fn: Callable[..., Any]
    unsafe_to_repeat: bool = False
    # Its body runs in the transaction that records its outcome (see ``@step``).
    atomic: bool = False
    # An ``async def`` step: awaited in an async body (``engine.async_steps``).
    is_async: bool = False


_lock = threading.Lock()
_workflows: dict[str, WorkflowDef] = {}
# The names registered while Django started (settings, models, every app's ready(), so
# every installed app's ``workflows`` module and EVERYSTEP_WORKFLOW_MODULES): a worker
# starting from the same code registers them too. A name first registered later (by a
# view, a script, a test module) is known to this process only.
_discovered: set[str] = set()


def register(defn: WorkflowDef) -> None:
    """Register a workflow; a second, different function under the same name is refused."""
    with _lock:
        existing = _workflows.get(defn.name)
        # Re-importing the same module (autoreload, test collection) re-registers the
        # same function; only a genuinely different function is a conflict.
        if existing is not None and qualified_name(existing.fn) != qualified_name(defn.fn):
            raise EverystepError(
                f"workflow name {defn.name!r} is already registered by "
                f"{qualified_name(existing.fn)}; cannot also register {qualified_name(defn.fn)}"
            )
        _workflows[defn.name] = defn
        if not _started():
            _discovered.add(defn.name)


def _started() -> bool:
    """Whether Django's app registry has finished starting (every ``ready()`` has run).
    Read from ``sys.modules``: this module must not import Django."""
    django_apps = sys.modules.get("django.apps")
    return django_apps is not None and bool(django_apps.apps.ready)


def known_to_workers(name: str) -> bool:
    """Whether a worker started from this code registers workflow ``name`` too: it was
    registered while Django started. Asked before Django has finished starting, the
    answer is not settled yet, and it is yes."""
    return name in _discovered or not _started()


def replace(name: str, fn: Callable[..., Any]) -> WorkflowDef | None:
    """Make ``fn`` the body of the workflow ``name``, whatever was registered (a new
    version of the code, in a test: ``everystep.testing.deployed``); the previous
    definition, to put back."""
    with _lock:
        previous = _workflows.get(name)
        _workflows[name] = WorkflowDef(name, fn, is_async=inspect.iscoroutinefunction(fn))
        return previous


def restore(name: str, previous: WorkflowDef | None) -> None:
    """Undo ``replace``."""
    with _lock:
        if previous is None:
            _workflows.pop(name, None)
        else:
            _workflows[name] = previous


def lookup(name: str) -> WorkflowDef | None:
    """The workflow registered under ``name`` in this process, if any."""
    return _workflows.get(name)


def registered_names() -> list[str]:
    """Every registered workflow name, sorted."""
    return sorted(_workflows)


def workflow_def(fn: Any) -> WorkflowDef | None:
    """The definition attached to a ``@workflow`` function, or None."""
    return getattr(fn, "__everystep_workflow__", None)


# Django ``Task`` objects an everystep backend validated in this process, by name (their
# ``module_path``). Django's ``Task`` validates itself against its backend when it is
# defined (``__post_init__``), and ``EverystepBackend.validate_task`` records it here: a
# task run's name resolves only to one of these, so what a worker can run is what its own
# start-up defined, never what a row names (``everystep.engine.task_runs``).
_tasks: dict[str, Any] = {}


def register_task(task: Any) -> None:
    """Record ``task``, a ``Task`` an everystep backend has validated. A ``.using()`` copy
    (the same function) keeps the task as its module defined it; a module imported afresh
    defines a new function, which replaces it."""
    with _lock:
        existing = _tasks.get(task.module_path)
        if existing is None or existing.func is not task.func:
            _tasks[task.module_path] = task


def registered_task(name: str) -> Any:
    """The ``Task`` an everystep backend validated under ``name`` in this process, or None."""
    return _tasks.get(name)
