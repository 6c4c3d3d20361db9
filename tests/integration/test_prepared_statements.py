"""``EVERYSTEP_PREPARED_STATEMENTS``: the hot path's statements prepared on the server
where the connection keeps a session of its own, and nowhere else."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings

from everystep import schedule
from everystep.checks import check_settings
from everystep.engine.execute import run_pass
from everystep.models import Workflow
from everystep.store import prepared
from everystep.store.claims import claim_due
from tests.integration.test_worker_embedded import wait_for
from tests.testapp import workflows as wf
from tests.workers import worker_on_thread

THROUGH_POOLER = os.environ.get("EVERYSTEP_TEST_PGBOUNCER") == "1"


@pytest.fixture(autouse=True)
def unconfirmed() -> Iterator[None]:
    """Each test starts from a process in which no worker has confirmed a session."""
    prepared._session_confirmed = False
    yield
    prepared._session_confirmed = False


def check_ids() -> list[str]:
    return [e.id for e in check_settings() if "EVERYSTEP_PREPARED_STATEMENTS" in e.msg]


@pytest.mark.parametrize("value", [True, False, None])
def test_valid_values_pass_the_checks(value):
    with override_settings(EVERYSTEP_PREPARED_STATEMENTS=value):
        assert check_ids() == []


@pytest.mark.parametrize("value", ["yes", 1, 0])
def test_anything_else_is_a_system_check_error_and_leaves_it_automatic(value):
    with override_settings(EVERYSTEP_PREPARED_STATEMENTS=value):
        assert check_ids() == ["everystep.E008"]
        assert prepared.enabled() is False
        prepared.confirm_session("default")
        assert prepared.enabled() is True


def test_unset_prepares_only_after_a_session_is_confirmed_on_everysteps_alias():
    assert prepared.enabled() is False
    prepared.confirm_session("direct")  # a LISTEN alias of its own says nothing of ours
    assert prepared.enabled() is False
    prepared.confirm_session("default")
    assert prepared.enabled() is True
    with override_settings(EVERYSTEP_PREPARED_STATEMENTS=False):
        assert prepared.enabled() is False


def server_prepared() -> list[str]:
    """The statements prepared in this connection's server session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def run_one() -> Workflow:
    run = schedule(wf.sequential, 1, 2)
    [held] = claim_due("prepared", 1)
    assert run_pass(held, should_drain=lambda: False).status == "completed"
    return Workflow.objects.get(id=run.id)


@pytest.mark.backends("postgres")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("setting", [True, False])
def test_the_hot_path_prepares_its_statements_only_when_enabled(setting):
    connection.close()  # a new server session: nothing prepared in it yet
    with override_settings(EVERYSTEP_PREPARED_STATEMENTS=setting):
        run = run_one()
    assert run.result["total"] == 3
    statements = server_prepared()
    claims = [s for s in statements if "FOR UPDATE SKIP LOCKED" in s]
    steps = [s for s in statements if s.lstrip().startswith("INSERT INTO everystep_step")]
    outcomes = [s for s in statements if "status = 'completed'" in s or "SET status" in s]
    if setting:
        assert claims and steps and outcomes, statements
    else:
        assert statements == []


@pytest.mark.backends("postgres")
@pytest.mark.django_db(transaction=True)
def test_a_prepared_hot_path_survives_a_reconnect():
    """A new connection starts with no prepared statement: they are prepared again."""
    with override_settings(EVERYSTEP_PREPARED_STATEMENTS=True):
        run_one()
        connection.close()
        assert run_one().status == "completed"
        assert any("FOR UPDATE SKIP LOCKED" in s for s in server_prepared())


@pytest.mark.backends("postgres")
@pytest.mark.django_db(transaction=True)
@pytest.mark.tiers("pooler")
def test_a_worker_confirms_a_direct_session_and_never_a_pooled_one():
    """Directly connected, the worker's LISTEN probe confirms its alias keeps a session;
    through PgBouncer in transaction mode it must not (LISTEN goes over another alias,
    or its probe fails), so nothing is prepared where a pooler would lose it."""
    with worker_on_thread(pool_size=2, name="preparer"):
        if not THROUGH_POOLER:
            wait_for(prepared.enabled, timeout=20)
        run = schedule(wf.sequential, 2, 3)
        wait_for(lambda: Workflow.objects.get(id=run.id).status == "completed")
    assert prepared.enabled() is (not THROUGH_POOLER)
