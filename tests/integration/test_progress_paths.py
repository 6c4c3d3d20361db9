"""Where ``publish`` writes (``everystep.engine.operations.progress``): a step's value is visible
while its own transaction is still open (an atomic step; SQLite, with one writer, at
the commit), from an async step and an async body as from sync ones, and a replay check
writes nothing."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from everystep import publish, published, schedule, sleep, step, workflow
from everystep.models import Published, Status, Workflow
from everystep.replays.check import check_replay
from everystep.testing import run_due

pytestmark = pytest.mark.django_db(transaction=True)

inside = threading.Event()
release = threading.Event()


@step(atomic=True)
def atomic_publisher() -> str:
    publish("stage", "inside the transaction")
    inside.set()
    assert release.wait(30), "the test never released the step"
    return "done"


@workflow
def atomic_progress() -> str:
    return atomic_publisher()


@step
async def async_publisher(n: int) -> int:
    for i in range(n):
        publish("i", i)
    return n


@workflow
async def async_progress(n: int) -> int:
    publish("stage", "counting")
    total = await async_publisher(n)
    publish("stage", "counted")
    return total


@step
def plain(n: int) -> int:
    return n


@workflow
def sleepy_progress() -> str:
    publish("stage", "before the sleep")
    plain(1)
    sleep(3600)
    publish("stage", "after the sleep")
    return "woke"


def _version(run: Workflow, key: str) -> int:
    return Published.objects.get(workflow_id=run.id, key=key).version


def test_a_value_from_an_atomic_step_is_seen_before_the_step_commits() -> None:
    inside.clear()
    release.clear()
    run = schedule(atomic_progress)
    worker = threading.Thread(target=run_due)
    worker.start()
    try:
        assert inside.wait(30), "the step never ran"
        seen = published(run)
    finally:
        release.set()
        worker.join(60)
    if connection.vendor == "sqlite":
        # One writer: the step's transaction holds it, and the value commits with it.
        assert seen == {}
    else:
        assert seen == {"stage": "inside the transaction"}
    assert Workflow.objects.get(id=run.id).status == Status.COMPLETED
    assert published(run) == {"stage": "inside the transaction"}


def test_an_async_body_and_step_publish_from_the_event_loop() -> None:
    run = schedule(async_progress, 25)
    (done,) = run_due()
    assert done.status == Status.COMPLETED, done.error
    assert published(run) == {"stage": "counted", "i": 24}
    assert _version(run, "i") == 25
    assert _version(run, "stage") == 2


def test_a_replay_and_a_replay_check_publish_nothing() -> None:
    run = schedule(sleepy_progress)
    (asleep,) = run_due()
    assert asleep.status == Status.SCHEDULED
    assert published(run) == {"stage": "before the sleep"}
    report = check_replay(workflow=run.name)
    assert report.checked == 1
    assert _version(run, "stage") == 1
    (woke,) = run_due(advance=3601)
    assert woke.status == Status.COMPLETED, woke.error
    # The replay after the sleep passed the first publish without writing it again.
    assert published(run) == {"stage": "after the sleep"}
    assert _version(run, "stage") == 2


def test_publishing_the_same_value_again_writes_nothing() -> None:
    @step
    def same_twice() -> None:
        publish("stage", "same")
        time.sleep(0.01)
        publish("stage", "same")

    @workflow
    def repeat_progress() -> None:
        same_twice()

    run = schedule(repeat_progress)
    run_due()
    assert _version(run, "stage") == 1


@step(atomic=True)
def quick_atomic_publisher(value: str) -> str:
    publish("stage", value)
    return value


@workflow
def quick_atomic_progress(value: str) -> str:
    return quick_atomic_publisher(value)


@pytest.mark.backends("postgres")
def test_the_writer_thread_reconnects_after_its_connection_was_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An atomic step's value goes through the process's writer thread, whose connection
    may sit idle across a database restart: its next write connects again. (In a test
    environment the writer keeps no idle connection, so that the test database can be
    dropped: here it behaves as in a worker.)"""
    from everystep.engine.operations import progress

    monkeypatch.setattr(progress, "keeps_idle_connection", lambda: True)
    first = schedule(quick_atomic_progress, "first")
    run_due()
    assert published(first) == {"stage": "first"}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (terminated,) = cursor.fetchone()
    assert terminated >= 1  # the writer's connection, at least
    second = schedule(quick_atomic_progress, "second")
    (done,) = run_due()
    assert done.status == Status.COMPLETED, done.error
    assert published(second) == {"stage": "second"}


@pytest.mark.django_db(transaction=False)
def test_in_a_test_wrapped_in_a_transaction_the_value_stays_in_it() -> None:
    """A TestCase (here pytest's ``django_db``) runs the run in the test's transaction:
    the value is written there too, seen by the test, and gone with its rollback."""
    run = schedule(quick_atomic_progress, "in the test")
    (done,) = run_due()
    assert done.status == Status.COMPLETED, done.error
    assert published(run) == {"stage": "in the test"}
    assert connection.in_atomic_block
    elsewhere: list[int] = []

    def count() -> None:
        from django.db import connections

        try:
            elsewhere.append(Published.objects.filter(workflow_id=run.id).count())
        finally:
            connections.close_all()

    reader = threading.Thread(target=count)
    reader.start()
    reader.join(30)
    assert elsewhere == [0]  # not committed outside the test's transaction


@step
def set_stage(value: str) -> str:
    publish("stage", value)
    return value


@workflow
def back_and_forth() -> str:
    publish("stage", "a")
    set_stage("b")
    sleep(3600)
    return set_stage("a")


def test_a_value_a_replay_passed_is_written_when_a_step_publishes_it_again() -> None:
    """After the sleep the replay passes the body's ``"a"`` without writing it; the step
    that then publishes ``"a"`` must write it, since the key holds ``"b"`` now."""
    run = schedule(back_and_forth)
    run_due()
    assert published(run) == {"stage": "b"}
    (woke,) = run_due(advance=3601)
    assert woke.status == Status.COMPLETED, woke.error
    assert published(run) == {"stage": "a"}
