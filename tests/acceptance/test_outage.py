"""A worker started while the database is down waits for it, logging each attempt, and
then works as usual (it used to die at once in a chaos run)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections

from everystep import schedule
from everystep.models import Workflow
from tests.acceptance.conftest import database_server, wait_until
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def database_down() -> Iterator[None]:
    """The test database unreachable: the server stopped (PostgreSQL, MariaDB), or the
    SQLite file's directory moved away (opening the file then fails)."""
    connections.close_all()
    if os.environ.get("EVERYSTEP_TEST_DB", "sqlite") == "sqlite":
        here = Path(os.environ["EVERYSTEP_TEST_SQLITE_DIR"])
        away = here.with_name(here.name + ".away")
        here.rename(away)
        try:
            yield
        finally:
            away.rename(here)
    else:
        database_server("stop")
        try:
            yield
        finally:
            database_server("start")
    connections.close_all()


def test_a_worker_started_during_an_outage_waits_for_the_database(workers):
    run = schedule(wf.sequential, 2, 3)
    with database_down():
        proc = workers("patient", "--poll", "0.1")
        wait_until(
            lambda: proc.log().count("database unavailable") >= 3, 90, "three retry attempts"
        )
        assert proc.proc.poll() is None, "the worker must wait, not exit"
        assert "Traceback" not in proc.log()
    wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 120, "the run")
    assert "database reachable again" in proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
