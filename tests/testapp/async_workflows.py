"""``async def`` workflows and steps, for the tests of async bodies (issue 36). Imported
by the tests that use them, which registers them; a worker subprocess imports them
through ``EVERYSTEP_WORKFLOW_MODULES``.

``CALLS`` counts step body executions by (run id, step name, argument) in this process;
the ``Execution`` rows count them across processes.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from django.utils import timezone

from everystep import (
    agather,
    aresult,
    asleep,
    astart,
    await_for,
    step,
    workflow,
)
from everystep.context import current
from tests.testapp.models import Execution

CALLS: Counter[tuple[str, str, Any]] = Counter()
_lock = threading.Lock()


def _count(name: str, arg: Any) -> None:
    ctx = current()
    if ctx is None:  # called outside a run: a plain call
        return
    with _lock:
        CALLS[(str(ctx.workflow_id), name, arg)] += 1


async def _executed(step_name: str) -> None:
    """An ``Execution`` row for this step's body, written through Django's async ORM."""
    ctx = current()
    if ctx is None:
        return
    await Execution.objects.acreate(
        run_id=ctx.workflow_id, step=step_name, pid=os.getpid(), started_at=timezone.now()
    )


@step
async def fetch(n: int, delay: float = 0.0) -> int:
    """Awaits ``delay`` seconds of simulated I/O, then returns ``n * 10``."""
    _count("fetch", n)
    await _executed(f"fetch-{n}")
    if delay:
        await asyncio.sleep(delay)
    return n * 10


@step
def sync_add(a: int, b: int) -> int:
    """A plain step, awaited from an async body: it runs on a thread."""
    _count("sync_add", (a, b))
    Execution.objects.create(
        run_id=current().workflow_id,  # type: ignore[union-attr]
        step=f"sync_add-{a}-{b}",
        pid=os.getpid(),
        started_at=timezone.now(),
    )
    return a + b


class Declined(Exception):
    """A failure an async body catches."""


@step
async def declines(n: int) -> None:
    _count("declines", n)
    raise Declined(f"card {n} declined")


@workflow
async def awaited_steps(n: int) -> int:
    """Two awaited steps in sequence, a sync one between."""
    first = await fetch(n)
    second = await sync_add(first, 1)
    return int(await fetch(second))


@workflow
async def gathered_then_sleep(count: int, seconds: float) -> list[int]:
    """``count`` steps awaited together, then a durable sleep, then one more step."""
    values = await asyncio.gather(*(fetch(n, 0.01 * (count - n)) for n in range(count)))
    await asleep(seconds)
    return [*values, await fetch(100)]


async def _branch(n: int) -> int:
    """A coroutine of several steps, run as its own task by ``asyncio.gather``."""
    first = await fetch(n, 0.02 * (3 - n % 3))
    return int(await sync_add(first, n))


@workflow
async def gathered_branches(count: int) -> list[int]:
    """Branches of two steps each, awaited together: each branch's ids are its task's."""
    return list(await asyncio.gather(*(_branch(n) for n in range(count))))


@workflow
async def task_group(count: int) -> list[int]:
    """A ``TaskGroup`` of branches, then a step over their results."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_branch(n)) for n in range(count)]
    return [task.result() for task in tasks] + [await fetch(count)]


@workflow
async def catches_a_failure(n: int) -> str:
    """An async step's failure, caught by the body and recorded."""
    try:
        await declines(n)
    except Declined as exc:
        return f"caught: {exc}"
    return "not raised"


@workflow
async def waits_for_approval(n: int) -> Any:
    """Waits durably for the event ``approve`` (its payload is added to a step's)."""
    payload = await await_for("approve", timeout=3600)
    return await sync_add(n, int(payload))


@workflow
async def completion_order(count: int) -> list[int]:
    """Timing decides the path: the order in which branches finish is passed to a
    step. Its replay cannot reproduce that order, and must say so."""
    finished: list[int] = []

    async def branch(n: int) -> None:
        await fetch(n, 0.05 if n == 0 else 0.0)
        finished.append(n)

    await asyncio.gather(*(branch(n) for n in range(count)))
    first = await sync_add(finished[0], 0)  # recorded with the order this pass saw
    await asleep(0.5)  # the run is released here: the next pass replays
    return [first]


@workflow
async def uses_asyncio_wait(count: int) -> int:
    """Waits for the first of several tasks: refused in a body."""
    tasks = [asyncio.ensure_future(fetch(n)) for n in range(count)]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    return len(done)


@workflow
async def forgets_await(n: int) -> int:
    """Calls a step without awaiting it."""
    fetch(n)
    return n


def _gate(run_id: Any) -> Path:
    return Path(tempfile.gettempdir()) / f"everystep-test-gate-{run_id}"


def release_slow_io(run_id: Any) -> None:
    """Let ``slow_fetch`` in run ``run_id`` return (in any process)."""
    _gate(run_id).touch()


@step
async def slow_fetch(n: int, limit: float) -> int:
    """Awaits until its run's gate is released (``release_slow_io``) or ``limit``
    seconds have passed, then returns ``n * 10``."""
    _count("slow_fetch", n)
    await _executed(f"fetch-{n}")
    ctx = current()
    assert ctx is not None
    gate = _gate(ctx.workflow_id)
    for _ in range(int(limit / 0.05)):
        if gate.exists():
            break
        await asyncio.sleep(0.05)
    return n * 10


@workflow
async def awaited_steps_slow(n: int, limit: float) -> int:
    """As ``awaited_steps``, the second step waiting for its gate (see ``slow_fetch``)."""
    first = await fetch(n)
    second = await slow_fetch(first + 1, limit)
    return int(await fetch(second + 1))


@workflow
def sync_calls_async_step(n: int) -> Any:
    """A sync body calling an async step: refused."""
    return fetch(n)


@workflow
async def async_calls_sync_sleep(n: int) -> int:
    """An async body calling the sync sleep(): refused, naming asleep()."""
    from everystep import sleep

    sleep(1)
    return n


@workflow
async def async_calls_parallel(n: int) -> Any:
    """An async body calling parallel(): refused, naming asyncio.gather()."""
    from everystep import parallel

    return parallel(lambda: n)


@workflow
async def async_calls_patched(n: int) -> Any:
    """An async body calling patched(): not available in async bodies."""
    from everystep import patched

    return patched("change")


@workflow
async def child_of_async(n: int) -> int:
    """Returns ``n + 1`` after one step."""
    return int(await sync_add(n, 1))


@workflow
async def async_parent(count: int) -> list[int]:
    """Starts children with ``astart`` and awaits them with ``agather`` and ``aresult``."""
    children = [await astart(child_of_async, n) for n in range(count)]
    together = await agather(children)
    first = await aresult(children[0])
    return [*together, first]


@workflow
async def slow_io(seconds: float) -> int:
    """One step awaiting ``seconds`` of simulated I/O (the async bench's body)."""
    return int(await fetch(1, seconds))


@workflow
async def swallows_a_wait(seconds: float) -> str:
    """``gather(..., return_exceptions=True)`` over a durable sleep: the wait still
    releases the run, whatever the body does with what gather hands it."""
    outcomes = await asyncio.gather(asleep(seconds), fetch(7), return_exceptions=True)
    return f"returned early with {len(outcomes)} outcomes"


@workflow
async def leaves_a_task_behind(n: int) -> int:
    """Starts a task that would wait an hour and never awaits it: the pass ends anyway
    (the task is cancelled), and the run completes."""

    async def forgotten() -> None:
        await asyncio.sleep(3600)
        await fetch(99)

    asyncio.ensure_future(forgotten())  # noqa: RUF006  (forgotten on purpose)
    return int(await fetch(n))


def _backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@step
async def orm_pid(n: int) -> int:
    """The PostgreSQL backend of the thread Django's async ORM uses, then a query there."""
    from asgiref.sync import sync_to_async

    pid = await sync_to_async(_backend_pid)()
    await Execution.objects.filter(step="none").acount()
    return pid


@workflow
async def async_orm_probe(n: int) -> int:
    """One step through Django's async ORM (see ``orm_pid``)."""
    return int(await orm_pid(n))
