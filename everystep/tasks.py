"""everystep as a backend of Django's task framework: ``django.tasks`` on Django 6, the
``django-tasks`` backport (``django_tasks``) on Django 5.2::

    TASKS = {"default": {"BACKEND": "everystep.tasks.EverystepBackend"}}

``task.enqueue()`` inserts a run in the caller's transaction, as ``schedule()`` does; a
worker runs the task function as the run's workflow body, so ``@step`` calls inside it are
recorded and served on replay. ``get_result()`` reads the run back as a ``TaskResult``
(``everystep.task_runs`` holds the mapping). Nothing to register by hand: Django's
``Task`` validates itself against its backend as it is defined, and this backend records
it then (``everystep.registry``). A worker resolves a task run's name only to a task
recorded so, which its start-up defined (every installed app's ``tasks`` module is
imported then: ``everystep.apps``). A TASKS entry naming it with keys or OPTIONS it does
not know is a system check error (``everystep.checks``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable
from typing import Any
from uuid import UUID

from django.utils import timezone

try:  # Django 6 ships the framework; on Django 5.2 the backport provides it
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # pragma: no cover - the branch taken depends on the Django installed
    try:
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment]
    except ImportError as exc:
        raise ImportError(
            "everystep.tasks needs Django's task framework: Django >= 6.0, or on Django "
            "5.2 the django-tasks backport (pip install django-tasks)"
        ) from exc

from asgiref.sync import sync_to_async

from everystep import registry, safe_text, shapes, task_runs
from everystep.decorators import MAX_NAME_LENGTH
from everystep.engine.asynchronous import async_ops
from everystep.engine.asynchronous.offload import offload
from everystep.engine.core.recorded import Operation, body_frame, reach
from everystep.engine.core.replay import Decision
from everystep.engine.operations import children
from everystep.engine.operations.waits import as_instant, sync_only
from everystep.models import Status, Workflow
from everystep.scheduling import interactive_module
from everystep.store.runs import create_run, get_run
from everystep.store.step_records import Child
from everystep.sync_callers import refuse_on_event_loop
from everystep.task_framework import framework_module


class EverystepBackend(BaseTaskBackend):
    """Django ``@task`` functions run as durable everystep workflows."""

    # Recognised by the worker without importing this module (``task_framework.BACKEND_MARK``).
    everystep_backend = True

    supports_defer = True
    supports_get_result = True
    # An ``async def`` task runs as an async workflow body (``engine.asynchronous.async_body``).
    supports_async_task = True
    # Runs are claimed in due order; the seeds chose no priorities.
    supports_priority = False

    def validate_task(self, task: Any) -> None:
        """Django's checks of ``task``, then ``task`` recorded as one a worker may run
        (``Task.__post_init__`` calls this as the task is defined, ``.using()`` too)."""
        super().validate_task(task)
        registry.register_task(task)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Insert a run of ``task(*args, **kwargs)`` in the current transaction on
        everystep's database, due at the task's ``run_after`` (or now). Called in a
        workflow or task body, the start is recorded like ``start()``'s: a replay
        returns the same ``TaskResult`` and inserts nothing."""
        return self.start(task, args, kwargs)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """``enqueue()`` from async code; in an async body, recorded as ``astart()``."""
        return await self.astart(task, args, kwargs)

    def start(
        self,
        task: Any,
        args: Any,
        kwargs: Any,
        *,
        idempotency_key: str | None = None,
        everystep_id: str | None = None,
    ) -> Any:
        """``enqueue()`` with ``start()``'s keywords (``everystep.start(task, ...)``)."""
        child = self._child(task, args, kwargs, idempotency_key)
        frame = body_frame()
        if frame is None:
            refuse_on_event_loop("enqueue() of a task", "await task.aenqueue()")
            run = create_run(
                child.name,
                child.args,
                idempotency_key,
                due_at=child.due_at,
                queue=child.queue,
                task_options=child.task_options,
            )
            return self._enqueued(task, run)
        sync_only(frame, "enqueue() of a task", "aenqueue()")
        return self._started(task, reach(frame, children.START, everystep_id=everystep_id), child)

    def astart(
        self,
        task: Any,
        args: Any,
        kwargs: Any,
        *,
        idempotency_key: str | None = None,
        everystep_id: str | None = None,
    ) -> Awaitable[Any]:
        """``start()`` from async code. Its position is taken as it is called, as every
        operation of an async body's is (``engine.asynchronous.async_ops``)."""
        frame = async_ops.async_frame("aenqueue() of a task", "enqueue()")
        if frame is None:
            return sync_to_async(self.start, thread_sensitive=True)(
                task, args, kwargs, idempotency_key=idempotency_key
            )
        child = self._child(task, args, kwargs, idempotency_key)
        op = reach(frame, children.START, everystep_id=everystep_id)
        return async_ops.issue(lambda: offload(self._started, task, op, child), op)

    def _child(self, task: Any, args: Any, kwargs: Any, idempotency_key: str | None) -> Child:
        """The run ``task(*args, **kwargs)`` is to be, checked before anything is
        written."""
        self.validate_task(task)
        name = task.module_path
        self._check_runnable(task, name)
        _check_arguments(task, name, args, kwargs)
        base = framework_module(task, "base")
        # Built before the row: Django normalises the arguments to JSON here, and refuses
        # what JSON cannot hold, before anything is written.
        draft = base.TaskResult(
            task=task,
            id="",
            status=base.TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        stored = shapes.encode_call(
            task.func, list(draft.args), dict(draft.kwargs), f"arguments of task {name}"
        )
        due = (
            timezone.now()
            if task.run_after is None
            else as_instant(task.run_after, f"run_after of task {name}")
        )
        options = {
            "backend": self.alias,
            "run_after": None if task.run_after is None else due.isoformat(),
        }
        return Child(name, stored, idempotency_key, due, task.queue_name, options)

    def _started(self, task: Any, op: Operation, child: Child) -> Any:
        """The task run ``child`` a body starts at ``op``: inserted with its record on
        the first pass, the same run read back on a replay."""
        handle = children.started(op, child)
        run = get_run(handle.id)
        if run is None:  # pruned since the first pass: the result that pass returned
            run = Workflow(
                id=handle.id,
                name=child.name,
                args=child.args,
                status=Status.SCHEDULED,
                created_at=child.due_at,
                due_at=child.due_at,
                queue=child.queue,
                task_options=child.task_options,
            )
        if op.decision is not Decision.EXECUTE:
            return task_runs.task_result(run, task)
        return self._enqueued(task, run)

    def _enqueued(self, task: Any, run: Workflow) -> Any:
        result = task_runs.task_result(run, task)
        framework_module(task, "signals").task_enqueued.send(sender=type(self), task_result=result)
        return result

    def _check_runnable(self, task: Any, name: str) -> None:
        """Refuse, before any run is written, a task a worker could not find again."""
        invalid = framework_module(task, "exceptions")
        error = getattr(invalid, "InvalidTask", None) or invalid.InvalidTaskError
        try:
            safe_text.storable_text(name, f"task name {name[:60]!r}")
        except Exception as exc:
            raise error(str(exc)) from None
        if len(name) > MAX_NAME_LENGTH:
            raise error(
                f"task {name[:60]}… has a path of {len(name)} characters; runs store "
                f"names of at most {MAX_NAME_LENGTH}"
            )
        interactive = interactive_module(name.rpartition(".")[0])
        if interactive is not None:
            raise error(
                f"task {name} is defined {interactive}, which no worker can import: "
                "define it in a module of the project (an installed app's tasks.py)"
            )
        if registry.workflow_def(task.func) is not None:
            raise error(
                f"task {name} is a @task over a @workflow: remove @workflow (the task "
                "function is the run's workflow body; the @step functions it calls are "
                "recorded)"
            )
        try:
            found = task_runs.task_named(name)
        except Exception as exc:
            raise error(f"a worker could not run task {name}: {exc}") from None
        if found.func is not task.func:
            raise error(f"{name} names another function than this task's in the module")

    def get_result(self, result_id: str) -> Any:
        """The run ``result_id`` as a ``TaskResult``; Django's ``TaskResultDoesNotExist``
        for an id that names no task run."""
        run = None
        with contextlib.suppress(ValueError):  # not a UUID: no run has it
            run = get_run(UUID(str(result_id)))
        if run is None or run.queue is None:
            raise TaskResultDoesNotExist(f"no task run with id {str(result_id)[:60]!r}")
        try:
            task = task_runs.task_named(run.name)
        except Exception as exc:
            raise TaskResultDoesNotExist(f"run {run.id}: {exc}") from None
        return task_runs.task_result(run, task)


def _check_arguments(task: Any, name: str, args: Any, kwargs: Any) -> None:
    """A ``TypeError`` naming the task if its function cannot be called with ``args``
    and ``kwargs``: now, as ``schedule()`` checks a workflow's, rather than in a failed
    run later."""
    signature = _signature(task.func)
    if signature is None:
        return
    given = (None, *args) if task.takes_context else tuple(args)  # the context comes first
    try:
        signature.bind(*given, **kwargs)
    except TypeError as exc:
        raise TypeError(f"cannot enqueue task {name}{signature}: {exc}") from None


# Once per function: ``inspect.signature`` follows ``__wrapped__`` on every call.
@functools.lru_cache(maxsize=4096)
def _signature(func: Any) -> inspect.Signature | None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a callable without one: not checked
        return None
    bare = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return signature.replace(parameters=bare, return_annotation=signature.empty)
