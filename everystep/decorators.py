"""The decorators ``@workflow`` and ``@step``: they register a function under a name every
database can store, and refuse a Django ``@task`` object with a message saying what works.

Nothing here touches the database at import time, so workflow modules can be imported
before Django is fully set up.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from everystep import registry, safe_text, serde, stored_types
from everystep.errors import EverystepError
from everystep.registry import StepDef, WorkflowDef
from everystep.task_framework import framework_of

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@overload
def workflow(fn: F, /) -> F: ...
@overload
def workflow(*, name: str | None = None) -> Callable[[F], F]: ...


def workflow(fn: Any = None, /, *, name: str | None = None) -> Any:
    """Register a function as a workflow, under ``module.qualname`` or ``name``.

    Called directly, the function is a plain function call.
    """

    def register(func: F) -> F:
        _refuse_django_task(func, "@workflow")
        _refuse_generator(func, "@workflow")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"@workflow(name=...) must be a non-empty string, got {name!r}")
        defn = WorkflowDef(
            _stored_name(name or serde.qualified_name(func), "workflow"),
            func,
            is_async=inspect.iscoroutinefunction(func),
        )
        registry.register(defn)
        func.__everystep_workflow__ = defn  # type: ignore[attr-defined]
        return func

    return register(fn) if fn is not None else register


# The name column of runs and steps.
MAX_NAME_LENGTH = 255


def _stored_name(name: str, kind: str) -> str:
    """``name`` if every database can store it as a run's or step's name: refused at
    decoration time rather than by one database at the first schedule or record."""
    safe_text.storable_text(name, f"{kind} name {name[:60]!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise EverystepError(
            f"{kind} name {name[:60]!r}… is {len(name)} characters; runs and steps store "
            f"names of at most {MAX_NAME_LENGTH}"
        )
    return name


class StepFunction(Protocol[P, R_co]):
    """A ``@step`` function as a type checker sees it: called with the function's own
    parameters, it returns what the function returns. A call with ``everystep_id=`` has
    its arguments unchecked (its return type is still the function's): PEP 612 allows no
    keyword between ``*args: P.args`` and ``**kwargs: P.kwargs``, so no one signature
    holds both."""

    @overload
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...
    @overload
    def __call__(self, *args: Any, everystep_id: str | None, **kwargs: Any) -> R_co: ...


@overload
def step(fn: Callable[P, R], /) -> StepFunction[P, R]: ...
@overload
def step(
    *, unsafe_to_repeat: bool = False, atomic: bool = False
) -> Callable[[Callable[P, R]], StepFunction[P, R]]: ...


def step(fn: Any = None, /, *, unsafe_to_repeat: bool = False, atomic: bool = False) -> Any:
    """Make a function a step: inside a running workflow its outcome is recorded and
    served on replay; elsewhere it is a plain call. Every call accepts
    ``everystep_id="name"`` to give the step a stable id.

    ``unsafe_to_repeat=True``: a crash between the body and its record blocks the run for
    a human instead of running the body again. ``atomic=True``: the body runs inside the
    transaction that records its outcome, so its writes to the project's database commit
    with the record or not at all (exactly once); only for bodies whose effects are all
    in that database.
    """
    if unsafe_to_repeat and atomic:
        raise EverystepError(
            "@step(atomic=True) cannot be combined with unsafe_to_repeat=True: an atomic "
            "step's writes commit with its record, so its outcome is never uncertain; an "
            "effect outside the database (the reason for unsafe_to_repeat) is not covered "
            "by the transaction"
        )

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        _refuse_django_task(func, "@step")
        _refuse_generator(func, "@step")
        is_async = inspect.iscoroutinefunction(func)
        if is_async and atomic:
            raise EverystepError(
                f"@step(atomic=True) cannot decorate {serde.qualified_name(func)}, an async "
                "def: an atomic step's body runs inside a database transaction, and "
                "Django's transactions are sync only. Make it a plain def (an async body "
                "awaits a sync step too: it runs on a thread)"
            )
        defn = StepDef(
            _stored_name(serde.qualified_name(func), "step"),
            func,
            unsafe_to_repeat,
            atomic,
            is_async,
        )
        stored_types.add_step_function(func)  # its code names the types it may store

        @functools.wraps(func)
        def call(*args: Any, everystep_id: str | None = None, **kwargs: Any) -> Any:
            from everystep.engine.steps import call_step

            return call_step(defn, args, kwargs, everystep_id)

        call.__everystep_step__ = defn  # type: ignore[attr-defined]
        return call

    return wrap(fn) if fn is not None else wrap


def _refuse_generator(func: Any, decorator: str) -> None:
    """A generator's body runs only when iterated, never by the call a run records: an
    ``EverystepError`` at decoration time rather than a run that records a generator."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise EverystepError(
            f"{decorator} cannot decorate {serde.qualified_name(func)}, a generator "
            "function: its body would not run when called. Return a list instead"
        )


def is_django_task(obj: Any) -> bool:
    """True for a ``Task`` object of Django's task framework (or its backport)."""
    return framework_of(obj) is not None


def task_name(task: Any) -> str:
    """A Django ``@task``'s dotted path, for a message."""
    return str(getattr(task, "module_path", None) or repr(task))


def _refuse_django_task(obj: Any, decorator: str) -> None:
    """A ``TypeError`` saying what works, for a decorator stacked on a ``@task``: the
    ``Task`` object is no function, and without this the decorator fails on a missing
    attribute."""
    if not is_django_task(obj):
        return
    raise TypeError(
        f"{decorator} cannot decorate {task_name(obj)}, a django.tasks @task: a function "
        "cannot be both a @task and an everystep workflow or step. Keep one: "
        "@workflow (with @step functions it calls), started by everystep.schedule(); or "
        "@task alone, started by .enqueue(): with TASKS naming "
        "everystep.tasks.EverystepBackend, the task function runs as a durable workflow "
        "body and the @step functions it calls are recorded."
    )
