"""The async caller API (SPEC §13, issue 36): ``aschedule``, ``asend``, ``aresult`` and
``agather`` from async code outside a run — Django's ``AsyncClient``, uvicorn, a bare
event loop. Runs are completed by a real worker subprocess, or by ``run_due()`` on a
thread once the waiters are registered with the process's hub
(``everystep.waiting.waiters``), so every ``aresult`` here really waits and is woken."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection, transaction
from django.test import AsyncClient

from everystep import agather, aresult, aschedule, asend, schedule
from everystep.errors import EverystepError, RunCancelled, RunStopped, WaitTimeout
from everystep.models import Event, Workflow
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from everystep.testing import run_due
from everystep.waiting.waiters import current_hub
from tests import pgadmin
from tests.testapp import composition as cw
from tests.workers import running, uvicorn_command, worker_command

pytestmark = pytest.mark.django_db(transaction=True)

NO_RUN = "00000000-0000-7000-8000-000000000000"


def until(predicate: Callable[[], Any], what: str, timeout: float = 60) -> None:
    """Wait until ``predicate()`` holds; fail saying ``what`` if it has not in time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``await fn(*args, **kwargs)`` from this sync test, on a loop of ``async_to_sync``
    (whose sync work comes back to this thread)."""

    async def call() -> Any:
        return await fn(*args, **kwargs)

    return async_to_sync(call)()


def waiting() -> int:
    return current_hub().waiting()


@contextlib.contextmanager
def completed_once(ready: Callable[[], bool], timeout: float = 30) -> Iterator[None]:
    """On a thread: ``run_due()`` once ``ready()`` holds (or ``timeout`` passed, so that a
    waiter blocking its loop fails its test instead of hanging it)."""

    def complete() -> None:
        deadline = time.monotonic() + timeout
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            run_due()
        finally:
            connection.close()

    thread = threading.Thread(target=complete)
    thread.start()
    try:
        yield
    finally:
        thread.join(60)


def on_a_thread(coro: Callable[[], Coroutine[Any, Any, Any]]) -> tuple[threading.Thread, list]:
    """``asyncio.run(coro())`` on a thread of its own; its outcome lands in the list."""
    outcome: list[Any] = []

    def main() -> None:
        try:
            outcome.append(asyncio.run(coro()))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    return thread, outcome


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[str]:
    """A real worker subprocess (``everystep_worker``) for the test; its name."""
    command = worker_command("async-callers", ["--pool", "8", "--poll", "0.05"])
    with running(command, tmp_path / "worker.log"):
        yield "async-callers"


# -- views ------------------------------------------------------------------------------


def test_an_async_view_under_async_client_awaits_the_run_a_worker_completes(worker):
    """An ``async def`` view schedules a run with ``aschedule`` and answers with its
    result once a worker subprocess has run it (``aresult`` waited for it)."""
    response = async_to_sync(AsyncClient().get)("/async/sum/", {"a": 2, "b": 3})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["result"] == 5
    assert Workflow.objects.get(id=body["run"]).status == "completed"
    assert waiting() == 0


def test_a_ticker_on_the_same_loop_keeps_ticking_while_aresult_waits():
    """While the view's ``aresult`` waits, a ticker on the same loop ticks: the run is
    completed only after 20 ticks with the view waiting, so a wait that blocked the loop
    would leave the ticker short."""
    ticks = [0]

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks[0] += 1

    async def scenario() -> tuple[Any, int]:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        response = await AsyncClient().get("/async/sum/", {"a": 20, "b": 22})
        at_answer = ticks[0]
        stop.set()
        await task
        return response, at_answer

    with completed_once(lambda: ticks[0] >= 20 and waiting() == 1):
        response, at_answer = async_to_sync(scenario)()
    assert response.status_code == 200 and response.json()["result"] == 42
    assert at_answer >= 20


@pytest.mark.tiers("pooler")
def test_async_views_served_by_uvicorn_await_their_runs(worker, tmp_path):
    """Under uvicorn, concurrent requests to async views each schedule runs and answer
    with their results once the worker has run them."""
    port = free_port()
    with running(uvicorn_command(port), tmp_path / "uvicorn.log") as server:

        def answering() -> bool:
            assert server.poll() is None, (tmp_path / "uvicorn.log").read_text()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        until(answering, "uvicorn to listen")

        def get(path: str) -> dict[str, Any]:
            url = f"http://127.0.0.1:{port}{path}"
            with urllib.request.urlopen(url, timeout=90) as response:
                return json.loads(response.read())

        paths = [f"/async/sum/?a={i}&b=100" for i in range(10)] + ["/async/gather/?n=4"]
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(get, paths))
    assert [answer["result"] for answer in answers[:10]] == [i + 100 for i in range(10)]
    assert answers[10]["results"] == [0, 2, 4, 6]
    ran = Workflow.objects.filter(id__in=[a["run"] for a in answers[:10]], status="completed")
    assert ran.count() == 10


# -- aresult / agather ------------------------------------------------------------------


def test_aresult_times_out_and_leaves_the_hub():
    """Past its timeout ``aresult`` raises ``WaitTimeout`` (``agather`` too), and the
    waiter is no longer registered."""
    run = schedule(cw.child_waits, "never")

    async def scenario() -> None:
        with pytest.raises(WaitTimeout, match="had not ended"):
            await aresult(run, timeout=0.2)
        with pytest.raises(WaitTimeout):
            await agather([run], timeout=0)

    async_to_sync(scenario)()
    assert waiting() == 0
    assert Workflow.objects.get(id=run.id).status == "scheduled"


def test_a_cancelled_aresult_leaves_the_hub():
    """A waiting ``aresult`` whose task is cancelled raises ``CancelledError`` and is no
    longer registered."""
    run = schedule(cw.child_waits, "never")

    async def scenario() -> None:
        task = asyncio.ensure_future(aresult(run))
        while waiting() == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async_to_sync(scenario)()
    assert waiting() == 0


def test_unknown_or_malformed_ids_are_clear_errors():
    """An unknown id is an ``EverystepError`` naming it, alone or among ended runs; a
    malformed one and a lone run given to ``agather`` are refused before any wait."""
    done = schedule(cw.child_sum, 1, 1)
    run_due()

    async def scenario() -> None:
        with pytest.raises(EverystepError, match=f"aresult\\(\\): no run with id {NO_RUN}"):
            await aresult(NO_RUN)
        with pytest.raises(EverystepError, match="agather\\(\\): no run with id"):
            await agather([done, NO_RUN])
        with pytest.raises(EverystepError, match="not a run id"):
            await aresult("nope")
        with pytest.raises(EverystepError, match="list of runs"):
            await agather(NO_RUN)  # type: ignore[arg-type]

    async_to_sync(scenario)()
    assert waiting() == 0


def test_agather_waits_and_returns_the_results_in_the_order_asked():
    """``agather`` waits for every run, however they end, and returns their results in
    the order it was given them."""
    runs = [schedule(cw.child_sum, n, n) for n in (1, 2, 3)]
    order = [runs[2], runs[0].id, str(runs[1].id)]
    with completed_once(lambda: waiting() == 1):
        assert sync(agather, order, timeout=60) == [6, 2, 4]


def test_agather_raises_one_failure_itself_and_several_as_an_exception_group():
    """A failed run's exception is raised as the sync twins raise it: one alone, several
    in an ``ExceptionGroup``; stopped and cancelled runs as ``RunStopped``/``RunCancelled``."""
    ok, one, two = (
        schedule(cw.child_sum, 1, 1),
        schedule(cw.child_fails, "one"),
        schedule(cw.child_fails, "two"),
    )
    with completed_once(lambda: waiting() == 1), pytest.raises(ExceptionGroup) as group:
        sync(agather, [ok, one, two], timeout=60)
    assert sorted(str(exc) for exc in group.value.exceptions) == ["one", "two"]
    with pytest.raises(ValueError, match="one"):
        sync(agather, [ok, one])
    stopped, cancelled = schedule(cw.child_stops, "halt"), schedule(cw.child_waits, "x")
    run_due()
    cancel_run(str(cancelled.id), actor=Actor("test", "test"))
    with pytest.raises(RunStopped, match="halt"):
        sync(aresult, stopped)
    with pytest.raises(RunCancelled):
        sync(aresult, cancelled)


def test_aresult_will_not_wait_inside_a_transaction():
    """As ``result()``: a wait inside a transaction is refused, not left hanging."""
    run = schedule(cw.child_sum, 1, 1)
    with transaction.atomic(), pytest.raises(EverystepError, match="inside a database transaction"):
        sync(aresult, run)
    assert waiting() == 0


# -- aschedule / asend ------------------------------------------------------------------


def test_asend_wakes_a_run_waiting_in_wait_for_and_aresult_gets_its_payload():
    """``asend`` delivers an event to a run waiting in ``wait_for``; the ``aresult``
    already waiting for that run gets the payload once it has run on."""
    run = schedule(cw.child_waits, "go")
    run_due()
    assert Workflow.objects.get(id=run.id).waiting_for is not None

    async def scenario() -> tuple[bool, Any]:
        waiter = asyncio.ensure_future(aresult(run, timeout=60))
        while waiting() == 0:
            await asyncio.sleep(0.01)
        sent = await asend(run.id, "go", {"colour": "green"})
        return sent, await waiter

    with completed_once(lambda: Event.objects.filter(workflow_id=run.id, name="go").exists()):
        sent, value = async_to_sync(scenario)()
    assert (sent, value) == (True, {"colour": "green"})


def test_aschedule_with_an_idempotency_key_returns_the_same_run():
    """Two ``aschedule`` calls with one idempotency key make one run."""

    async def scenario() -> tuple[Workflow, Workflow]:
        first = await aschedule(cw.child_sum, 1, 2, idempotency_key="order-7")
        again = await aschedule(cw.child_sum, 1, 2, idempotency_key="order-7")
        return first, again

    first, again = asyncio.run(scenario())
    assert first.id == again.id
    assert Workflow.objects.filter(idempotency_key="order-7").count() == 1


def test_aschedule_never_raises_synchronous_only_operation_on_a_running_loop():
    """On a running loop the sync ``schedule`` raises ``SynchronousOnlyOperation``;
    ``aschedule`` schedules the run."""

    async def scenario() -> Workflow:
        with pytest.raises(SynchronousOnlyOperation):
            schedule(cw.child_sum, 1, 1)
        return await aschedule(cw.child_sum, 3, 4, delay=0)

    run = asyncio.run(scenario())
    assert Workflow.objects.get(id=run.id).status == "scheduled"
    run_due()
    assert sync(aresult, run) == 7


# -- many waiters, one wake-up ----------------------------------------------------------


def many_waiters(count: int) -> tuple[list[Workflow], threading.Thread, list]:
    """``count`` runs not yet run, and a loop on a thread awaiting each with ``aresult``,
    once all are registered and the hub has read all their runs."""
    runs = [schedule(cw.child_sum, n, 1) for n in range(count)]

    async def wait_all() -> list[Any]:
        return list(await asyncio.gather(*(aresult(run, timeout=120) for run in runs)))

    thread, outcome = on_a_thread(wait_all)
    until(lambda: waiting() == count or outcome, f"{count} registered waiters")
    # A read under way as the last waiter registered may not cover it: the one after does.
    registered = current_hub().counts()[0]
    until(lambda: current_hub().counts()[0] > registered + 1 or outcome, "a read of all")
    assert not outcome, outcome
    return runs, thread, outcome


def database_sessions(query: str = "") -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE %s",
            [f"{query}%"],
        )
        return int(cursor.fetchone()[0])


def hub_idle() -> None:
    """Wait until the hub has closed its connections (its last waiter gone)."""
    assert current_hub().idle.wait(10), "the hub still holds its connections"


def own_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def backend_pids() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return {row[0] for row in cursor.fetchall()}


async def hub_backends(before: set[int]) -> list[int]:
    """Once the hub reads and LISTENs for a waiter: its two backends."""
    hub = current_hub()
    reads = hub.counts()[0]
    while not (waiting() and hub.listening and hub.counts()[0] > reads):
        await asyncio.sleep(0.01)
    # Not this loop's own (its sync_to_async thread's connection).
    hubs = await sync_to_async(lambda: backend_pids() - {own_pid()})() - before
    assert len(hubs) == 2, hubs  # its connection for reads, and its LISTEN
    return sorted(hubs)


async def terminate(pids: list[int]) -> None:
    await sync_to_async(pgadmin.execute)(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
    )


@pytest.mark.backends("postgres")
def test_a_lost_hub_connection_is_read_again_and_its_waiters_keep_waiting():
    """The hub's connections killed by the server (a blip): its read is made again on a
    fresh connection, its LISTEN too, and the waiting ``aresult`` returns its run's
    result once the run ends, instead of an error."""
    hub_idle()
    before = backend_pids()
    later = schedule(cw.child_sum, 5, 5)

    async def scenario() -> Any:
        task = asyncio.ensure_future(aresult(later, timeout=60))
        await terminate(await hub_backends(before))
        hub = current_hub()
        reads = hub.counts()[0]
        while not (hub.counts()[0] > reads + 1 and hub.listening):
            await asyncio.sleep(0.01)
        await sync_to_async(run_due)()
        return await task

    assert on_a_thread_result(scenario) == 10


@pytest.mark.backends("postgres")
def test_a_database_gone_for_good_fails_the_waiters_clearly_and_the_hub_recovers():
    """The hub's connections killed and new ones refused: after its one read again, the
    waiting ``aresult`` raises an ``EverystepError`` (as ``result()`` would); once the
    database takes connections again, the next waiter is served."""
    hub_idle()
    before = backend_pids()
    never, later = schedule(cw.child_waits, "never"), schedule(cw.child_sum, 5, 5)
    name = connection.settings_dict["NAME"]

    async def scenario() -> None:
        task = asyncio.ensure_future(aresult(never, timeout=60))
        hubs = await hub_backends(before)
        try:
            await sync_to_async(pgadmin.execute)(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await terminate(hubs)
            with pytest.raises(EverystepError, match=r"aresult\(\): .*"):
                await task
        finally:
            await sync_to_async(pgadmin.execute)(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

    on_a_thread_result(scenario)
    with completed_once(lambda: waiting() == 1):
        assert sync(aresult, later, timeout=60) == 10


def on_a_thread_result(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``on_a_thread``, joined: the loop's result, or its exception raised here."""
    thread, outcome = on_a_thread(coro)
    thread.join(120)
    assert outcome, "the loop did not finish"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


@pytest.mark.backends("postgres")
@pytest.mark.tiers("pooler")
def test_200_waiters_on_postgresql_hold_a_handful_of_connections_and_all_wake():
    """200 concurrent ``aresult`` waiters in one process hold at most five connections
    more than before them (one LISTEN among them), and all wake when their runs end."""
    hub_idle()
    before = database_sessions()
    runs, thread, outcome = many_waiters(200)
    during = database_sessions()
    listening = (database_sessions("LISTEN everystep_ended"), current_hub().listening)
    run_due()
    thread.join(120)
    assert outcome == [[n + 1 for n in range(200)]]
    assert during - before <= 5, (before, during)
    assert listening == (1, True)
    assert Workflow.objects.filter(id__in=[r.id for r in runs], awaited=True).count() == 200


@pytest.mark.backends("sqlite", "mariadb")
def test_100_waiters_elsewhere_share_one_polling_query_per_interval():
    """Without LISTEN, 100 waiters are served by one read of all their runs per interval
    (not one each), fewer reads in all than there are waiters, and all wake."""
    hub = current_hub()
    reads_before, _ = hub.counts()
    _runs, thread, outcome = many_waiters(100)
    reads, ids_read = hub.counts()
    until(lambda: hub.counts()[0] >= reads + 3, "three more reads by the hub")
    reads_later, ids_later = hub.counts()
    listening = hub.listening
    run_due()
    thread.join(120)
    assert outcome == [[n + 1 for n in range(100)]]
    assert ids_later - ids_read == 100 * (reads_later - reads), "each read covers all 100"
    assert hub.counts()[0] - reads_before < 100 and not listening
