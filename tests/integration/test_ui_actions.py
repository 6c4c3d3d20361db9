"""The UI's write actions: permissions, CSRF, logging, and their effect on runs."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from everystep import schedule
from everystep.models import Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def staff(*perms: str, name: str = "operator") -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return User.objects.get(pk=user.pk)  # fresh: no cached permissions


def act(client: Client, run: Workflow, **data: str):
    return client.post(reverse("everystep:run-action", args=[run.id]), data)


def test_cancel_needs_the_permission(client):
    """A staff user without everystep.cancel_workflow gets 403 and the run is untouched."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff())
    assert act(client, run, action="cancel").status_code == 403
    page = client.get(reverse("everystep:run", args=[run.id])).content.decode()
    assert "Cancel run" not in page
    run.refresh_from_db()
    assert run.status == "scheduled"


def test_cancel_with_permission_is_done_and_logged(client, caplog):
    """With the permission the run is cancelled, and the action is logged with the user."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff("cancel_workflow"))
    page = client.get(reverse("everystep:run", args=[run.id])).content.decode()
    assert "Cancel run" in page and "Requeue" not in page
    with caplog.at_level(logging.INFO, logger="everystep.ui"):
        response = act(client, run, action="cancel")
    assert response.status_code == 302 and "done=cancel" in response["Location"]
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert "operator (UI)" in run.error["message"]
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "ui.cancel"]
    assert record.user == "operator" and record.run_id == str(run.id)


def test_actions_refuse_anonymous_users_even_when_the_ui_is_public(client, settings):
    """EVERYSTEP_UI_PUBLIC opens the pages, never the write actions."""
    settings.EVERYSTEP_UI_PUBLIC = True
    run = schedule(wf.sequential, 1, 1)
    assert client.get(reverse("everystep:run", args=[run.id])).status_code == 200
    assert act(client, run, action="cancel").status_code == 403
    run.refresh_from_db()
    assert run.status == "scheduled"


def test_actions_need_a_csrf_token():
    """A POST without the CSRF token is refused."""
    run = schedule(wf.sequential, 1, 1)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("cancel_workflow"))
    assert act(client, run, action="cancel").status_code == 403
    run.refresh_from_db()
    assert run.status == "scheduled"


def test_actions_are_post_only(client):
    """GET on the action URL is 405."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff("cancel_workflow"))
    assert client.get(reverse("everystep:run-action", args=[run.id])).status_code == 405


def test_requeue_a_running_run(client):
    """Requeue puts a running run back to scheduled; a worker completes it."""
    run = schedule(wf.sequential, 1, 1)
    Workflow.objects.filter(id=run.id).update(status="running", claimed_by="stuck")
    client.force_login(staff("requeue_workflow"))
    assert act(client, run, action="requeue").status_code == 302
    run_due()
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("completed", "everystep-testing")


def test_resolve_a_blocked_run_from_the_ui(client, blocked_run):
    """Settling the uncertain step from the UI requeues the run; the next pass serves it."""
    client.force_login(staff("resolve_workflow"))
    page = client.get(reverse("everystep:run", args=[blocked_run.id])).content.decode()
    assert "Settle and requeue" in page and "<option>2</option>" in page
    bad = act(client, blocked_run, action="resolve", step_id="2", mode="result", value="{no")
    assert "error=" in bad["Location"]
    blocked_run.refresh_from_db()
    assert blocked_run.status == "blocked"
    ok = act(
        client,
        blocked_run,
        action="resolve",
        step_id="2",
        mode="result",
        value='{"charged": 100, "by": "hand"}',
    )
    assert "done=resolve" in ok["Location"]
    run_due()
    blocked_run.refresh_from_db()
    assert blocked_run.status == "completed"
    assert blocked_run.result == {"charged": 100, "by": "hand"}
