"""Runs of Django ``@task`` functions (the backend is ``everystep.tasks``): how a worker
finds the task a run names, the task function as the run's workflow body, and the run
read back as Django's ``TaskResult``.

A task run is an ordinary run whose ``name`` is the task's ``module_path``, whose
``queue`` is set, and whose stored arguments are ``[args, kwargs]``. Its name resolves
only to a ``Task`` of Django's task framework (Django 6's ``django.tasks`` or the
``django_tasks`` backport) that an everystep backend validated in this process (recorded
in ``everystep.registry`` as the task was defined): any other object is refused, and
nothing found under the name is called. Nothing is imported for a name either: a worker
knows the tasks of the modules its start-up imported (every installed app's ``tasks``
and ``workflows`` modules, ``EVERYSTEP_WORKFLOW_MODULES``; ``everystep.apps``), and a
module's attribute is read from its ``__dict__``, so a module ``__getattr__`` never runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import sys
from datetime import datetime
from types import ModuleType
from typing import Any

from django.db import DatabaseError

from everystep import registry, serde, shapes, signals, task_signals
from everystep.engine.core.pass_state import current_frame
from everystep.errors import EverystepError, RunCancelled
from everystep.models import Status, Workflow
from everystep.registry import WorkflowDef
from everystep.store.runs import get_run
from everystep.store.task_attempts import begin_attempt
from everystep.task_framework import framework_module, framework_of, is_everystep_backend
from everystep.values import Claim, Ended, TaskClaim

logger = logging.getLogger("everystep.run")

# How a task becomes known to a worker, for the messages of names that are not.
_HOW_TO_KNOW = (
    "a worker imports no module for a run: it knows the @task functions of the modules "
    "imported as Django starts, every installed app's tasks.py and workflows.py and the "
    "modules listed in EVERYSTEP_WORKFLOW_MODULES (define the task in one of those)"
)


def _attribute(module_name: str, attribute: str, registered: Any) -> Any:
    """What module ``module_name`` holds under ``attribute`` now, read without running
    any code of the module's; ``registered`` where it holds nothing under it."""
    module = sys.modules.get(module_name)
    if module is None:
        if registered is not None:
            return registered
        raise EverystepError(
            f"module {module_name!r} is not imported and is not part of the project as "
            f"this process started it: {_HOW_TO_KNOW}"
        )
    try:
        # ``object.__getattribute__``: a module type of its own (a lazy loader's) runs
        # code on any attribute read, ``__dict__`` included; and never ``getattr`` on
        # the module, which calls a module ``__getattr__``.
        namespace = object.__getattribute__(module, "__dict__")
    except AttributeError:
        namespace = {}
    # Not set while its module is still being imported on another thread: the task the
    # decorator has already recorded is the one it is about to set.
    return namespace.get(attribute, registered) if isinstance(namespace, dict) else registered


def _find_task(name: str) -> Any:
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise EverystepError("it is not a dotted path (module.function)")
    registered = registry.registered_task(name)
    found = _attribute(module_name, attribute, registered)
    if framework_of(found) is None:
        what = "nothing" if found is None else f"a {type(found).__qualname__}"
        raise EverystepError(
            f"{name!r} is {what}, not a django.tasks Task: only a @task function is run "
            "under its name"
        )
    if found.module_path != name:
        raise EverystepError(f"{name!r} names the task {found.module_path}, not itself")
    if registered is None:
        raise EverystepError(
            f"{name!r} is a @task no everystep backend validated in this process: {_HOW_TO_KNOW}"
        )
    try:
        backend = found.get_backend()
    except Exception as exc:  # an alias TASKS no longer has
        raise EverystepError(f"task {name}'s backend {found.backend!r}: {exc}") from exc
    if not is_everystep_backend(backend):
        raise EverystepError(
            f"task {name} is configured for the backend {found.backend!r} "
            f"({type(backend).__module__}.{type(backend).__qualname__}), not everystep's"
        )
    return found


def task_named(name: str) -> Any:
    """The ``Task`` a task run named ``name`` runs; ``EverystepError`` saying why when
    the name names none (nothing under it is called, no module is imported for it)."""
    try:
        return _find_task(name)
    except EverystepError as exc:
        raise EverystepError(f"not a task everystep can run: {exc}") from None


def task_definition(name: str) -> WorkflowDef:
    """The workflow definition of the task run ``name``: its body is the task function,
    called with the run's stored ``[args, kwargs]`` (and the context if it takes one)."""
    return _definition_of(name, task_named(name))


@functools.lru_cache(maxsize=1024)
def _definition_of(name: str, task: Any) -> WorkflowDef:
    def call(args: list[Any], kwargs: dict[str, Any]) -> Any:
        if task.takes_context:
            context = framework_module(task, "base").TaskContext(task_result=_current_result(task))
            return task.func(context, *args, **kwargs)
        return task.func(*args, **kwargs)

    def arguments(stored: Any) -> list[Any]:
        args, kwargs = typed_call(task, stored)
        return [args, kwargs]

    typed = {"typed_by": task.func, "read_arguments": arguments}
    if not inspect.iscoroutinefunction(task.func):
        return WorkflowDef(name, call, begin=begin, finished=finished, **typed)

    async def body(args: list[Any], kwargs: dict[str, Any]) -> Any:
        return await call(args, kwargs)

    return WorkflowDef(name, body, begin=begin, finished=finished, is_async=True, **typed)


def _resolve(name: str) -> WorkflowDef | None:
    try:
        return task_definition(name)
    except EverystepError:
        return None


def _why_unknown(name: str) -> str:
    try:
        task_named(name)
    except EverystepError as exc:
        return str(exc)
    return "a task"  # it resolved since: a definition the next pass finds


# Task runs' names are found through the registry (``registry.definition``): the engine
# and the worker never name this module. Added as this module is first imported, by
# everystep's app as it loads or by ``everystep.tasks``.
RESOLVER = registry.Resolver(resolve=_resolve, why_unknown=_why_unknown)
registry.add_resolver(RESOLVER)


def _current_result(task: Any) -> Any:
    """The ``TaskResult`` of the run whose pass is executing (a checking pass has none
    from a claim: read it)."""
    frame = current_frame.get()
    held = frame.run.begun if frame is not None else None
    if held is not None:
        return held
    run_id = frame.run.run_id if frame is not None else None
    run = get_run(run_id) if run_id is not None else None
    if run is None:
        raise EverystepError("a task's context is read inside its run only")
    return task_result(run, task)


def begin(claim: Claim) -> Any:
    """A task run's ``WorkflowDef.begin``, as its pass starts: Django's ``task_started``
    sent if this claim began an attempt; the ``TaskResult`` its context reads. The claim
    recorded the attempt and read what the result holds (``Claim.task``); a claim that
    did not (a catchup's) records it now. None: the claim no longer holds the run."""
    if claim.task is not None:
        run, new = _claimed_run(claim, claim.task), claim.task.new_attempt
    else:
        begun = begin_attempt(claim)
        if begun is None:
            return None
        run, new = begun
    task = task_named(run.name)
    result = task_result(run, task)
    if new:
        task_signals.send(task, "task_started", result)
    return result


def _claimed_run(claim: Claim, read: TaskClaim) -> Workflow:
    """The run as ``claim`` left it, from what the claim read: what a ``TaskResult``
    holds of it while it runs."""
    return Workflow(
        id=claim.run_id,
        name=claim.workflow or "",
        args=claim.args,
        status=Status.RUNNING,
        created_at=read.created_at,
        started_at=read.started_at,
        queue=read.queue,
        task_options=read.options,
        attempts=read.attempts,
    )


def finished(claim: Claim, name: str, ended: Ended) -> None:
    """A task run's ``WorkflowDef.finished``: send Django's ``task_finished`` for a task
    run that reached a final status. A completed run's result is the one its pass began
    with, finished (nothing is read); any other is read back."""
    task = task_named(name)
    if ended.status == Status.COMPLETED and ended.begun is not None and ended.at is not None:
        task_signals.finished(task, _completed(ended.begun, ended.result, ended.at), None)
        return
    run = get_run(claim.run_id)
    if run is not None:
        task_signals.finished(task, task_result(run, task), ended.exc)


def _completed(begun: Any, stored: Any, at: Any) -> Any:
    """The ``TaskResult`` ``begun`` (its pass's) once the run completed at ``at`` with
    ``stored`` as its result: what ``task_result`` reads back from the row then."""
    base = framework_module(begun.task, "base")
    done = dataclasses.replace(begun, status=base.TaskResultStatus.SUCCESSFUL, finished_at=at)
    object.__setattr__(done, "_return_value", shapes.decode(stored, returns_of(begun.task)))
    return done


# Task runs read per query when cancelled runs are told of: a parent's children may be
# many more than a statement takes parameters.
_CANCELLED_CHUNK = 1000


def _cancelled(arguments: dict[str, Any]) -> None:
    """``signals.runs_cancelled``: send ``task_finished`` for the task runs among them,
    with ``RunCancelled`` as their failure (no worker's pass ends a cancelled run). The
    cancellation has committed: a database error here is logged, not raised to the
    caller, whose cancel stands."""
    ids = list(arguments["run_ids"])
    try:
        for start in range(0, len(ids), _CANCELLED_CHUNK):
            chunk = ids[start : start + _CANCELLED_CHUNK]
            for run in Workflow.objects.filter(id__in=chunk, queue__isnull=False):
                _tell_cancelled(run, arguments["by"])
    except DatabaseError as exc:
        logger.warning(
            "cancelled runs: task_finished not sent (%s)",
            exc,
            extra={"event": "task.signal_failed"},
        )


def _tell_cancelled(run: Workflow, by: str) -> None:
    try:
        task = task_named(run.name)
    except EverystepError:
        return  # a row no task of this process runs: nobody to tell
    reason = RunCancelled(f"run {run.id} was cancelled by {by}")
    task_signals.finished(task, task_result(run, task), reason)


signals.runs_cancelled.subscribe(_cancelled)


_READY = frozenset({Status.SCHEDULED})
_RUNNING = frozenset({Status.RUNNING, Status.BLOCKED})


def task_status(framework_base: ModuleType, status: str) -> Any:
    """Django's ``TaskResultStatus`` of a run's status (SPEC §13)."""
    statuses = framework_base.TaskResultStatus
    if status in _READY:
        return statuses.READY
    if status in _RUNNING:
        return statuses.RUNNING
    if status == Status.COMPLETED:
        return statuses.SUCCESSFUL
    return statuses.FAILED


def split_call(value: Any) -> tuple[Any, dict[str, Any]] | None:
    """``value`` as a task run's ``(args, kwargs)`` if it has their shape (a list of a
    value and a dict), else None. Works on the stored form as on the decoded one: pages
    split what is stored without decoding it."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict):
        return value[0], value[1]
    return None


def stored_call(args: Any) -> tuple[list[Any], dict[str, Any]]:
    """A task run's ``(args, kwargs)`` from its stored arguments."""
    split = split_call(serde.decode(args))
    if split is None:
        raise EverystepError("the run's stored arguments are not a task's [args, kwargs]")
    return list(split[0]), dict(split[1])


def typed_call(task: Any, stored: Any) -> tuple[list[Any], dict[str, Any]]:
    """A task run's ``(args, kwargs)`` from its stored arguments, rebuilt as the task
    function's parameters are annotated (after the context, if it takes one)."""
    split = split_call(stored)
    if split is None:
        raise EverystepError("the run's stored arguments are not a task's [args, kwargs]")
    args, kwargs = shapes.decode_call(
        task.func, split[0], split[1], f"task {task.module_path}", skip=int(task.takes_context)
    )
    return list(args), dict(kwargs)


def returns_of(task: Any) -> shapes.Shape | None:
    """How a task's result is stored and rebuilt: its function's return annotation."""
    return shapes.returns(task.func)


def _instant(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def as_enqueued(run: Workflow, task: Any) -> Any:
    """``task`` as ``run`` was enqueued: what ``Task.using()`` changed (the queue, the
    backend alias, ``run_after``) put back, from the run's ``queue`` and ``task_options``.
    A backend alias no longer configured keeps the task's own."""
    options = run.task_options if isinstance(run.task_options, dict) else {}
    using: dict[str, Any] = {}
    if run.queue is not None and run.queue != task.queue_name:
        using["queue_name"] = run.queue
    backend = options.get("backend")
    if isinstance(backend, str) and backend != task.backend:
        using["backend"] = backend
    run_after = _instant(options.get("run_after"))
    if run_after is not None and run_after != task.run_after:
        using["run_after"] = run_after
    if not using:
        return task
    try:
        return task.using(**using)
    except Exception:  # an alias gone from TASKS, a backend refusing the options now
        logger.warning("run %s: its task cannot be rebuilt as enqueued (%s)", run.id, using)
        return task


def _as_django_formats(traceback: str) -> str:
    """A stored traceback as Django's backends give one (``traceback.format_exception``
    joined): ending in a newline."""
    return traceback if traceback.endswith("\n") or not traceback else f"{traceback}\n"


def task_result(run: Workflow, task: Any) -> Any:
    """The ``TaskResult`` of task run ``run`` of ``task`` (SPEC §13 lists the mapping),
    its task as enqueued (``as_enqueued``)."""
    task = as_enqueued(run, task)
    base = framework_module(task, "base")
    status = task_status(base, run.status)
    attempts = [a for a in (run.attempts or []) if isinstance(a, dict)]
    errors = []
    if status == base.TaskResultStatus.FAILED and isinstance(run.error, dict):
        errors.append(
            base.TaskError(
                exception_class_path=str(run.error.get("type") or "builtins.Exception"),
                traceback=_as_django_formats(
                    str(run.error.get("traceback") or run.error.get("message") or "")
                ),
            )
        )
    # As enqueued: JSON, as Django requires of a TaskResult's (the task's function gets
    # them typed by its annotations).
    args, kwargs = stored_call(run.args)
    result = base.TaskResult(
        task=task,
        id=str(run.id),
        status=status,
        enqueued_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.completed_at if run.status not in _READY | _RUNNING else None,
        last_attempted_at=_instant(attempts[-1].get("at")) if attempts else None,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=errors,
        worker_ids=[str(a.get("worker")) for a in attempts],
    )
    if status == base.TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", shapes.decode(run.result, returns_of(task)))
    return result
