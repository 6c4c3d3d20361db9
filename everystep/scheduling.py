"""Starting runs: ``schedule()`` and ``start()``, and the checks they make before any run
is written — the function is a workflow, its arguments bind to its parameters and can be
stored, the idempotency key fits, and a worker could import the workflow.

Nothing here touches the database at import time, so workflow modules can be imported
before Django is fully set up.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Never, Protocol, TypeVar, TypeVarTuple, overload

from everystep import registry, safe_text, shapes
from everystep.decorators import is_django_task, task_name
from everystep.errors import EverystepError, WorkflowNotDiscoveredWarning
from everystep.registry import WorkflowDef
from everystep.sync_callers import refuse_on_event_loop

if TYPE_CHECKING:
    from everystep.engine.core.pass_state import Frame
    from everystep.models import Workflow


# A workflow's argument types and its return type, for type checkers: ``schedule(wf,
# *args)`` checks ``args`` against ``wf``'s parameters and is a ``Workflow[<what wf
# returns>]`` (an ``async def`` workflow's: what its coroutine returns). A TypeVarTuple,
# not a ParamSpec: PEP 612 allows no keyword (``at=``, ``idempotency_key=``) between
# ``*args: P.args`` and ``**kwargs: P.kwargs``, and a run's arguments are positional.
Ts = TypeVarTuple("Ts")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class DjangoTask(Protocol[R_co]):
    """A Django ``@task`` (``django.tasks``, or its backport) as ``start()`` takes one,
    for type checkers: ``start()`` returns what its ``enqueue()`` returns."""

    def enqueue(self, *args: Any, **kwargs: Any) -> R_co: ...

    def get_backend(self) -> Any: ...


class TaskRun(Protocol[R_co]):
    """A task's ``TaskResult`` as ``result()`` takes one, for type checkers: the value is
    what the task returns (``return_value`` is ``T | None`` in the backport)."""

    @property
    def return_value(self) -> R_co | None: ...


@overload
def schedule(
    workflow_fn: Callable[[*Ts], Coroutine[Any, Any, R]],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
) -> Workflow[R]: ...
@overload
def schedule(
    workflow_fn: Callable[[*Ts], R],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
) -> Workflow[R]: ...


# ``*args: *Ts`` here as in the overloads: mypy finds ``*args: Any`` does not accept them.
def schedule(
    workflow_fn: Callable[[*Ts], Any],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
    **keywords: Never,
) -> Workflow:
    """Insert a ``scheduled`` run of ``workflow_fn(*args)`` in the current transaction on
    everystep's database (``EVERYSTEP_DATABASE``); a transaction on another alias does not
    hold it back: there the run commits at once, whatever becomes of that transaction.

    ``at`` (a datetime; naive is read in the project's time zone) or ``delay`` (a
    ``timedelta`` or seconds) starts it later: no worker claims it before then. With
    ``idempotency_key``, scheduling the same workflow and key again returns the
    existing run instead of creating a second one.

    Called in a running workflow or task body, the run is started as ``start()`` starts
    one (recorded, so a replay returns the same run; its ``parent`` is the caller).
    """
    from everystep.store.runs import create_run

    defn, stored = run_of(workflow_fn, args, keywords, idempotency_key, "schedule")
    due = due_time(at, delay, "schedule()")
    frame = _body_frame("schedule()", "aschedule()")
    if frame is not None:
        from everystep.engine.operations import children

        return children.start(frame, defn.name, stored, idempotency_key, None, due_at=due)
    refuse_on_event_loop("schedule()", "await aschedule()")
    return create_run(defn.name, stored, idempotency_key, due_at=due)


def due_time(at: datetime | None, delay: timedelta | float | None, verb: str) -> datetime:
    """When a run scheduled with ``at`` or ``delay`` (``schedule()``) is due."""
    from django.utils import timezone

    from everystep.engine.operations.waits import as_delay, as_instant

    if at is not None and delay is not None:
        raise TypeError(f"{verb} takes at= or delay=, not both")
    due = timezone.now() if at is None else as_instant(at, f"{verb} at")
    if delay is not None:
        due += as_delay(delay, f"{verb} delay")
    return due


def _body_frame(what: str, twin: str) -> Frame | None:
    """The frame of the sync body calling ``what``; None outside a body (or in a step's
    body, where starting a run is a plain insert)."""
    from everystep.engine.core.recorded import body_frame
    from everystep.engine.operations.waits import sync_only

    frame = body_frame()
    if frame is not None:
        sync_only(frame, what, twin)
    return frame


@overload
def start(
    workflow_fn: DjangoTask[R],
    *args: Any,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
    **task_kwargs: Any,
) -> R: ...
@overload
def start(
    workflow_fn: Callable[[*Ts], Coroutine[Any, Any, R]],
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
) -> Workflow[R]: ...
@overload
def start(
    workflow_fn: Callable[[*Ts], R],
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
) -> Workflow[R]: ...


def start(
    workflow_fn: Any,
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
    **keywords: Any,
) -> Any:
    """Inside a running workflow body (or fork branch): start a child run of
    ``workflow_fn(*args)``, recorded like a step, so a replay returns the same child and
    no crash can start a second one; the child's ``parent`` is the calling run. Outside
    a running body it is ``schedule()``.

    ``workflow_fn`` may be a Django ``@task`` of everystep's backend: then ``keywords``
    are the task's, and the ``TaskResult`` is returned, as ``task.enqueue()`` does."""
    from everystep.engine.operations import children
    from everystep.store.runs import create_run

    if is_django_task(workflow_fn):
        return task_backend(workflow_fn, "start").start(
            workflow_fn, args, keywords, idempotency_key=idempotency_key, everystep_id=everystep_id
        )
    defn, stored = run_of(workflow_fn, args, keywords, idempotency_key, "start")
    frame = _body_frame("start()", "astart()")
    if frame is None:
        refuse_on_event_loop("start()", "await aschedule() (await astart() in an async body)")
        return create_run(defn.name, stored, idempotency_key)
    return children.start(frame, defn.name, stored, idempotency_key, everystep_id)


def task_backend(task: Any, verb: str) -> Any:
    """The everystep backend of the Django task ``task``, or why it cannot be
    ``verb``-ed."""
    from everystep.task_framework import is_everystep_backend

    backend = task.get_backend()
    if not is_everystep_backend(backend):
        raise TypeError(
            f"cannot {verb} task {task_name(task)}: its backend {task.backend!r} is not "
            "everystep's (everystep.tasks.EverystepBackend); call task.enqueue()"
        )
    return backend


# The keywords of schedule() and start() themselves, for the message about the others.
_OWN_KEYWORDS = {
    "schedule": "at, delay and idempotency_key",
    "start": "idempotency_key and everystep_id",
    "astart": "idempotency_key and everystep_id",
}


def run_of(
    workflow_fn: Callable[..., Any],
    args: tuple[Any, ...],
    keywords: dict[str, Any],
    idempotency_key: str | None,
    verb: str,
) -> tuple[WorkflowDef, Any]:
    """The definition of ``workflow_fn`` and its arguments stored, checked before any
    run is written."""
    defn = registry.workflow_def(workflow_fn)
    if defn is None:
        raise TypeError(_not_a_workflow(workflow_fn))
    if keywords:
        raise TypeError(
            f"cannot {verb} workflow {defn.name}{_bare_signature(defn)}: workflow arguments "
            "are positional (a run stores a list of arguments, no keywords), got keyword "
            f"argument{'' if len(keywords) == 1 else 's'} {', '.join(sorted(keywords))}: "
            f"pass the values in the order of the parameters ({verb}()'s own keywords are "
            f"{_OWN_KEYWORDS[verb]})"
        )
    _check_arguments(defn, args, verb)
    if not registry.known_to_workers(defn.name):
        _not_discovered(defn, verb)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 255
    ):
        raise TypeError("idempotency_key must be a non-empty string of at most 255 characters")
    if idempotency_key is not None:
        safe_text.storable_text(idempotency_key, f"idempotency_key of workflow {defn.name}")
    return defn, shapes.encode_arguments(defn.fn, list(args), f"arguments of workflow {defn.name}")


def _check_arguments(defn: WorkflowDef, args: tuple[Any, ...], verb: str) -> None:
    """A ``TypeError`` naming the workflow if its body cannot be called with ``args``,
    now rather than in a failed run later."""
    signature = _signature(defn)
    if signature is None:
        return
    try:
        signature.bind(*args)
    except TypeError as exc:
        raise TypeError(
            f"cannot {verb} workflow {defn.name}{_bare_signature(defn)}: {exc} "
            f"(given {len(args)} positional argument{'' if len(args) == 1 else 's'})"
        ) from None


def _bare_signature(defn: WorkflowDef) -> str:
    """The workflow function's parameters, without annotations, for a message."""
    signature = _signature(defn)
    if signature is None:
        return "(...)"
    parameters = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=signature.empty))


def _not_a_workflow(obj: Any) -> str:
    if is_django_task(obj) and registry.workflow_def(getattr(obj, "func", None)):
        return (
            f"{task_name(obj)} is a django.tasks @task over a @workflow, not a workflow: "
            "remove @task and schedule the workflow, or remove @workflow and .enqueue() "
            "the task (with TASKS naming everystep.tasks.EverystepBackend, a task function "
            "is a durable workflow body)"
        )
    return f"{obj!r} is not a @workflow function"


# Where code typed or piped in runs: ``python -c`` and scripts (``__main__``), and
# ``manage.py shell`` (its ``-c`` and stdin run in the command's module).
_INTERACTIVE = {
    "__main__": "in the script being run (module '__main__')",
    "django.core.management.commands.shell": "in a manage.py shell session",
}


def interactive_module(module: str) -> str | None:
    """Where a function of ``module`` was defined, in words, if ``module`` is one that
    holds typed or piped-in code rather than a file of the project; else None."""
    return _INTERACTIVE.get(module)


def _not_discovered(defn: WorkflowDef, verb: str) -> None:
    """Refuse to start a run that no worker could execute: the workflow was registered
    after Django started, so a worker, which imports only what starting Django imports,
    would fail the run for good with "unknown workflow". In Django's test environment
    ``everystep.testing`` runs it in the test process, so there it is a warning."""
    from everystep import conf

    module = getattr(defn.fn, "__module__", None) or "?"
    interactive = interactive_module(module)
    if interactive is not None:
        where = f"{interactive}, which no worker can import"
        fix = "move it to a module listed in EVERYSTEP_WORKFLOW_MODULES"
    else:
        where = f"in module {module!r}, which workers do not import"
        fix = f"add {module!r} to the setting EVERYSTEP_WORKFLOW_MODULES"
    message = (
        f"cannot {verb} workflow {defn.name}: it is defined {where}, so a worker would fail "
        'the run with "unknown workflow". Define it in an installed app\'s workflows.py '
        f"(or import it from there), or {fix}"
    )
    if not conf.in_test_environment():
        raise EverystepError(message)
    # stacklevel: past this function, run_of() and schedule()/start(), to their caller.
    warnings.warn(
        f"{message} (a warning in tests: everystep.testing.run_due() runs it in this process)",
        WorkflowNotDiscoveredWarning,
        stacklevel=4,
    )


# Once per definition, not per schedule: ``inspect.signature`` reads the code object and
# follows ``__wrapped__`` on every call.
@functools.lru_cache(maxsize=4096)
def _signature(defn: WorkflowDef) -> inspect.Signature | None:
    try:
        return inspect.signature(defn.fn)
    except (TypeError, ValueError):  # a callable without one (a builtin): not checked
        return None
