"""Runs of Django ``@task`` functions (the backend is ``everystep.tasks``): how a worker
finds the task a run names, the task function as the run's workflow body, and the run
read back as Django's ``TaskResult``.

A task run is an ordinary run whose ``name`` is the task's ``module_path``, whose
``queue`` is set, and whose stored arguments are ``[args, kwargs]``. Its name is resolved
only to a ``Task`` of Django's task framework (Django 6's ``django.tasks`` or the
``django_tasks`` backport) configured for an everystep backend: any other object is
refused, and nothing found under the name is called. A module is imported for the name
only if it is already imported or belongs to the project (an installed app's package, the
settings' package, ``EVERYSTEP_WORKFLOW_MODULES``), so a row cannot make a worker import
an arbitrary module either.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
from datetime import datetime
from types import ModuleType
from typing import Any

from everystep import conf, serde
from everystep.engine.pass_state import current_frame
from everystep.errors import EverystepError
from everystep.models import Status, Workflow
from everystep.registry import WorkflowDef
from everystep.store.runs import get_run
from everystep.store.task_attempts import begin_attempt
from everystep.task_framework import framework_module, framework_of
from everystep.values import Claim

logger = logging.getLogger("everystep.run")

# The attribute an everystep backend carries, so the engine can recognise one without
# importing ``everystep.tasks`` (an edge module).
BACKEND_MARK = "everystep_backend"


def _project_packages() -> set[str]:
    """The top-level packages a task may be imported from: the installed apps', the
    settings', and those of ``EVERYSTEP_WORKFLOW_MODULES``."""
    from django.apps import apps
    from django.conf import settings

    names = [config.name for config in apps.get_app_configs()]
    names.append(getattr(settings, "SETTINGS_MODULE", None) or "")
    names.extend(conf.workflow_modules()[0])
    return {name.partition(".")[0] for name in names if name}


def _module(module_name: str) -> ModuleType:
    # Through ``import_module`` even when the module is in ``sys.modules``: another pool
    # thread may be importing it right now, and only the import system waits for that
    # import to finish (``sys.modules`` alone hands out a half-run module).
    if module_name not in sys.modules and module_name.partition(".")[0] not in _project_packages():
        raise EverystepError(
            f"module {module_name!r} is not imported and is not part of the project (an "
            "installed app's package, the settings' package or EVERYSTEP_WORKFLOW_MODULES), "
            "so it is not imported for a run"
        )
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise EverystepError(
            f"module {module_name!r} cannot be imported ({type(exc).__name__}: {exc})"
        ) from exc


def _find_task(name: str) -> Any:
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise EverystepError("it is not a dotted path (module.function)")
    found: Any = getattr(_module(module_name), attribute, None)
    if framework_of(found) is None:
        what = "nothing" if found is None else f"a {type(found).__qualname__}"
        raise EverystepError(
            f"{name!r} is {what}, not a django.tasks Task: only a @task function is run "
            "under its name"
        )
    if found.module_path != name:
        raise EverystepError(f"{name!r} names the task {found.module_path}, not itself")
    try:
        backend = found.get_backend()
    except Exception as exc:  # an alias TASKS no longer has
        raise EverystepError(f"task {name}'s backend {found.backend!r}: {exc}") from exc
    if not getattr(backend, BACKEND_MARK, False):
        raise EverystepError(
            f"task {name} is configured for the backend {found.backend!r} "
            f"({type(backend).__module__}.{type(backend).__qualname__}), not everystep's"
        )
    return found


# What each name resolved to: the module it was found in and the task. Served again only
# while that module is still imported and still holds that task, so a module imported
# afresh (a reload, a test running a page's code twice) is resolved afresh.
_tasks: dict[str, tuple[ModuleType, Any]] = {}


def task_named(name: str) -> Any:
    """The ``Task`` a task run named ``name`` runs; ``EverystepError`` saying why when
    the name names none (nothing under it is called)."""
    module_name, _, attribute = name.rpartition(".")
    known = _tasks.get(name)
    if known is not None:
        module, task = known
        if sys.modules.get(module_name) is module and getattr(module, attribute, None) is task:
            return task
    try:
        task = _find_task(name)
    except EverystepError as exc:
        raise EverystepError(f"not a task everystep can run: {exc}") from None
    _tasks[name] = (sys.modules[module_name], task)
    return task


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

    if not inspect.iscoroutinefunction(task.func):
        return WorkflowDef(name, call, task=task)

    async def body(args: list[Any], kwargs: dict[str, Any]) -> Any:
        return await call(args, kwargs)

    return WorkflowDef(name, body, task=task, is_async=True)


def definition(name: str) -> WorkflowDef | None:
    """The workflow definition of runs named ``name`` in this process: a ``@workflow``,
    or a task run's; None if it is neither (the reason: ``task_named(name)``)."""
    from everystep import registry

    found = registry.lookup(name)
    if found is not None:
        return found
    try:
        return task_definition(name)
    except EverystepError:
        return None


def _current_result(task: Any) -> Any:
    """The ``TaskResult`` of the run whose pass is executing (a checking pass has none
    from a claim: read it)."""
    frame = current_frame.get()
    held = frame.run.task_result if frame is not None else None
    if held is not None:
        return held
    run_id = frame.run.run_id if frame is not None else None
    run = get_run(run_id) if run_id is not None else None
    if run is None:
        raise EverystepError("a task's context is read inside its run only")
    return task_result(run, task)


def begin(claim: Claim) -> Any:
    """Start a task run's pass: its attempt recorded if this claim begins one (and Django's
    ``task_started`` sent then); the ``TaskResult`` its context reads. None: the claim
    no longer holds the run."""
    begun = begin_attempt(claim)
    if begun is None:
        return None
    run, new = begun
    task = task_named(run.name)
    result = task_result(run, task)
    if new:
        _send(task, "task_started", result)
    return result


def finished(claim: Claim, name: str) -> None:
    """Send Django's ``task_finished`` for a task run that reached a final status."""
    run = get_run(claim.run_id)
    if run is None:
        return
    task = task_named(name)
    _send(task, "task_finished", task_result(run, task))


def _send(task: Any, signal_name: str, result: Any) -> None:
    """Send one of Django's task signals; a receiver that raises is logged, never lets
    the run's pass fail (its outcome is already, or about to be, written)."""
    signal = getattr(framework_module(task, "signals"), signal_name)
    sender = type(task.get_backend())
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s (%r) raised for run %s: %s",
                signal_name,
                receiver,
                result.id,
                response,
                exc_info=response,
                extra={"event": "task.signal_failed", "run_id": result.id},
            )


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


def _instant(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def task_result(run: Workflow, task: Any) -> Any:
    """The ``TaskResult`` of task run ``run`` of ``task`` (SPEC §13 lists the mapping)."""
    base = framework_module(task, "base")
    status = task_status(base, run.status)
    attempts = [a for a in (run.attempts or []) if isinstance(a, dict)]
    errors = []
    if status == base.TaskResultStatus.FAILED and isinstance(run.error, dict):
        errors.append(
            base.TaskError(
                exception_class_path=str(run.error.get("type") or "builtins.Exception"),
                traceback=str(run.error.get("traceback") or run.error.get("message") or ""),
            )
        )
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
        object.__setattr__(result, "_return_value", serde.decode(run.result))
    return result
