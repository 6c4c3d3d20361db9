"""The awaitable operations of an ``async def`` body (``aresult`` / ``agather`` outside
one: ``everystep.waiting.waiters``).

Every operation takes its step id when it is *called*, in the calling task, exactly as
its sync twin does; only the work behind the id (the database, the step's body) waits
for the ``await``. A body's control flow is sequential within each task, and a task
created in a body gets a scope of its own (``everystep.engine.asynchronous.async_body``), so the ids
are the same on every pass however the awaits interleave.

What follows the id is the sync twin's own code, run on a thread (``offload``): the
decisions and writes of an async run are the same functions as a sync run's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from everystep import shapes
from everystep.engine.asynchronous.asyncio_internals import argument_of, made_by
from everystep.engine.asynchronous.offload import offload
from everystep.engine.core.pass_state import Frame
from everystep.engine.core.recorded import Operation, body_frame, reach
from everystep.engine.operations import children, results, waits
from everystep.errors import EverystepError, RunInterrupted, Suspended

if TYPE_CHECKING:
    from uuid import UUID

    from everystep.models import Workflow
    from everystep.store.step_records import Child


async def operation(work: Callable[[], Awaitable[Any]], op: Operation) -> Any:
    """The coroutine every awaitable operation of a body is: a task made of one (in
    ``asyncio.gather``) takes no scope of its own, its id being taken already.

    What stops the pass (a wait, a drain, a lost claim) is made the run's outcome
    (``RunState.abort``) before it is raised: ``asyncio.gather(...,
    return_exceptions=True)`` would otherwise hand it to the body as a value, and a body
    that carried on would complete a run that is still waiting."""
    run = op.run
    run.async_pass.unawaited.pop(op.step_id, None)
    task = asyncio.current_task()
    run.async_pass.busy.add(task)
    try:
        return await work()
    except RunInterrupted as exc:
        raise run.abort(exc) from None
    finally:
        run.async_pass.busy.discard(task)


def issue(work: Callable[[], Awaitable[Any]], op: Operation) -> Coroutine[Any, Any, Any]:
    """The awaitable of the operation reached as ``op``, doing ``work`` once awaited.
    Until then it counts as not awaited: a body that returns with one such forgot an
    ``await``, and its run fails saying so (``engine.asynchronous.async_body``)."""
    op.run.async_pass.unawaited[op.step_id] = op.name
    return operation(work, op)


def handed_over(coro: object) -> bool:
    """Whether ``coro`` is an operation, now handed to a task (``asyncio.gather``, a
    ``TaskGroup``): it counts as awaited, and the task takes no scope of its own."""
    if not made_by(coro, operation):
        return False
    op = argument_of(coro, "op")
    if op is not None:
        op.run.async_pass.unawaited.pop(op.step_id, None)
    return True


def async_frame(what: str, twin: str) -> Frame | None:
    """The frame of the async body calling ``what``, None outside a body or inside a
    step; a sync body is told to use ``twin``."""
    frame = body_frame()
    if frame is not None and not frame.run.is_async:
        raise EverystepError(
            f"{what} is for async workflow bodies; in a sync body call {twin} (no await)"
        )
    return frame


def durable_async_frame(what: str, twin: str) -> Frame:
    """The frame of the async body a durable wait needs, or why ``what`` cannot wait."""
    frame = async_frame(what, twin)
    if frame is None:
        waits.durable_frame(what)  # raises why: outside a run, or inside a step
        raise AssertionError("unreachable")
    return frame


async def _suspending(frame: Frame, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread; a ``Suspended`` it raises is kept for the pass, which
    ends when the body does and must wake for the earliest of its waits."""
    try:
        return await offload(fn, *args)
    except Suspended as wait:
        frame.run.async_pass.suspensions.append(wait)
        raise


# -- waits -------------------------------------------------------------------------------


def asleep(delay: timedelta | float) -> Coroutine[Any, Any, None]:
    """``sleep()`` for an async body (``everystep.async_api.asleep``)."""
    wait = waits.as_delay(delay, "asleep() delay")
    frame = durable_async_frame("asleep()", "sleep()")
    op = reach(frame, waits.SLEEP)
    return issue(lambda: _suspending(frame, waits.slept, op, lambda now: now + wait), op)


def asleep_until(when: datetime) -> Coroutine[Any, Any, None]:
    """``sleep_until()`` for an async body."""
    instant = waits.as_instant(when, "asleep_until() time")
    frame = durable_async_frame("asleep_until()", "sleep_until()")
    op = reach(frame, waits.SLEEP)
    return issue(lambda: _suspending(frame, waits.slept, op, lambda now: instant), op)


def await_for(
    name: str, timeout: timedelta | float | None = None, type: Any = None
) -> Coroutine[Any, Any, Any]:
    """``wait_for()`` for an async body."""
    waits.check_event_name(name)
    limit = None if timeout is None else waits.as_delay(timeout, "await_for() timeout")
    frame = durable_async_frame("await_for()", "wait_for()")
    op = reach(frame, waits.WAIT)
    shape = shapes.of(type)
    return issue(lambda: _suspending(frame, waits.waited_for, op, name, limit, shape), op)


# -- children and runs -------------------------------------------------------------------


def astart(frame: Frame, child: Child, everystep_id: str | None) -> Coroutine[Any, Any, Workflow]:
    """The start of ``child`` in the async body of ``frame`` (``astart``, ``aschedule``),
    its position taken now."""
    op = reach(frame, children.START, everystep_id=everystep_id)
    return issue(lambda: offload(children.started, op, child), op)


def result_in_body(
    frame: Frame, ids: list[UUID], limit: timedelta | None, *, many: bool
) -> Coroutine[Any, Any, Any]:
    """The durable wait of ``aresult()`` (``agather()`` if ``many``) reached in the async
    body of ``frame``; outside a body they are ``everystep.waiting.waiters``'."""
    what = "agather()" if many else "aresult()"
    op = reach(frame, results.GATHER if many else results.RESULT)
    ended = _all if many else _first
    return issue(lambda: ended(_in_body(frame, op, ids, limit, what)), op)


async def _in_body(
    frame: Frame, op: Operation, ids: list[UUID], limit: timedelta | None, what: str
) -> list[dict[str, Any]]:
    return list(await _suspending(frame, results.awaited_runs, op, ids, limit, what))


async def _first(outcomes: Awaitable[list[dict[str, Any]]]) -> Any:
    (outcome,) = await outcomes
    return results.value(outcome)


async def _all(outcomes: Awaitable[list[dict[str, Any]]]) -> list[Any]:
    return results.values(await outcomes)
