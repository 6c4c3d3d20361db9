"""Workflow and step definitions, the process-wide registry of workflow names, the
resolvers through which code above the engine owns names of its own (a Django task's
run: ``everystep.task_runs``), and the Django ``@task`` objects defined for an everystep
backend."""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from everystep import serde, shapes
from everystep.errors import EverystepError
from everystep.serde import qualified_name
from everystep.values import Claim, Ended


@dataclass(frozen=True)
class WorkflowDef:
    """A registered workflow: the name stored on runs and the body to replay."""

    name: str
    fn: Callable[..., Any]
    # What a run of this definition does as its pass begins, before the body (a Django
    # task's run records its attempt: ``everystep.task_runs``). What it returns is the
    # pass's ``RunState.begun``; None: the claim no longer holds the run (the pass is
    # abandoned); an ``EverystepError``: the run fails. None for a ``@workflow``.
    begin: Callable[[Claim], Any] | None = None
    # Called with the claim, the run's name and how it ended (``Ended``) once a pass has
    # ended the run in a final status (a task's run sends Django's ``task_finished``).
    # None for a ``@workflow``.
    finished: Callable[[Claim, str, Ended], None] | None = None
    # An ``async def`` body: its passes run on an event loop (``engine.asynchronous.async_body``).
    is_async: bool = False
    # The function whose annotations type the run's arguments and result
    # (``everystep.shapes``): ``fn`` unless given (a task's run: the task's function), and
    # how the stored arguments become the body's (default: ``fn``'s positional ones).
    typed_by: Callable[..., Any] | None = None
    read_arguments: Callable[[Any], list[Any]] | None = None

    def arguments(self, stored: Any) -> list[Any]:
        """The body's arguments from the run's stored ones, typed by the annotations."""
        if self.read_arguments is not None:
            return self.read_arguments(stored)
        if not self._typed_arguments:
            return serde.decode(stored)
        return shapes.decode_arguments(self.fn, stored, f"workflow {self.name}")

    @functools.cached_property
    def _typed_arguments(self) -> bool:
        return shapes.signature(self.fn).typed

    @functools.cached_property
    def returns(self) -> shapes.Shape | None:
        """How the run's result is stored and rebuilt (its return annotation)."""
        return shapes.returns(self.typed_by or self.fn)


@dataclass(frozen=True)
class StepDef:
    """A step function; ``name`` is what its ``Step`` rows record."""

    name: str
    fn: Callable[..., Any]
    unsafe_to_repeat: bool = False
    # Its body runs in the transaction that records its outcome (see ``@step``).
    atomic: bool = False
    # An ``async def`` step: awaited in an async body (``engine.asynchronous.async_steps``).
    is_async: bool = False

    @functools.cached_property
    def returns(self) -> shapes.Shape | None:
        """How the step's result is stored and rebuilt (its return annotation)."""
        return shapes.returns(self.fn)


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


@dataclass(frozen=True)
class Resolver:
    """Names that code above the engine owns: ``resolve`` gives the definition of runs
    named ``name`` (None: not one of its names, or not runnable here), ``why_unknown``
    says why a name it did not resolve is none of its (``unknown workflow …, and it is
    <why>``)."""

    resolve: Callable[[str], WorkflowDef | None]
    why_unknown: Callable[[str], str]


_resolvers: list[Resolver] = []


def add_resolver(resolver: Resolver) -> None:
    """Ask ``resolver`` for the names no ``@workflow`` is registered under (once: adding
    the same resolver again changes nothing)."""
    with _lock:
        if resolver not in _resolvers:
            _resolvers.append(resolver)


def definition(name: str) -> WorkflowDef | None:
    """The definition of runs named ``name`` in this process: the ``@workflow``
    registered under it, else what a resolver finds; None if neither (the reasons:
    ``why_unknown(name)``)."""
    found = lookup(name)
    if found is not None:
        return found
    for resolver in tuple(_resolvers):
        found = resolver.resolve(name)
        if found is not None:
            return found
    return None


def why_unknown(name: str) -> list[str]:
    """Why each resolver did not resolve ``name``."""
    return [resolver.why_unknown(name) for resolver in tuple(_resolvers)]


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
# start-up defined, never what a row names (``everystep.task_runs``).
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


def sizes() -> tuple[int, int]:
    """How many workflows and tasks are registered: a cheap test of whether any was
    registered since (the worker's claim asks at every claim)."""
    return len(_workflows), len(_tasks)


def registered_task_names() -> list[str]:
    """The names of every ``Task`` recorded so, sorted."""
    with _lock:
        return sorted(_tasks)


def registered_task_functions() -> list[Callable[..., Any]]:
    """The functions of every ``Task`` recorded so (``everystep.stored_types`` reads the
    types their code names)."""
    with _lock:
        return [task.func for task in _tasks.values()]
