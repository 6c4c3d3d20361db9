"""Progress a caller can read while a run goes (SPEC §13, issue 38): ``publish`` from a
body and from a step, ``published``, ``watch`` and ``awatch``, with a real worker
subprocess or ``run_due()`` on a thread doing the run while the test reads. Steps that
publish wait at gates (``tests.testapp.progress_workflows``) the test opens once it has
seen a value, so every intermediate value must really be seen while the run goes."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.utils import timezone

import everystep
from everystep import awatch, publish, published, result, schedule, watch
from everystep.engine.operations.progress import MAX_KEYS, MAX_VALUE_BYTES
from everystep.errors import EverystepError, WaitTimeout
from everystep.models import FINAL_STATUSES, Published, Status, Workflow
from everystep.testing import run_due
from everystep.waiting.waiters import current_hub
from tests.testapp import progress_workflows as pw
from tests.workers import worker_process

pytestmark = pytest.mark.django_db(transaction=True)

NO_RUN = "00000000-0000-7000-8000-000000000000"
COUNT = 30


def until(predicate: Callable[[], Any], what: str, timeout: float = 30) -> None:
    """Wait until ``predicate()`` holds; fail saying ``what`` if it has not in time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def status(run: Workflow) -> str:
    return Workflow.objects.values_list("status", flat=True).get(id=run.id)


def version(run: Workflow, key: str) -> int:
    return Published.objects.get(workflow_id=run.id, key=key).version


def collapsed(values: list[Any]) -> list[Any]:
    """``values`` with runs of equal neighbours kept once."""
    return [v for n, v in enumerate(values) if n == 0 or v != values[n - 1]]


def counted_is(yields: list[dict[str, Any]]) -> list[int]:
    """The ``i`` values a reader saw, in order, each once."""
    return collapsed([values["i"] for values in yields if "i" in values])


def on_a_thread(target: Callable[[], Any]) -> threading.Thread:
    """``target()`` on a thread of its own that closes its connections when done."""

    def main() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=main)
    thread.start()
    return thread


def polling(run: Any) -> Callable[[], None]:
    """A worker's loop, in-process: ``run_due()`` until ``run`` is final (a run not yet
    due when one look came, or claimed a moment later, is found by the next, as a
    worker's next poll finds it)."""

    def loop() -> None:
        deadline = time.monotonic() + 55
        while status(run) not in FINAL_STATUSES and time.monotonic() < deadline:
            run_due()
            time.sleep(0.05)

    return loop


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[None]:
    """A real worker subprocess (``everystep_worker``) for the test."""
    with worker_process("progress", ["--pool", "4", "--poll", "0.05"], tmp_path / "worker.log"):
        yield


# -- a reader while the run goes -----------------------------------------------------------


def test_a_reader_sees_each_value_of_a_worker_subprocess_while_the_run_is_running(worker, tmp_path):
    """A step in a worker subprocess publishes 30 values, each held until the reader saw
    it: ``published`` shows every one while the run is running, then the final values."""
    gate = tmp_path / "gates"
    gate.mkdir()
    run = schedule(pw.counting, COUNT, str(gate))
    for i in range(COUNT):
        until(lambda i=i: published(run).get("i") == i, f"value {i} published", timeout=60)
        seen = published(run)
        assert seen == {"stage": "counting", "i": i}
        assert status(run) == Status.RUNNING
        pw.open_gate(gate, f"i-{i}")
    assert result(run, timeout=60) == COUNT
    assert published(run) == {"stage": "done", "i": COUNT - 1}
    assert version(run, "i") == COUNT  # one write per value, none lost
    assert version(run, "stage") == 2


def test_values_published_before_a_durable_sleep_are_there_after_the_replay():
    """A body's and a step's values from before a durable sleep survive the replay after
    it, and the replay writes none of the body's again (each row's write count stays 1)."""
    run = schedule(pw.sleeps_between, 10)
    (asleep,) = run_due()
    assert asleep.status == Status.SCHEDULED
    before = {"started": True, "rows": {"done": 10, "of": 10}, "stage": "before the sleep"}
    assert published(run) == before
    (woke,) = run_due(advance=3601)
    assert woke.status == Status.COMPLETED, woke.error
    assert published(run) == {**before, "stage": "after the sleep"}
    assert (version(run, "started"), version(run, "rows"), version(run, "stage")) == (1, 1, 2)


# -- watch and awatch ----------------------------------------------------------------------


def test_watch_yields_at_once_then_each_change_and_ends_with_the_final_values(tmp_path):
    """``watch`` yields the values at once (the run not yet started), then each change,
    each one different from the last, and ends after the run completed with its final
    values as its last yield."""
    run = schedule(pw.counting, COUNT, str(tmp_path))
    stream = watch(run, timeout=60)
    yields = [next(stream)]  # no worker yet: nothing has changed, nothing to wait for
    assert yields == [{}]
    worker = on_a_thread(polling(run))
    try:
        for values in stream:
            yields.append(values)
            if "i" in values:
                pw.open_gate(tmp_path, f"i-{values['i']}")
    finally:
        pw.open_gate(tmp_path, f"i-{COUNT - 1}")
        worker.join(60)
    assert status(run) == Status.COMPLETED
    assert counted_is(yields) == list(range(COUNT))
    assert collapsed(yields) == yields, "a yield repeated the one before it"
    assert yields[-1] == published(run) == {"stage": "done", "i": COUNT - 1}


def test_awatch_follows_the_run_while_the_event_loop_keeps_running(tmp_path):
    """``awatch`` yields at once, then each change, and ends with the final values, while
    a ticker on the same loop keeps running: the gates are opened by the ticker, so a
    watch that blocked the loop would stall the run and fail it."""
    run = schedule(pw.counting, COUNT, str(tmp_path))
    workers: list[threading.Thread] = []

    async def scenario() -> tuple[list[dict[str, Any]], list[int]]:
        ticks, latest, stop = [0], [-1], asyncio.Event()

        async def ticker() -> None:
            opened = -1
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks[0] += 1
                if latest[0] > opened:
                    opened = latest[0]
                    pw.open_gate(tmp_path, f"i-{opened}")

        task = asyncio.create_task(ticker())
        yields: list[dict[str, Any]] = []
        ticks_at: list[int] = []
        try:
            async for values in awatch(run, timeout=60):
                yields.append(values)
                ticks_at.append(ticks[0])
                latest[0] = values.get("i", -1)
                if not workers:  # the first yield came with no worker started
                    workers.append(on_a_thread(polling(run)))
        finally:
            stop.set()
            await task
        return yields, ticks_at

    try:
        yields, ticks_at = async_to_sync(scenario)()
    finally:
        pw.open_gate(tmp_path, f"i-{COUNT - 1}")
        for thread in workers:
            thread.join(60)
    assert yields[0] == {}
    assert status(run) == Status.COMPLETED
    assert counted_is(yields) == list(range(COUNT))
    assert collapsed(yields) == yields, "a yield repeated the one before it"
    assert yields[-1] == published(run) == {"stage": "done", "i": COUNT - 1}
    # The ticker ran between the yields: at least once for each gate it opened.
    assert ticks_at[-1] - ticks_at[0] >= COUNT, ticks_at
    assert current_hub().waiting() == 0


def test_watch_and_awatch_past_their_timeout_raise_wait_timeout():
    """On a run that never ends, ``watch`` and ``awatch`` yield its values, then raise
    ``WaitTimeout`` past their timeout; the run is left as it was."""
    run = schedule(pw.publishes_then_waits, "waiting")
    run_due()
    assert status(run) == Status.SCHEDULED
    stream = watch(run, timeout=0.5)
    assert next(stream) == {"stage": "waiting"}
    with pytest.raises(WaitTimeout, match="had not ended"):
        next(stream)

    async def scenario() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        with pytest.raises(WaitTimeout, match="had not ended"):
            async for values in awatch(run, timeout=timedelta(seconds=0.5)):
                seen.append(values)
        return seen

    assert async_to_sync(scenario)() == [{"stage": "waiting"}]
    assert current_hub().waiting() == 0
    assert status(run) == Status.SCHEDULED


def test_watch_of_an_ended_run_yields_its_values_once_and_ends():
    """A run already ended: one yield, its final values, and the watch is over."""
    run = schedule(pw.reports, 7)
    run_due()
    assert list(watch(run, timeout=5)) == [{"n": 7}]

    async def scenario() -> list[dict[str, Any]]:
        return [values async for values in awatch(run.id, timeout=5)]

    assert async_to_sync(scenario)() == [{"n": 7}]


def test_watch_will_not_wait_inside_a_transaction():
    """As ``result()``: a watch of a run not ended, inside a transaction, is refused
    once it would wait, not left waiting on values the transaction cannot see change."""
    run = schedule(pw.publishes_then_waits, "waiting")
    run_due()
    with transaction.atomic():
        stream = watch(run, timeout=5)
        assert next(stream) == {"stage": "waiting"}
        with pytest.raises(EverystepError, match="transaction"):
            next(stream)


# -- clear errors --------------------------------------------------------------------------


def test_publish_outside_a_run_and_reads_of_an_unknown_run_are_clear_errors():
    """``publish`` with no run, and ``published``/``watch``/``awatch`` of an id no run has,
    raise ``EverystepError`` saying so; nothing is written."""
    with pytest.raises(EverystepError, match="no run here"):
        publish("stage", "nowhere")
    with pytest.raises(EverystepError, match=f"no run with id {NO_RUN}"):
        published(NO_RUN)
    with pytest.raises(EverystepError, match=f"no run with id {NO_RUN}"):
        list(watch(NO_RUN, timeout=5))

    async def scenario() -> None:
        with pytest.raises(EverystepError, match=f"no run with id {NO_RUN}"):
            async for _values in awatch(NO_RUN, timeout=5):
                pass

    async_to_sync(scenario)()
    assert current_hub().waiting() == 0
    assert not Published.objects.exists()


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("has.dot", "must not contain a dot"),
        ("has space", "must not contain whitespace"),
        ("123", "must not be all digits"),
        ("", "non-empty string"),
        ("k" * 201, "the limit is 200"),
    ],
)
def test_a_bad_key_fails_the_step_that_publishes_it(key, match):
    """A key named as no step could be fails the step with ``EverystepError``."""
    run = schedule(pw.publishes_one, key, 1)
    (done,) = run_due()
    assert done.status == Status.FAILED
    assert done.error["type"] == "everystep.errors.EverystepError"
    assert match in done.error["message"]
    assert published(run) == {}


def test_a_value_past_the_size_cap_fails_the_step_and_one_at_the_cap_is_kept():
    """A value whose JSON is exactly ``MAX_VALUE_BYTES`` is published; one byte more
    fails the step with ``EverystepError`` naming the limit."""
    at_cap = schedule(pw.publishes_one, "big", MAX_VALUE_BYTES - 2)  # two quotes
    past = schedule(pw.publishes_one, "big", MAX_VALUE_BYTES - 1)
    run_due()
    at_cap.refresh_from_db()
    past.refresh_from_db()
    assert at_cap.status == Status.COMPLETED, at_cap.error
    assert len(published(at_cap)["big"]) == MAX_VALUE_BYTES - 2
    assert past.status == Status.FAILED
    assert past.error["type"] == "everystep.errors.EverystepError"
    assert f"the limit is {MAX_VALUE_BYTES:,}" in past.error["message"]
    assert published(past) == {}


def test_more_keys_than_the_cap_fail_the_step_and_keep_the_first_ones():
    """``MAX_KEYS`` keys are published; the next one fails the step."""
    fits = schedule(pw.publishes_keys, MAX_KEYS)
    too_many = schedule(pw.publishes_keys, MAX_KEYS + 1)
    run_due()
    fits.refresh_from_db()
    too_many.refresh_from_db()
    assert fits.status == Status.COMPLETED, fits.error
    assert too_many.status == Status.FAILED
    assert f"more than {MAX_KEYS} keys" in too_many.error["message"]
    assert len(published(too_many)) == MAX_KEYS


def test_republishing_the_same_value_writes_nothing():
    """The same value under one key, from the body and from two steps of one pass, is
    written once."""
    run = schedule(pw.republishes, "same")
    (done,) = run_due()
    assert done.status == Status.COMPLETED, done.error
    assert published(run) == {"stage": "same"}
    assert version(run, "stage") == 1


# -- with the run's life: prune and fork ---------------------------------------------------


def test_prune_deletes_a_runs_values_with_it():
    """``everystep_prune`` takes the published rows of the runs it deletes, and only
    those."""
    old, young = schedule(pw.reports, 1), schedule(pw.reports, 2)
    run_due()
    Workflow.objects.filter(id=old.id).update(completed_at=timezone.now() - timedelta(days=40))
    assert Published.objects.filter(workflow_id__in=[old.id, young.id]).count() == 2
    call_command("everystep_prune", "--older-than", "30", stdout=io.StringIO())
    assert not Workflow.objects.filter(id=old.id).exists()
    assert not Published.objects.filter(workflow_id=old.id).exists()
    assert published(young) == {"n": 2}


def test_a_fork_shows_the_originals_values_until_it_publishes_its_own(tmp_path):
    """A fork from step 2 shows its original's values while scheduled and while its
    replay runs (a replay publishes nothing), then only its own once it publishes; the
    original's stay as they were."""
    original = schedule(pw.in_two_parts, "a")
    run_due()
    before = {"stage": "finished", "part": "second a"}
    assert published(original) == before
    fork = everystep.fork(original, from_step="2", args=["b", str(tmp_path)])
    assert published(fork) == before
    worker = on_a_thread(polling(fork))
    try:
        until(lambda: pw.at_gate(tmp_path, "part"), "the fork's step 2 at its gate")
        assert status(fork) == Status.RUNNING
        assert published(fork) == before  # the replay of step 1 and the body wrote nothing
        assert not Published.objects.filter(workflow_id=fork.id).exists()
    finally:
        pw.open_gate(tmp_path, "part")
        worker.join(60)
    assert status(fork) == Status.COMPLETED
    assert published(fork) == {"stage": "finished", "part": "second b"}
    assert published(original) == before


# -- many watchers, one wake-up (PostgreSQL) -----------------------------------------------


def database_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


@pytest.mark.backends("postgres")
def test_500_awatch_watchers_on_postgresql_hold_a_handful_of_connections_and_all_end():
    """500 ``awatch`` watchers of 500 runs in one event loop hold at most four database
    connections more than before them while they wait, and all end with their runs'
    final values once the runs complete."""
    hub = current_hub()
    assert hub.idle.wait(10), "the hub still holds its connections"
    runs = [schedule(pw.reports, n) for n in range(500)]
    before = database_sessions()
    outcome: list[Any] = []

    async def follow(run: Workflow) -> list[dict[str, Any]]:
        return [values async for values in awatch(run, timeout=120)]

    async def watch_all() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(follow(run) for run in runs)))

    def main() -> None:
        try:
            outcome.append(asyncio.run(watch_all()))
        except BaseException as exc:
            outcome.append(exc)

    loop_thread = threading.Thread(target=main)
    loop_thread.start()
    try:
        until(lambda: hub.waiting() == 500 or outcome, "500 registered watchers", timeout=60)
        # A read under way as the last watcher registered may miss it: the one after not.
        reads = hub.counts()[0]
        until(lambda: hub.counts()[0] > reads + 1 or outcome, "a read of all 500", timeout=60)
        assert not outcome, outcome
        during = database_sessions()
        listening = hub.listening
        run_due()
    finally:
        loop_thread.join(120)
    assert not loop_thread.is_alive(), "the watchers did not all end"
    (streams,) = outcome
    assert isinstance(streams, list), streams
    assert [stream[-1] for stream in streams] == [{"n": n} for n in range(500)]
    assert all(stream[0] == {} for stream in streams)
    assert during - before <= 4, (before, during)
    assert listening
    assert hub.waiting() == 0
