"""Migrations and the read-only admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from everystep import schedule
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def test_models_and_migrations_agree():
    """makemigrations --check finds nothing to write for everystep."""
    call_command("makemigrations", "everystep", "--check", "--dry-run", verbosity=0)


def test_admin_shows_runs_and_steps_read_only(client):
    """Staff can browse runs and steps in the admin but not add, change or delete them."""
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(admin)
    run = schedule(wf.sequential, 1, 2)
    run_due()
    step = Step.objects.filter(workflow=run).first()
    assert client.get("/admin/everystep/workflow/").status_code == 200
    page = client.get(f"/admin/everystep/workflow/{run.id}/change/")
    assert page.status_code == 200
    assert b"tests.testapp.workflows.add" in page.content
    assert client.get(f"/admin/everystep/step/{step.pk}/change/").status_code == 200
    assert client.get("/admin/everystep/workflow/add/").status_code == 403
    assert client.get(f"/admin/everystep/workflow/{run.id}/delete/").status_code == 403
    posted = client.post(f"/admin/everystep/workflow/{run.id}/change/", {"name": "x"})
    assert posted.status_code == 403
    run.refresh_from_db()
    assert run.name == "tests.testapp.workflows.sequential"


def test_the_admin_page_of_a_big_run_lists_its_first_steps_only(client):
    """A run of 3,000 steps with big results: its admin page lists the first 50, each
    value cut, and links the step list for the rest (issue 41: every step inline made an
    11 MB page); text that would reorder the page (U+202E) is shown escaped."""
    from django.utils import timezone

    from everystep.admin import STEPS_SHOWN

    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    run = Workflow.objects.create(name="big", status="completed", args=[])
    now = timezone.now()
    Step.objects.bulk_create(
        (
            Step(
                workflow=run,
                step_id=str(i),
                name="big.step",
                status="done",
                result="\u202e" + "y" * 3_000,
                started_at=now,
                finished_at=now,
            )
            for i in range(1, 3_001)
        ),
        batch_size=500,
    )
    page = client.get(f"/admin/everystep/workflow/{run.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert len(html) < 200_000, len(html)
    assert html.count("big.step") == STEPS_SHOWN
    assert "\u202e" not in html and "\\u202e" in html
    assert f"/admin/everystep/step/?q={run.id}" in html
