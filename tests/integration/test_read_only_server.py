"""A connection that still answers, from a server that can no longer write (issue 37): a
failover that demoted the primary behind the address, or an address that now reaches a
standby. Nothing about such a connection looks broken, so a worker that kept it would fail
every write on it forever; everystep retires it and connects again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from everystep import schedule
from everystep.errors import StoreUnavailable
from everystep.models import Step, Workflow
from everystep.store import guard, runners
from tests.integration.test_worker_embedded import wait_for
from tests.testapp import workflows as wf
from tests.workers import worker_on_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backends("postgres", "mariadb")]

# A session the server itself keeps from writing: PostgreSQL refuses with SQLSTATE 25006,
# MariaDB with error 1792, as a standby or a server in read-only mode does.
READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"


def _read_only_statement() -> str:
    return READ_ONLY if connection.vendor == "postgresql" else "SET SESSION TRANSACTION READ ONLY"


@pytest.fixture
def read_only_pool() -> Iterator[dict[str, Any]]:
    """While ``state["on"]``, every new connection of a worker's pool thread is read-only."""
    state: dict[str, Any] = {"on": True, "made": 0}

    def made(sender: Any, connection: Any, **kwargs: Any) -> None:
        if state["on"] and threading.current_thread().name.startswith("everystep-run"):
            with connection.connection.cursor() as cursor:
                cursor.execute(_read_only_statement())
            state["made"] += 1

    connection_created.connect(made, dispatch_uid="test.read_only")
    yield state
    connection_created.disconnect(dispatch_uid="test.read_only")


def test_a_write_refused_as_read_only_is_an_outage_and_retires_the_connection():
    with connection.cursor() as cursor:
        cursor.execute(_read_only_statement())
    try:
        with pytest.raises(StoreUnavailable):
            guard.guarded(runners.forget_runner)("nobody", None)
        # Closed, so the next statement connects again: a read-write session.
        assert connection.connection is None
        runners.forget_runner("nobody", None)
    finally:
        connection.close()  # whatever happened, the next test gets a read-write session


def test_a_worker_whose_pool_reached_a_read_only_server_recovers_without_a_restart(
    read_only_pool,
):
    run = schedule(wf.payment, 7)
    with worker_on_thread(name="read-only", pool_size=2):
        wait_for(lambda: read_only_pool["made"] >= 2, 30)
        assert Workflow.objects.get(id=run.id).status in ("scheduled", "running")
        read_only_pool["on"] = False  # "the failover is over": new connections can write
        wait_for(lambda: Workflow.objects.get(id=run.id).status == "completed", 60)
    steps = list(Step.objects.filter(workflow_id=run.id).values_list("step_id", flat=True))
    assert len(steps) == len(set(steps)) == 3
