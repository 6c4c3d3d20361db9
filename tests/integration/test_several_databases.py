"""Several databases (issue 22): every everystep statement goes to ``EVERYSTEP_DATABASE``,
whatever the project's router says. Runs under ``EVERYSTEP_TEST_ALIAS=jobs`` (``make
several-databases``; deselected otherwise): everystep's tables are in "jobs", and
tests.routers.ReadReplicaRouter sends everystep's reads to "replica" and its writes to
"default", where no everystep table exists."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections, router, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse

from everystep import conf, result, schedule, step, workflow
from everystep.checks import check_settings
from everystep.models import Step, Workflow
from everystep.store.runs import get_run
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import workflows as wf

pytestmark = [
    pytest.mark.several_databases,
    pytest.mark.django_db(transaction=True, databases=["default", "jobs", "replica"]),
    pytest.mark.tiers("several"),
]


@step(atomic=True)
def touch(alias: str) -> str:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 1")
    return alias


@workflow(name="tests.several_databases.touching")
def touching(alias: str) -> str:
    return touch(alias)


@contextmanager
def everystep_sql_elsewhere() -> Iterator[list[str]]:
    """The statements naming an everystep table sent to "default" or "replica"."""
    with ExitStack() as stack:
        captured = [
            stack.enter_context(CaptureQueriesContext(connections[alias]))
            for alias in ("default", "replica")
        ]
        strays: list[str] = []
        yield strays
    strays.extend(
        query["sql"] for seen in captured for query in seen if "everystep_" in query["sql"]
    )


def test_the_mode_is_what_these_tests_assume():
    """The router really sends everystep elsewhere, and everystep's alias is "jobs"."""
    assert conf.database() == "jobs"
    assert router.db_for_read(Workflow) == "replica"
    assert router.db_for_write(Workflow) == "default"


def test_a_run_end_to_end_never_follows_the_router():
    """Schedule, run, read back (ORM, store, relations, refresh, result()): all on "jobs"."""
    with everystep_sql_elsewhere() as strays:
        run = schedule(wf.sequential, 2, 3)
        run_due()
        run.refresh_from_db()
        assert run.status == "completed"
        assert result(run.id) == run.result
        assert get_run(run.id) is not None
        first = Step.objects.filter(workflow_id=run.id).first()
        assert first is not None and first.workflow.id == run.id  # the base manager
        assert list(run.steps.all())  # a related manager
    assert strays == []


def test_schedule_rolls_back_with_the_callers_transaction_on_everysteps_alias():
    """Inside atomic(using="jobs"), a rollback removes the scheduled run."""
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs"):
        schedule(wf.sequential, 1, 2)
        raise RuntimeError("the business change failed")
    assert Workflow.objects.count() == 0


def test_schedule_inside_a_transaction_on_another_alias_commits_on_its_own():
    """Inside atomic() on "default" the run commits at once, and survives its rollback."""
    with pytest.raises(RuntimeError), transaction.atomic():
        run = schedule(wf.sequential, 1, 2)
        raise RuntimeError("the business change failed")
    assert Workflow.objects.filter(id=run.id, status="scheduled").exists()


def test_an_atomic_step_may_use_everysteps_alias_and_no_other():
    """The atomic step's guard treats "jobs" as its own and refuses "default"."""
    ours = schedule(touching, "jobs")
    theirs = schedule(touching, "default")
    run_due()
    assert get_run(ours.id).status == "completed"
    refused = get_run(theirs.id)
    assert refused.status == "failed"
    assert "used another database" in refused.error["message"]


def test_the_ui_and_an_action_never_follow_the_router(client):
    """The run list, a run's page and a cancel read and write "jobs" only."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff_user("cancel_workflow"))
    with everystep_sql_elsewhere() as strays:
        assert client.get(reverse("everystep:runs")).status_code == 200
        assert client.get(reverse("everystep:run", args=[run.id])).status_code == 200
        response = client.post(reverse("everystep:run-action", args=[run.id]), {"action": "cancel"})
        assert response.status_code == 302
    assert strays == []
    assert get_run(run.id).status == "cancelled"


def test_the_admin_never_follows_the_router(client, django_user_model: Any):
    """The admin's lists and a run's page (steps inline, step → run relation) use "jobs"."""
    run = schedule(wf.sequential, 1, 1)
    run_due()
    client.force_login(django_user_model.objects.create_superuser("root", "r@x.example", "pw"))
    step_row = Step.objects.filter(workflow_id=run.id).first()
    assert step_row is not None
    with everystep_sql_elsewhere() as strays:
        for url in (
            reverse("admin:everystep_workflow_changelist"),
            reverse("admin:everystep_workflow_change", args=[run.id]),
            reverse("admin:everystep_step_changelist"),
            reverse("admin:everystep_step_change", args=[step_row.pk]),
        ):
            assert client.get(url).status_code == 200, url
    assert strays == []


def test_commands_never_follow_the_router(capsys: pytest.CaptureFixture[str]):
    """everystep_show and everystep_cancel read and write "jobs" only."""
    run = schedule(wf.sequential, 1, 1)
    with everystep_sql_elsewhere() as strays:
        call_command("everystep_show", str(run.id))
        call_command("everystep_cancel", str(run.id))
    assert strays == []
    assert str(run.id) in capsys.readouterr().out
    assert get_run(run.id).status == "cancelled"


@override_settings(EVERYSTEP_DATABASE="nowhere")
def test_an_unknown_alias_is_system_check_e006():
    """A name that is no DATABASES alias is reported, and everystep keeps "default"."""
    assert [e.id for e in check_settings() if "EVERYSTEP_DATABASE" in e.msg] == ["everystep.E006"]
    assert conf.database() == "default"
