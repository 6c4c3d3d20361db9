"""The readings of asyncio's and CPython's internals that the async machinery relies on
(``everystep.engine.asynchronous.asyncio_internals``), pinned on the running Python.

Checked on CPython 3.11, 3.12 and 3.13 (``CHECKED_ON``). On another version the gate
below fails until these tests have passed there and the version is added.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from everystep.engine.asynchronous.asyncio_internals import (
    CHECKED_ON,
    argument_of,
    checked_here,
    made_by,
    reports_by_completion,
)


class Recording(asyncio.Task[Any]):
    """A task that keeps the done-callbacks asyncio gives it."""

    seen: list[Any]

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self.seen.append(fn)
        super().add_done_callback(fn, context=context)


def callbacks_of(use: Any) -> list[Any]:
    """The done-callbacks ``use(tasks)`` adds to the tasks it is given and to those it
    creates, on a loop making ``Recording`` tasks."""
    made: list[Recording] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: Any, coro: Any, **kwargs: Any) -> Recording:
            task = Recording(coro, loop=loop, **kwargs)
            task.seen = []
            made.append(task)
            return task

        loop.set_task_factory(factory)
        await use([asyncio.ensure_future(asyncio.sleep(0)) for _ in range(2)])

    asyncio.run(main())
    return [fn for task in made for fn in task.seen]


async def by_wait(tasks: list[Any]) -> None:
    await asyncio.wait(tasks)


async def by_as_completed(tasks: list[Any]) -> None:
    for next_done in asyncio.as_completed(tasks):
        await next_done


async def by_gather(tasks: list[Any]) -> None:
    await asyncio.gather(*tasks)


async def by_task_group(tasks: list[Any]) -> None:
    async with asyncio.TaskGroup() as group:
        for _ in tasks:
            group.create_task(asyncio.sleep(0))
    await asyncio.gather(*tasks)


def test_wait_and_as_completed_are_told_by_their_callbacks() -> None:
    """asyncio.wait and asyncio.as_completed add a callback each task tells apart."""
    for use in (by_wait, by_as_completed):
        assert any(reports_by_completion(fn) for fn in callbacks_of(use)), use.__name__


def test_gather_and_task_groups_are_not_mistaken_for_them() -> None:
    """The callbacks of gather and a TaskGroup, which keep call order, are not refused."""
    for use in (by_gather, by_task_group):
        seen = callbacks_of(use)
        assert seen, use.__name__  # the test saw callbacks at all
        assert not any(reports_by_completion(fn) for fn in seen), use.__name__


def test_a_coroutines_arguments_are_read_until_it_finishes() -> None:
    """A coroutine object made by an async def is known as its, and its arguments are
    read from its frame until it has finished."""

    async def operation(work: Any, op: Any) -> Any:
        return op

    async def other(op: Any) -> Any:
        return op

    coro = operation(None, "the op")
    assert made_by(coro, operation) and not made_by(coro, other)
    assert argument_of(coro, "op") == "the op"
    assert not made_by(object(), operation) and argument_of(object(), "op") is None
    try:
        coro.send(None)
    except StopIteration as done:
        assert done.value == "the op"
    assert argument_of(coro, "op") is None


def test_the_running_python_is_one_these_readings_were_checked_on() -> None:
    """The gate: a Python not in CHECKED_ON fails until it has been checked and added."""
    version = "{}.{}".format(*sys.version_info[:2])
    assert checked_here(), (
        f"Python {version} is not among the versions asyncio_internals was checked on "
        f"({sorted(CHECKED_ON)}): run this module there, read asyncio.tasks for new "
        "completion callbacks, then add it to CHECKED_ON"
    )
