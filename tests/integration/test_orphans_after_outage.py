"""A database outage makes every runner's heartbeat stale at once. The first worker back
must not take the runs of live runners that were cut off just as it was: that re-executed
steps in the chaos test (found through PgBouncer, where the restart's errors come later)."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from everystep import schedule
from everystep.models import Runner, Workflow
from everystep.worker.heartbeat import Heartbeat
from everystep.worker.worker_state import WorkerOptions, WorkerState
from tests import pgadmin
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.backends("postgres"), pytest.mark.django_db(transaction=True)]

TIMEOUT = 2.0


def outage() -> None:
    """The test database refuses connections and drops the ones it has."""
    name = connections["default"].settings_dict["NAME"]
    pgadmin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    pgadmin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        [name],
    )


def recovery() -> None:
    name = connections["default"].settings_dict["NAME"]
    pgadmin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def held_by_a_silent_runner() -> Workflow:
    run = schedule(wf.sequential, 1, 1)
    Workflow.objects.filter(id=run.id).update(
        status="running", claimed_by="cut-off", claim_token=uuid.uuid4()
    )
    stale = timezone.now() - timedelta(seconds=10 * TIMEOUT)
    Runner.objects.create(
        name="cut-off", boot_id=uuid.uuid4(), pool_size=1, started_at=stale, last_seen=stale
    )
    return run


def sweeper() -> WorkerState:
    """The state of a worker that beats every half second and takes orphans after TIMEOUT."""
    options = WorkerOptions.resolve(
        name="sweeper", pool_size=1, heartbeat=0.5, orphan_timeout=TIMEOUT
    )
    return WorkerState(options)


def status(run: Workflow) -> str:
    return Workflow.objects.get(id=run.id).status


def test_after_its_own_outage_a_worker_gives_other_runners_a_full_timeout():
    run = held_by_a_silent_runner()
    beat = Heartbeat(sweeper())
    try:
        outage()
        beat._tick()  # fails: the database is gone
    finally:
        recovery()
    connections.close_all()
    beat._tick()  # back: it beats, but leaves the silent runner's run alone
    assert Runner.objects.filter(name="sweeper").exists()
    assert status(run) == "running"
    time.sleep(TIMEOUT + 0.2)
    beat._tick()  # a full timeout later the runner is still silent: now it is dead
    assert status(run) == "scheduled"
    connections.close_all()


def test_without_an_outage_a_silent_runner_loses_its_runs_at_once():
    run = held_by_a_silent_runner()
    Heartbeat(sweeper())._tick()
    assert status(run) == "scheduled"
