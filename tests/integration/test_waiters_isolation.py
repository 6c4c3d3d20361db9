"""The hub of async waiters (``everystep.waiting.hub``) isolates its waiters from each
other (security issue 50, item 3): a run's value that cannot be rebuilt fails that run's
watchers alone, a ``SystemExit`` raised while rebuilding one does not end the hub's
thread, and a hub whose thread is gone is replaced by the next registration, which takes
over the waiters it held. Every waiter here waits on a bare event loop (not one that
``async_to_sync`` started), so it is served by the hub alone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from everystep import aresult, awatch, schedule, serde
from everystep.errors import EverystepError
from everystep.models import Workflow
from everystep.store import published
from everystep.testing import run_due
from everystep.waiting import hub as hub_module
from tests.integration.test_async_callers import on_a_thread
from tests.testapp import composition as cw

pytestmark = pytest.mark.django_db(transaction=True)

# A stored datetime that no decode can rebuild, whatever it does with unknown types.
UNREADABLE = {serde.TAG: "datetime", "v": "not a date"}


def on_a_bare_loop(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``asyncio.run(coro())`` on a thread of its own (as an ASGI server's loop, not
    one of ``async_to_sync``); its result, or its exception raised here."""
    thread, outcome = on_a_thread(coro)
    thread.join(120)
    assert outcome, "the loop did not finish"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


async def first_values(run: Workflow) -> dict[str, Any]:
    """What ``awatch(run)`` yields first."""
    async for values in awatch(run, timeout=60):
        return values
    raise AssertionError("awatch yielded nothing")


def waiting_and_ended() -> tuple[Workflow, Workflow]:
    """A run waiting for an event (not final: watched for as long as one likes) and a
    completed run whose result is 5."""
    waiting, ended = schedule(cw.child_waits, "never"), schedule(cw.child_sum, 2, 3)
    run_due()
    assert Workflow.objects.get(id=ended.id).status == "completed"
    return waiting, ended


def test_a_value_that_cannot_be_rebuilt_fails_its_own_watcher_and_no_other_waiter():
    """One run's unreadable published value: its watcher gets a clear ``EverystepError``;
    a watcher of another run gets its values and an ``aresult`` in the same process its
    result, while the bad run is still watched."""
    bad, ended = waiting_and_ended()
    good = schedule(cw.child_waits, "never either")
    published.write(bad.id, "when", UNREADABLE)
    published.write(good.id, "stage", serde.encode("half", "test"))

    async def scenario() -> tuple[Any, ...]:
        bad_watch = asyncio.ensure_future(first_values(bad))
        await asyncio.sleep(0.2)  # the bad run watched first, and still
        good_values = await first_values(good)
        result = await aresult(ended, timeout=60)
        with pytest.raises(EverystepError, match=r"awatch\(\): run .* 'when' cannot be rebuilt"):
            await bad_watch
        return good_values, result

    assert on_a_bare_loop(scenario) == ({"stage": "half"}, 5)


def test_a_system_exit_while_rebuilding_a_value_fails_that_watcher_not_the_hub(monkeypatch):
    """A decode that raises ``SystemExit`` fails the watcher of that value with an
    ``EverystepError``; the hub's thread lives on, and an ``aresult`` of an ended run
    afterwards returns its result (it hung once the thread had died)."""
    bad, ended = waiting_and_ended()
    published.write(bad.id, "exit", "exit now")
    decode = serde.decode

    def exiting(data: Any) -> Any:
        if data == "exit now":
            raise SystemExit(3)
        return decode(data)

    monkeypatch.setattr(serde, "decode", exiting)
    thread = hub_module.current_hub().thread

    async def scenario() -> Any:
        with pytest.raises(EverystepError, match="SystemExit"):
            await first_values(bad)
        return await aresult(ended, timeout=30)

    assert on_a_bare_loop(scenario) == 5
    assert hub_module.current_hub().thread is thread and thread.is_alive()


def test_a_hub_whose_thread_ended_is_replaced_and_its_waiters_taken_over():
    """With the hub's thread gone, the next ``aresult`` starts a new hub, which serves it
    and the waiter the old hub still held."""
    _waiting, ended = waiting_and_ended()
    dead = hub_module.Hub()
    dead.thread = threading.Thread(target=lambda: None)
    dead.thread.start()
    dead.thread.join()
    hub_module._hub = dead

    async def scenario() -> tuple[Any, str]:
        loop = asyncio.get_running_loop()
        stranded = hub_module.Waiter([ended.id], "aresult()", loop, loop.create_future())
        dead.add(stranded)
        result = await aresult(ended, timeout=30)
        (outcome,) = await asyncio.wait_for(stranded.future, 30)
        return result, outcome["status"]

    assert on_a_bare_loop(scenario) == (5, "completed")
    assert hub_module.current_hub() is not dead and hub_module.current_hub().thread.is_alive()
    assert dead.waiting() == 0
