"""``aresult`` / ``agather`` outside a run (inside one they are the engine's:
``everystep.engine.asynchronous.async_ops``): waiting on an event loop for runs to end;
``awatch``: following a run's published values there. Every waiter and watcher of a
process registers with its one hub (``everystep.waiting.hub``), a thread that reads for
them all and settles each on its own loop: no loop ever blocks, and no waiter holds a
thread or a connection of its own.

A waiter in an event loop of its own (an ASGI server's) does no database work of its own:
there each request's sync work runs on a thread of its own, whose connection stays open
until the request ends. Before it waits it closes that thread's idle connections
(``offload.release``: the view's ORM calls opened one), so that an open wait holds no
connection. Only when the hub cannot see one of its runs does it look on its caller's
thread: a run scheduled in a transaction not committed yet is visible there, and an
unknown id is an ``EverystepError``. A waiter whose loop sync code started
(``async_to_sync``: a script, a test) looks first on that thread, which waits anyway, as
``result()`` does: ended runs return at once, and an open transaction there is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from everystep.engine.asynchronous import async_ops
from everystep.engine.asynchronous.offload import offload, release
from everystep.engine.operations import results
from everystep.engine.operations.waits import as_delay
from everystep.errors import WaitTimeout
from everystep.models import Workflow
from everystep.store import database
from everystep.sync_callers import sync_caller
from everystep.waiting.blocking import look_outside, timed_out
from everystep.waiting.hub import Hub, NotSeen, Outcomes, Waiter, Watcher, current_hub

__all__ = ["Hub", "agather", "aresult", "current_hub", "wait_ended", "watch_values"]


def aresult(
    run: Workflow | UUID | str, timeout: timedelta | float | None = None
) -> Coroutine[Any, Any, Any]:
    """``run``'s result: durable in an async body, a shared wake-up elsewhere."""
    ids = results.run_ids([run], "aresult()")
    limit = None if timeout is None else as_delay(timeout, "aresult() timeout")
    frame = async_ops.async_frame("aresult()", "result()")
    if frame is None:
        return _first(wait_ended(ids, limit, "aresult()"))
    return async_ops.result_in_body(frame, ids, limit, many=False)


def agather(
    runs: Sequence[Workflow | UUID | str], timeout: timedelta | float | None = None
) -> Coroutine[Any, Any, list[Any]]:
    """The results of ``runs``, as ``aresult`` waits for one."""
    ids = results.listed_ids(runs, "agather()", "aresult()")
    limit = None if timeout is None else as_delay(timeout, "agather() timeout")
    frame = async_ops.async_frame("agather()", "gather()")
    if frame is None:
        return _all(wait_ended(ids, limit, "agather()"))
    return async_ops.result_in_body(frame, ids, limit, many=True)


async def _first(outcomes: Awaitable[Outcomes]) -> Any:
    (outcome,) = await outcomes
    return results.value(outcome)


async def _all(outcomes: Awaitable[Outcomes]) -> list[Any]:
    return results.values(await outcomes)


async def wait_ended(ids: list[UUID], limit: timedelta | None, what: str) -> Outcomes:
    """The outcomes of runs ``ids`` in order once all have ended (``results.value``
    reads each); past ``limit`` a ``WaitTimeout``."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit.total_seconds()
    try:
        async with asyncio.timeout_at(deadline):
            if sync_caller(loop) is not None:
                ended = await offload(look_outside, ids, what)
                return ended if ended is not None else await _from_hub(ids, what, loop)
            await release()
            try:
                return await _from_hub(ids, what, loop)
            except NotSeen:
                ended = await offload(_look_and_release, ids, what)
                return ended if ended is not None else await _from_hub(ids, what, loop)
    except TimeoutError:
        raise await offload(timed_out, ids, limit, what) from None


async def watch_values(run: UUID, limit: timedelta | None) -> AsyncIterator[dict[str, Any]]:
    """Run ``run``'s published values at once, then as they change, until it is final
    (the last yield holds its final values); past ``limit`` a ``WaitTimeout``."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit.total_seconds()
    watcher = Watcher(run, loop, asyncio.Event())
    if sync_caller(loop) is None:
        await release()
    current_hub().add(watcher)
    last: dict[str, Any] | None = None
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    await watcher.changed.wait()
            except TimeoutError:
                raise WaitTimeout(f"awatch(): run {run} had not ended within {limit}") from None
            watcher.changed.clear()
            if watcher.error is not None:
                raise watcher.error
            if watcher.values is not None and (last is None or watcher.values != last):
                last = watcher.values
                yield last
            if watcher.final:
                return
    finally:
        current_hub().discard(watcher)  # the hub holding it, a replaced one's successor


async def _from_hub(ids: list[UUID], what: str, loop: asyncio.AbstractEventLoop) -> Outcomes:
    waiter = Waiter(ids, what, loop, loop.create_future())
    current_hub().add(waiter)
    try:
        return await waiter.future
    finally:
        current_hub().discard(waiter)
        if waiter.future.done() and not waiter.future.cancelled():
            waiter.future.exception()  # retrieved: asyncio would log it as forgotten
        waiter.future.cancel()  # a late hand-over finds it done and does nothing


def _look_and_release(ids: list[UUID], what: str) -> Outcomes | None:
    """``blocking.look_outside`` on the caller's thread, whose connection is then closed
    again: the wait that may follow holds none."""
    try:
        return look_outside(ids, what)
    finally:
        database.close_idle()
