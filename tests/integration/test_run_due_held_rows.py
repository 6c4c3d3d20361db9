"""``run_due()`` and a due run whose row another connection holds for a moment.

A waiter marking its run, or a worker releasing one, locks the run's row for an instant.
The claim skips locked rows (PostgreSQL and MariaDB) or waits for the write lock
(SQLite); either way ``run_due()`` must still run the run, not return with it
``scheduled``."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from django.db.models import F

from everystep import conf, schedule
from everystep.models import Status, Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def holding(run_id: object, held: threading.Event, release: threading.Event) -> None:
    """Write the run's row in a transaction of another connection, and keep it open
    until ``release`` (at most 10 s)."""
    alias = conf.database()
    try:
        with transaction.atomic(using=alias):
            Workflow.objects.using(alias).filter(id=run_id).update(name=F("name"))
            held.set()
            release.wait(10)
    finally:
        connections[alias].close()


def test_a_run_held_for_a_moment_is_still_run():
    """The row is held when run_due() starts and released 0.3 s later: the run ends
    ``completed`` within that one call."""
    run = schedule(wf.sequential, 1, 2)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=holding, args=(run.id, held, release))
    holder.start()
    try:
        assert held.wait(10)
        threading.Timer(0.3, release.set).start()
        passed = run_due()
    finally:
        release.set()
        holder.join(15)
    assert [r.id for r in passed] == [run.id]
    assert passed[0].status == Status.COMPLETED
