"""The Worker class embedded in this process (on a thread), against a real database."""

from __future__ import annotations

import logging
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.utils import timezone

from everystep import schedule
from everystep.engine import execute
from everystep.engine.execute import run_pass
from everystep.models import Runner, Step, Workflow
from everystep.store import database
from everystep.store.claims import claim_due
from tests.testapp import workflows as wf
from tests.workers import WorkerThread, worker_on_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]


def wait_for(predicate, timeout: float = 60) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        done.wait(0.05)
    raise AssertionError("condition not reached")


def all_final() -> bool:
    return not Workflow.objects.filter(status__in=["scheduled", "running"]).exists()


@pytest.fixture
def sigterm_handler() -> Iterator[object]:
    yield signal.getsignal(signal.SIGTERM)


def test_embedded_worker_runs_and_stops_cleanly(sigterm_handler):
    """run() on a thread executes runs, installs no signal handler, and returns on stop()."""
    runs = [schedule(wf.sequential, i, i) for i in range(5)]
    with worker_on_thread(pool_size=2, name="embedded") as started:
        assert signal.getsignal(signal.SIGTERM) is sigterm_handler
        assert Runner.objects.filter(name="embedded").exists()
        wait_for(all_final)
        # A pass ends just after its outcome commits; the loop reaps it on its next tick.
        wait_for(lambda: started.worker.inflight == 0)
    assert started.returned == [True]
    assert {r.status for r in Workflow.objects.filter(id__in=[r.id for r in runs])} == {"completed"}
    assert not Runner.objects.exists(), "a clean stop removes the heartbeat row"


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[object]:
    return [r for r in caplog.records if getattr(r, "event", "") == name]


@pytest.fixture
def write_lock() -> Iterator[sqlite3.Connection]:
    """A second connection to the SQLite file, to hold its one write lock."""
    holder = sqlite3.connect(database.connection().settings_dict["NAME"], isolation_level=None)
    yield holder
    if holder.in_transaction:
        holder.execute("COMMIT")
    holder.close()


@pytest.mark.backends("sqlite")
def test_a_held_sqlite_write_lock_is_waited_out_not_taken_for_an_outage(write_lock, caplog):
    """Another connection holding SQLite's write lock (a long transaction, an atomic step)
    fails the loop's claims after a second each: the worker says so once, as the lock and
    not as the database being down, keeps its connection and claims once the lock is free."""
    caplog.set_level(logging.INFO, logger="everystep")
    run = schedule(wf.sequential, 1, 2, delay=2)
    with worker_on_thread(pool_size=2, name="patient"):
        write_lock.execute("BEGIN IMMEDIATE")
        wait_for(lambda: events(caplog, "worker.lock_busy"), 30)
        time.sleep(2.5)  # a few claims more, each failing on the lock
        write_lock.execute("COMMIT")
        wait_for(all_final)
    run.refresh_from_db()
    assert run.status == "completed"
    assert len(events(caplog, "worker.lock_busy")) == 1
    assert not events(caplog, "worker.database_unavailable")


def test_stop_is_heard_while_another_transaction_holds_a_lock_the_worker_needs():
    """At start-up the worker takes back the runs parked under its name, and another
    transaction holds one of their rows (on SQLite, the write lock). The statement waiting
    for that lock kept stop() and SIGTERM unheard (Python handles a signal only once the
    statement returns) for the project's SQLite ``timeout`` (30 s in these settings),
    MariaDB's ``innodb_lock_wait_timeout`` (50 s) or, on PostgreSQL, as long as the lock
    was held. It now waits a second at most and is tried again."""
    run = schedule(wf.sequential, 1, 2)
    parked = Workflow.objects.filter(id=run.id)
    parked.update(status="running", claimed_by="stoppable", claim_token=uuid.uuid4())
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with database.atomic():
                parked.update(updated_at=timezone.now())
                locked.set()
                release.wait(90)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    embedded = WorkerThread(pool_size=2, name="stoppable")
    try:
        assert locked.wait(10)
        embedded.start()
        time.sleep(2)  # the worker's start-up is waiting for the row
        began = time.monotonic()
        embedded.worker.stop()
        embedded.thread.join(40)
        stopped_after = time.monotonic() - began
    finally:
        release.set()
        holder.join(30)
        if embedded.thread.ident is not None:
            embedded.join()
    assert stopped_after < 10, f"stop() took {stopped_after:.1f}s while the lock was held"
    assert embedded.returned == [True]
    assert parked.get().claimed_by == "stoppable", "the run stays parked under its name"


def test_a_worker_back_from_a_pause_beats_before_it_claims():
    """A process paused past the orphan timeout (SIGSTOP, a frozen VM) comes back with its
    heartbeat row stale. It claimed before its heartbeat thread beat again, so another
    worker's orphan sweep took the new claims at once and their steps ran twice (found by
    bench/chaos.py on PostgreSQL under load). It now beats first."""
    with worker_on_thread(pool_size=2, name="sleeper", heartbeat=60) as started:
        # The pause as the database and the process see it once it is over.
        Runner.objects.filter(name="sleeper").update(last_seen=timezone.now() - timedelta(hours=1))
        started.worker.state.beat_written = time.monotonic() - 3600
        before = timezone.now()
        run = schedule(wf.sequential, 1, 2)
        wait_for(lambda: Workflow.objects.get(id=run.id).status == "completed")
        # The heartbeat thread (every 60 s) has not beaten since: the loop did, first.
        assert Runner.objects.get(name="sleeper").last_seen >= before


def test_startup_catchup_resumes_every_parked_run():
    """All runs parked under the worker's name are resumed, not only the first --pool."""
    runs = [schedule(wf.sequential, i, 1) for i in range(10)]
    Workflow.objects.filter(id__in=[r.id for r in runs]).update(
        status="running",
        claimed_by="catcher",
        claim_token=uuid.uuid4(),
        started_at=timezone.now(),
    )
    other = schedule(wf.sequential, 0, 0)
    Workflow.objects.filter(id=other.id).update(status="running", claimed_by="someone-else")
    with worker_on_thread(pool_size=2, name="catcher"):
        wait_for(lambda: Workflow.objects.filter(status="completed").count() == 10)
    assert Workflow.objects.get(id=other.id).status == "running", "other names are left alone"


def test_engine_crash_fails_the_run_and_the_worker_goes_on(monkeypatch):
    """A crash outside the engine's own handling marks the run failed; others still run."""
    doomed = schedule(wf.named)
    real = execute.registry.lookup

    def broken(name):
        if name == doomed.name:
            raise RuntimeError("engine bug while looking the workflow up")
        return real(name)

    monkeypatch.setattr(execute.registry, "lookup", broken)
    healthy = schedule(wf.sequential, 2, 2)
    with worker_on_thread(pool_size=2, name="crashy"):
        wait_for(all_final)
    doomed.refresh_from_db()
    healthy.refresh_from_db()
    assert doomed.status == "failed"
    assert doomed.error["type"] == "builtins.RuntimeError"
    assert "engine bug" in doomed.error["message"]
    assert healthy.status == "completed"


def test_run_deleted_mid_pass_is_skipped():
    """A run whose row is deleted while it runs is abandoned; the worker goes on."""
    doomed = schedule(wf.self_destruct)
    healthy = schedule(wf.sequential, 2, 2)
    with worker_on_thread(pool_size=1, name="survivor"):
        wait_for(all_final)
    assert not Workflow.objects.filter(id=doomed.id).exists()
    assert not Step.objects.filter(workflow_id=doomed.id).exists()
    assert wf.CALLS["echo:after-delete"] == 0
    healthy.refresh_from_db()
    assert healthy.status == "completed"


def test_run_deleted_before_its_pass_is_abandoned():
    """A claimed run whose row is gone yields an abandoned pass, not an error."""
    run = schedule(wf.sequential, 1, 1)
    (held,) = claim_due("solo", 1)
    Workflow.objects.filter(id=run.id).delete()
    assert run_pass(held).status == "abandoned"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--pool", "0"], "pool_size must be an integer >= 1"),
        (["--poll", "0"], "poll must be a number > 0"),
        (["--drain", "-1"], "drain must be a number >= 0"),
        (["--metrics-port", "70000"], "metrics_port must be an integer from 0 to 65535"),
        (["--name", " "], "name must be a non-empty string"),
        (["--orphan-timeout", "-5"], "orphan_timeout must be a number >= 0"),
    ],
)
def test_worker_command_rejects_bad_flags(flags, message):
    """Invalid worker flags are a clear CommandError before anything starts."""
    with pytest.raises(CommandError, match=message):
        call_command("everystep_worker", *flags)
    assert not Runner.objects.exists()


def test_worker_command_rejects_non_numbers():
    """A non-numeric --pool is refused by the argument parser."""
    with pytest.raises(CommandError, match="invalid int value"):
        call_command("everystep_worker", "--pool", "many")


def test_requeue_runner_command():
    """Runs of a dead runner are requeued; a runner with a fresh heartbeat is refused."""
    run = schedule(wf.sequential, 1, 1)
    Workflow.objects.filter(id=run.id).update(status="running", claimed_by="ghost")
    Runner.objects.create(
        name="ghost",
        boot_id=uuid.uuid4(),
        pool_size=4,
        started_at=timezone.now(),
        last_seen=timezone.now(),
    )
    with pytest.raises(CommandError, match="may be alive"):
        call_command("everystep_requeue_runner", "ghost")
    assert Workflow.objects.get(id=run.id).status == "running"
    call_command("everystep_requeue_runner", "ghost", "--force")
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.claim_token) == ("scheduled", None, None)
