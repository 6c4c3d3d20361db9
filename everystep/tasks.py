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

from everystep import registry, safe_text, serde, task_runs
from everystep.decorators import MAX_NAME_LENGTH
from everystep.engine.operations.waits import as_instant
from everystep.store.runs import create_run, get_run
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
        everystep's database, due at the task's ``run_after`` (or now)."""
        self.validate_task(task)
        name = task.module_path
        self._check_runnable(task, name)
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
        stored = serde.encode([draft.args, draft.kwargs], f"arguments of task {name}")
        due = (
            timezone.now()
            if task.run_after is None
            else as_instant(task.run_after, f"run_after of task {name}")
        )
        options = {
            "backend": self.alias,
            "run_after": None if task.run_after is None else due.isoformat(),
        }
        run = create_run(
            name, stored, None, due_at=due, queue=task.queue_name, task_options=options
        )
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
        if name.startswith("__main__."):
            raise error(
                f"task {name} is defined in the script being run (module '__main__'), "
                "which no worker can import: define it in a module of the project (an "
                "installed app's tasks.py)"
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
