"""The async twins of the public API, for ``async def`` callers and bodies.

From async code outside a run (an ASGI view, a script's event loop): ``aschedule`` and
``asend`` do what ``schedule`` and ``send`` do, on a thread (Django's ORM is sync), and
``aresult`` / ``agather`` wait without holding a thread or a connection each: every
waiter of a process shares one wake-up (``everystep.waiting.waiters``).

Inside an ``async def`` workflow body: ``asleep``, ``asleep_until``, ``await_for``,
``astart``, ``aresult`` and ``agather`` are the body's durable waits and child starts,
recorded as their sync twins are. Each takes its step id when it is *called*, not when
it is awaited, so concurrent awaits get the same ids on every pass
(``everystep.engine.asynchronous.async_ops``).

``aresult`` and friends are plain functions returning an awaitable, for that reason:
``await aresult(run)`` reads as a coroutine call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Never, TypeVar, TypeVarTuple, overload
from uuid import UUID

from asgiref.sync import markcoroutinefunction, sync_to_async

from everystep.decorators import is_django_task

if TYPE_CHECKING:
    from everystep.models import Workflow
    from everystep.scheduling import DjangoTask, TaskRun

T = TypeVar("T")  # a payload's type (``await_for(..., type=T)``)
# As in ``everystep.scheduling``: a workflow's argument types, and what it returns.
Ts = TypeVarTuple("Ts")
R = TypeVar("R")


@overload
def aschedule(
    workflow_fn: Callable[[*Ts], Coroutine[Any, Any, R]],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
) -> Awaitable[Workflow[R]]: ...
@overload
def aschedule(
    workflow_fn: Callable[[*Ts], R],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
) -> Awaitable[Workflow[R]]: ...


@markcoroutinefunction
def aschedule(
    workflow_fn: Callable[[*Ts], Any],
    *args: *Ts,
    at: datetime | None = None,
    delay: timedelta | float | None = None,
    idempotency_key: str | None = None,
    **keywords: Never,
) -> Awaitable[Workflow]:
    """``schedule()`` from async code. It runs on Django's thread for sync code
    (``sync_to_async``), so it joins a transaction only if that thread holds one: in an
    async view there is none, and the run commits at once. To schedule with other writes
    in one transaction, put both in a sync function and await it through
    ``sync_to_async`` (docs/async.md). In an async workflow or task body it is recorded
    as ``astart()`` is."""
    from everystep.engine.asynchronous import async_ops
    from everystep.scheduling import due_time, run_of, schedule
    from everystep.store.step_records import Child

    frame = async_ops.async_frame("aschedule()", "schedule()")
    if frame is None:
        return sync_to_async(schedule, thread_sensitive=True)(
            workflow_fn, *args, at=at, delay=delay, idempotency_key=idempotency_key, **keywords
        )
    defn, stored = run_of(workflow_fn, args, keywords, idempotency_key, "schedule")
    child = Child(defn.name, stored, idempotency_key, due_time(at, delay, "aschedule()"))
    return async_ops.astart(frame, child, None)


async def asend(run_id: UUID | str, name: str, payload: Any = None) -> bool:
    """``send()`` from async code (committed at once, as ``aschedule``)."""
    from everystep.store.events import send_event

    return await sync_to_async(send_event, thread_sensitive=True)(run_id, name, payload)


async def acancel(run: Workflow | UUID | str, reason: str | None = None) -> Workflow:
    """``cancel()`` from async code (committed at once)."""
    from everystep.cancelling import cancel

    return await sync_to_async(cancel, thread_sensitive=True)(run, reason)


@overload
def aresult(run: Workflow[R], timeout: timedelta | float | None = None) -> Awaitable[R]: ...
@overload
def aresult(run: TaskRun[R], timeout: timedelta | float | None = None) -> Awaitable[R]: ...
@overload
def aresult(run: UUID | str, timeout: timedelta | float | None = None) -> Awaitable[Any]: ...


@markcoroutinefunction
def aresult(run: Any, timeout: timedelta | float | None = None) -> Awaitable[Any]:
    """Await ``run``'s result once it has ended, as ``result()`` returns it. Outside a
    body the wait holds no thread and shares the process's wake-up; inside an async body
    it is durable."""
    from everystep.waiting import waiters

    return waiters.aresult(run, timeout)


@overload
def agather(
    runs: Sequence[Workflow[R]], timeout: timedelta | float | None = None
) -> Awaitable[list[R]]: ...
@overload
def agather(
    runs: Sequence[TaskRun[R]], timeout: timedelta | float | None = None
) -> Awaitable[list[R]]: ...
@overload
def agather(
    runs: Sequence[UUID | str], timeout: timedelta | float | None = None
) -> Awaitable[list[Any]]: ...
@overload
def agather(
    runs: Sequence[Workflow | TaskRun[Any] | UUID | str], timeout: timedelta | float | None = None
) -> Awaitable[list[object]]: ...


@markcoroutinefunction
def agather(runs: Sequence[Any], timeout: timedelta | float | None = None) -> Awaitable[list[Any]]:
    """Await the results of ``runs`` in order, as ``gather()`` returns them."""
    from everystep.waiting import waiters

    return waiters.agather(runs, timeout)


@markcoroutinefunction
def asleep(delay: timedelta | float) -> Awaitable[None]:
    """Inside an async workflow body: ``await asleep(delay)`` waits durably, as
    ``sleep()`` does in a sync body."""
    from everystep.engine.asynchronous import async_ops

    return async_ops.asleep(delay)


@markcoroutinefunction
def asleep_until(when: datetime) -> Awaitable[None]:
    """Inside an async workflow body: ``await asleep_until(when)``, durably."""
    from everystep.engine.asynchronous import async_ops

    return async_ops.asleep_until(when)


@overload
def await_for(name: str, timeout: timedelta | float | None = None) -> Awaitable[Any]: ...
@overload
def await_for(
    name: str, timeout: timedelta | float | None = None, *, type: type[T]
) -> Awaitable[T]: ...
@overload
def await_for(
    name: str, timeout: timedelta | float | None = None, *, type: Any
) -> Awaitable[Any]: ...


@markcoroutinefunction
def await_for(
    name: str, timeout: timedelta | float | None = None, *, type: Any = None
) -> Awaitable[Any]:
    """Inside an async workflow body: wait durably for the event ``name``, as
    ``wait_for()`` does in a sync body (``type``: the payload's type, as there)."""
    from everystep.engine.asynchronous import async_ops

    return async_ops.await_for(name, timeout, type)


@overload
def astart(
    workflow_fn: DjangoTask[R],
    *args: Any,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
    **task_kwargs: Any,
) -> Awaitable[R]: ...
@overload
def astart(
    workflow_fn: Callable[[*Ts], Coroutine[Any, Any, R]],
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
) -> Awaitable[Workflow[R]]: ...
@overload
def astart(
    workflow_fn: Callable[[*Ts], R],
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
) -> Awaitable[Workflow[R]]: ...


@markcoroutinefunction
def astart(
    workflow_fn: Any,
    *args: *Ts,
    idempotency_key: str | None = None,
    everystep_id: str | None = None,
    **keywords: Any,
) -> Awaitable[Any]:
    """``start()`` from an async workflow body (a recorded child start); outside a body
    it is ``aschedule()``. A Django ``@task`` is started as ``start()`` starts one."""
    from everystep.engine.asynchronous import async_ops
    from everystep.scheduling import run_of, task_backend
    from everystep.store.runs import create_run
    from everystep.store.step_records import Child

    if is_django_task(workflow_fn):
        return task_backend(workflow_fn, "astart").astart(
            workflow_fn, args, keywords, idempotency_key=idempotency_key, everystep_id=everystep_id
        )
    defn, stored = run_of(workflow_fn, args, keywords, idempotency_key, "astart")
    frame = async_ops.async_frame("astart()", "start()")
    if frame is None:
        return async_ops.offload(create_run, defn.name, stored, idempotency_key)
    return async_ops.astart(frame, Child(defn.name, stored, idempotency_key), everystep_id)


def awatch(
    run: Workflow | UUID | str,
    timeout: timedelta | float | None = None,
    *,
    types: Mapping[str, Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """``watch()`` for async code: ``async for values in awatch(run)``. Its waits hold no
    thread and share the process's wake-up with every other ``awatch`` and ``aresult``.
    ``types`` as for ``published()``."""
    from everystep.engine.operations.results import run_ids
    from everystep.engine.operations.waits import as_delay
    from everystep.waiting.waiters import watch_values

    (run_id,) = run_ids([run], "awatch()")
    limit = None if timeout is None else as_delay(timeout, "awatch() timeout")
    if not types:
        return watch_values(run_id, limit)
    return _typed_stream(watch_values(run_id, limit), types)


async def _typed_stream(
    stream: AsyncIterator[dict[str, Any]], types: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    from everystep.waiting.watching import typed

    async for values in stream:
        yield typed(values, types)
