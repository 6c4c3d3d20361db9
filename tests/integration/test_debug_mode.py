"""everystep under Django's query logging: ``DEBUG = True`` (a fresh ``startproject``),
``CaptureQueriesContext`` and ``connection.force_debug_cursor``.

The hot path bypasses Django's cursor for speed; while Django logs queries it must go
through it instead, so nothing crashes and every statement shows up in
``connection.queries`` like any other (django-debug-toolbar and similar tools read them).
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from everystep import schedule
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.testapp import workflows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]


def step_records(queries: list[dict[str, Any]]) -> list[str]:
    """The logged statements that insert a step record: on their own, or (PostgreSQL:
    a pass's last record) in the statement that writes the run's outcome."""
    return [q["sql"] for q in queries if f"INSERT INTO {Step._meta.db_table} " in q["sql"]]


@pytest.fixture
def forced() -> Iterator[None]:
    """Query logging forced on, as ``DEBUG = True`` does."""
    connection.force_debug_cursor = True
    try:
        yield
    finally:
        connection.force_debug_cursor = False


def test_run_due_under_capture_queries_completes_and_logs_every_statement():
    """CaptureQueriesContext: the run completes; claim, step records and finish are logged."""
    run = schedule(workflows.sequential, 2, 3)
    with CaptureQueriesContext(connection) as captured:
        run_due()
    run.refresh_from_db()
    assert run.status == "completed", run.error
    logged = captured.captured_queries
    recorded = step_records(logged)
    assert len(recorded) == Step.objects.filter(workflow=run).count() == 4
    finishes = [s for s in logged if "UPDATE" in s["sql"] and "completed" in s["sql"]]
    assert finishes, "the run's outcome is logged"
    # The logged text is the statement with its parameters, as Django formats any query.
    assert any(str(run.id).replace("-", "") in s or str(run.id) in s for s in recorded)
    assert not any("%s" in s for s in recorded)


def test_run_due_with_debug_cursor_forced_keeps_queries_in_connection_queries(forced):
    """force_debug_cursor: runs complete and connection.queries holds the claim and records."""
    runs = [schedule(workflows.three_steps, i) for i in range(3)]
    before = len(connection.queries)
    run_due()
    assert {run.status for run in Workflow.objects.filter(id__in=[r.id for r in runs])} == {
        "completed"
    }
    logged = connection.queries[before:]
    recorded = step_records(logged)
    assert len(recorded) == 9
    claims = [
        q["sql"] for q in logged if Workflow._meta.db_table in q["sql"] and "due_at" in q["sql"]
    ]
    assert claims, "the claim is logged"


def test_failed_and_blocked_runs_under_query_logging(forced, blocked_run):
    """Failures and an unsafe step's started row are recorded under query logging too."""
    failed = schedule(workflows.failing)
    run_due()
    failed.refresh_from_db()
    assert failed.status == "failed"
    assert blocked_run.status == "blocked"
    assert blocked_run.steps.filter(status="started").count() == 1


def test_commands_under_query_logging(forced, blocked_run):
    """The operator commands list, show and settle runs with queries logged."""
    done = schedule(workflows.three_steps, 1)
    run_due()
    out = io.StringIO()
    call_command("everystep_runs", stdout=out)
    assert str(done.id) in out.getvalue()
    call_command("everystep_show", str(done.id), stdout=io.StringIO())
    call_command("everystep_resolve_step", str(blocked_run.id), "2", "--discard", stdout=out)
    run_due()
    blocked_run.refresh_from_db()
    assert blocked_run.status == "completed", blocked_run.error


def test_ui_pages_under_debug(settings, client, django_user_model):
    """With DEBUG = True the runs list and a run's page render."""
    settings.DEBUG = True
    run = schedule(workflows.three_steps, 5)
    run_due()
    user = django_user_model.objects.create_superuser("admin", password="pw")
    client.force_login(user)
    assert client.get(reverse("everystep:runs")).status_code == 200
    page = client.get(reverse("everystep:run", args=[run.id]))
    assert page.status_code == 200
    assert str(run.id) in page.content.decode()
    missing = client.get(reverse("everystep:run", args=[uuid.uuid4()]))
    assert missing.status_code == 404
