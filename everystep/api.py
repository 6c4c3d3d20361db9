"""The public API: ``@workflow``, ``@step``, ``parallel``, ``schedule``, the durable waits
(``sleep``, ``sleep_until``, ``wait_for``), ``send``, versioning (``patched``,
``deprecate_patch``), composition (``start``, ``result``, ``gather``) and recovery
(``fork``).

Nothing here touches the database at import time, so workflow modules can be imported
before Django is fully set up.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Never, TypeVar, overload
from uuid import UUID

from everystep import registry, safe_text, serde
from everystep.errors import EverystepError, WorkflowNotDiscoveredWarning
from everystep.registry import StepDef, WorkflowDef

if TYPE_CHECKING:
    from everystep.engine.parallel import Branch
    from everystep.models import Workflow

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


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
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"@workflow(name=...) must be a non-empty string, got {name!r}")
        defn = WorkflowDef(_stored_name(name or serde.qualified_name(func), "workflow"), func)
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


# A step call also accepts ``everystep_id=``, which no parameter list can express, so the
# decorated function is typed by its return value only.
@overload
def step(fn: Callable[..., R], /) -> Callable[..., R]: ...
@overload
def step(
    *, unsafe_to_repeat: bool = False, atomic: bool = False
) -> Callable[[Callable[..., R]], Callable[..., R]]: ...


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
        defn = StepDef(
            _stored_name(serde.qualified_name(func), "step"), func, unsafe_to_repeat, atomic
        )

        @functools.wraps(func)
        def call(*args: Any, everystep_id: str | None = None, **kwargs: Any) -> Any:
            from everystep.engine.steps import call_step

            return call_step(defn, args, kwargs, everystep_id)

        call.__everystep_step__ = defn  # type: ignore[attr-defined]
        return call

    return wrap(fn) if fn is not None else wrap


# Where Django's task framework defines ``Task``: Django 6 itself, and the django-tasks
# backport for Django 5.2. Read from ``sys.modules``: a ``@task`` object exists only once
# its module is imported, and ``import everystep`` must not import Django.
_TASK_MODULES = ("django.tasks.base", "django_tasks.base")


def _is_django_task(obj: Any) -> bool:
    for module in _TASK_MODULES:
        task_class = getattr(sys.modules.get(module), "Task", None)
        if isinstance(task_class, type) and isinstance(obj, task_class):
            return True
    return False


def _task_name(task: Any) -> str:
    return str(getattr(task, "module_path", None) or repr(task))


def _refuse_django_task(obj: Any, decorator: str) -> None:
    """A ``TypeError`` saying what works, for a decorator stacked on a ``@task``: the
    ``Task`` object is no function, and without this the decorator fails on a missing
    attribute."""
    if not _is_django_task(obj):
        return
    raise TypeError(
        f"{decorator} cannot decorate {_task_name(obj)}, a django.tasks @task: a function "
        "cannot be both a @task and an everystep workflow or step today. Keep one: "
        "@workflow (with @step functions it calls), started by everystep.schedule(), for "
        "a durable run; or @task alone, started by .enqueue(). everystep's backend for "
        "Django's task framework (coming) will run @task functions as workflows."
    )


def parallel(*branches: Branch, everystep_id: str | None = None) -> tuple[Any, ...]:
    """Run branches concurrently and return their results in branch order.

    A branch is a zero-argument callable, or a list/tuple of them run in order (its
    result is a tuple). Branches may nest ``parallel()``.
    """
    from everystep.engine.parallel import parallel as run_parallel

    return run_parallel(*branches, everystep_id=everystep_id)


def schedule(
    workflow_fn: Callable[..., Any],
    *args: Any,
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
    """
    from django.utils import timezone

    from everystep.engine.waits import as_delay, as_instant
    from everystep.store.runs import create_run

    if at is not None and delay is not None:
        raise TypeError("schedule() takes at= or delay=, not both")
    due = timezone.now() if at is None else as_instant(at, "schedule() at")
    if delay is not None:
        due += as_delay(delay, "schedule() delay")
    defn, stored = _run_of(workflow_fn, args, keywords, idempotency_key, "schedule")
    return create_run(defn.name, stored, idempotency_key, due_at=due)


def start(
    workflow_fn: Callable[..., Any],
    *args: Any,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
    **keywords: Never,
) -> Workflow:
    """Inside a running workflow body (or fork branch): start a child run of
    ``workflow_fn(*args)``, recorded like a step, so a replay returns the same child and
    no crash can start a second one; the child's ``parent`` is the calling run. Outside
    a running body it is ``schedule()``."""
    from everystep.engine import children
    from everystep.engine.recorded import body_frame
    from everystep.store.runs import create_run

    defn, stored = _run_of(workflow_fn, args, keywords, idempotency_key, "start")
    frame = body_frame()
    if frame is None:
        return create_run(defn.name, stored, idempotency_key)
    return children.start(frame, defn.name, stored, idempotency_key, everystep_id)


def result(run: Workflow | UUID | str, timeout: timedelta | float | None = None) -> Any:
    """Wait until ``run`` (a ``Workflow`` or a run id) has ended and return its result.
    A failed run's exception is raised (rebuilt as on replay), a stopped run raises
    ``RunStopped``, a cancelled one ``RunCancelled``; a blocked run is waited through;
    past ``timeout`` (seconds or ``timedelta``): ``WaitTimeout``. Inside a body the wait
    is durable (recorded, no worker slot held meanwhile); outside, it blocks."""
    from everystep.engine import results

    return results.result(run, timeout)


def gather(
    runs: Sequence[Workflow | UUID | str], timeout: timedelta | float | None = None
) -> list[Any]:
    """The results of ``runs``, in order, once the last has ended: inside a body one
    durable wait, resumed once. Failures as ``parallel()`` raises them: one is raised,
    several become an ``ExceptionGroup``."""
    from everystep.engine import results

    return results.gather(runs, timeout)


# The keywords of schedule() and start() themselves, for the message about the others.
_OWN_KEYWORDS = {
    "schedule": "at, delay and idempotency_key",
    "start": "idempotency_key and everystep_id",
}


def _run_of(
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
    return defn, serde.encode(list(args), f"arguments of workflow {defn.name}")


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
    if _is_django_task(obj) and registry.workflow_def(getattr(obj, "func", None)):
        return (
            f"{_task_name(obj)} is a django.tasks @task over a @workflow, not a workflow: "
            "its .enqueue() runs the body as a plain call, nothing recorded. Remove @task "
            "and schedule the workflow (everystep's backend for Django's task framework, "
            "coming, will run @task functions as workflows)"
        )
    return f"{obj!r} is not a @workflow function"


def _not_discovered(defn: WorkflowDef, verb: str) -> None:
    """Refuse to start a run that no worker could execute: the workflow was registered
    after Django started, so a worker, which imports only what starting Django imports,
    would fail the run for good with "unknown workflow". In Django's test environment
    ``everystep.testing`` runs it in the test process, so there it is a warning."""
    from everystep import conf

    module = getattr(defn.fn, "__module__", None) or "?"
    if module == "__main__":
        where = "in the script being run (module '__main__'), which no worker can import"
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
    # stacklevel: past this function, _run_of() and schedule()/start(), to their caller.
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


def fork(
    run: Workflow | UUID | str,
    from_step: str | None = None,
    args: Sequence[Any] | None = None,
) -> Workflow:
    """A new ``scheduled`` run of ``run``'s workflow that starts with copies of its
    records made before ``from_step`` (default: the first step that failed or has no
    outcome), so a worker replays those and executes from there under the code installed
    now; ``args`` replace the arguments. Only a finished run can be forked; the original
    is left as it was. Refused with ``EverystepError`` (nothing written) when the fork
    would fail on replay. See docs/recovering.md."""
    from everystep.engine.fork import fork_run

    return fork_run(run, from_step=from_step, args=args)


def sleep(delay: timedelta | float) -> None:
    """Inside a workflow body: wait ``delay`` (a ``timedelta`` or seconds), durably. The
    run holds no worker slot meanwhile, and a crash neither loses the wait nor restarts
    its clock."""
    from everystep.engine import waits

    waits.sleep(delay)


def sleep_until(when: datetime) -> None:
    """Inside a workflow body: wait until ``when`` (naive: the project's time zone),
    durably; returns at once if that time has passed."""
    from everystep.engine import waits

    waits.sleep_until(when)


def wait_for(name: str, timeout: timedelta | float | None = None) -> Any:
    """Inside a workflow body: wait durably for the event ``name`` sent to this run, and
    return its payload; raise ``everystep.errors.WaitTimeout`` after ``timeout``. An event
    sent before the run reaches this wait is kept and returned at once."""
    from everystep.engine import waits

    return waits.wait_for(name, timeout)


def send(run_id: UUID | str, name: str, payload: Any = None) -> bool:
    """Send the event ``name`` (with ``payload``) to a run, in the current transaction,
    and make it due at once if it waits. Returns False if an event of that name was
    already sent to the run (the first payload wins). Raises ``EverystepError`` for an
    unknown or finished run."""
    from everystep.store.events import send_event

    return send_event(run_id, name, payload)


def patched(change_id: str) -> bool:
    """Inside a workflow body: True unless this run's recorded history shows it got past
    this point under the code before ``change_id`` (then False, so it keeps replaying the
    old branch). Recorded, so a run takes the same branch on every replay. Write a
    change to a body's steps as ``if patched("id"): <new> else: <old>``."""
    from everystep.engine import patches

    return patches.patched(change_id)


def deprecate_patch(change_id: str) -> None:
    """Replaces ``patched(change_id)`` once the old branch is deleted: a run that took the
    old branch fails with ``WorkflowCodeError`` instead of replaying code it never ran.
    ``everystep_check_replay`` tells when no unfinished run takes it any more."""
    from everystep.engine import patches

    patches.deprecate_patch(change_id)
