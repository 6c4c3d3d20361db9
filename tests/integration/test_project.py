"""Migrations and the read-only admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from everystep import schedule
from everystep.models import Step
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
