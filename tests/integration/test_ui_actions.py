"""The UI's write actions: permissions, CSRF, logging, and their effect on runs; and
requeueing a dead runner's runs from the runners page."""

from __future__ import annotations

import html as htmllib
import logging
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep import schedule
from everystep.models import Runner, Status, Workflow
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("several")]


def staff(*perms: str, name: str = "operator") -> User:
    return staff_user(*perms, name=name)


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


# --- a dead runner's runs --------------------------------------------------------------


REQUEUE = reverse("everystep:runner-requeue")
RUNNERS = reverse("everystep:runners")


def make_runner(name: str, *, age: float) -> Runner:
    now = timezone.now()
    return Runner.objects.create(
        name=name,
        boot_id=uuid.uuid4(),
        pool_size=4,
        started_at=now - timedelta(hours=2),
        last_seen=now - timedelta(seconds=age),
    )


@pytest.fixture
def dead() -> dict[str, Any]:
    """Runner "dead" silent for an hour, holding two running runs (and a finished one);
    runner "alive" beating, holding one."""
    make_runner("dead", age=3600)
    make_runner("alive", age=1)
    return {
        "held": [make_run(status=Status.RUNNING, claimed_by="dead") for _ in range(2)],
        "done": make_run(status=Status.COMPLETED, claimed_by="dead"),
        "alive": make_run(status=Status.RUNNING, claimed_by="alive"),
    }


def make_run(**fields: Any) -> Workflow:
    return Workflow.objects.create(name="wf.a", args=[1], **fields)


def notices(html: str) -> list[str]:
    return [
        htmllib.unescape(text) for text in re.findall(r'class="es-notice"[^>]*>(.*?)</p>', html)
    ]


def statuses(*runs: Workflow) -> list[str]:
    return [Workflow.objects.get(pk=run.pk).status for run in runs]


def runner_row(html: str, name: str) -> str:
    start = html.index(f"<td>{name}</td>")
    return html[start : html.index("</tr>", start)]


def test_dead_runner_stands_out_with_a_requeue_button(client, dead):
    """A runner silent past the orphan timeout that holds runs says "dead" in words, and
    the requeue button is offered to users with the requeue permission only."""
    client.force_login(staff("requeue_workflow"))
    html = client.get(RUNNERS).content.decode()
    assert "dead, holds runs" in runner_row(html, "dead")
    assert "Requeue this runner" in runner_row(html, "dead")
    assert "dead, holds runs" not in runner_row(html, "alive")
    assert "Requeue this runner" not in runner_row(html, "alive")
    plain = Client()
    plain.force_login(staff(name="viewer"))
    html = plain.get(RUNNERS).content.decode()
    assert "dead, holds runs" in runner_row(html, "dead")
    assert "Requeue this runner" not in html


def test_requeue_runner_puts_its_runs_back_and_logs_it(client, dead, caplog):
    """The action requeues the runs the dead runner holds (not its finished one, not
    another runner's), logs it with the user, and says so on the runners page."""
    client.force_login(staff("requeue_workflow"))
    with caplog.at_level(logging.INFO, logger="everystep.ui"):
        response = client.post(REQUEUE, {"runner": "dead"})
    assert response.status_code == 302
    assert response["Location"].startswith(RUNNERS + "?")
    assert statuses(*dead["held"]) == ["scheduled", "scheduled"]
    assert statuses(dead["done"], dead["alive"]) == ["completed", "running"]
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "ui.requeue_runner"]
    assert record.user == "operator" and record.runner == "dead"
    assert sorted(record.run_ids) == sorted(str(run.id) for run in dead["held"])
    html = client.get(response["Location"]).content.decode()
    assert "Done: requeued 2 run(s) held by &#x27;dead&#x27;." in html
    assert "dead, holds runs" not in html


def test_requeue_runner_without_heartbeat_row(client):
    """Runs held under a name with no heartbeat row at all are requeued too."""
    held = make_run(status=Status.RUNNING, claimed_by="ghost")
    client.force_login(staff("requeue_workflow"))
    assert "Requeue this runner" in runner_row(client.get(RUNNERS).content.decode(), "ghost")
    assert client.post(REQUEUE, {"runner": "ghost"}).status_code == 302
    assert statuses(held) == ["scheduled"]


def test_requeue_runner_refuses_a_live_runner(client, dead):
    """A runner whose heartbeat is recent keeps its runs; the page says why."""
    client.force_login(staff("requeue_workflow"))
    response = client.post(REQUEUE, {"runner": "alive"})
    assert response.status_code == 302
    assert statuses(dead["alive"]) == ["running"]
    html = client.get(response["Location"]).content.decode()
    assert "may be alive" in " ".join(notices(html))


@pytest.mark.parametrize("name", ["", "a\x00b", "x" * 100_000])
def test_requeue_runner_bad_names_redirect_with_an_error(client, dead, name):
    """An empty name, a NUL or a huge name: a redirect with an error, never a 500."""
    client.force_login(staff("requeue_workflow"))
    response = client.post(REQUEUE, {"runner": name})
    assert response.status_code == 302
    assert len(response["Location"]) < 2_000
    html = client.get(response["Location"]).content.decode()
    assert any(n.startswith("Error:") for n in notices(html)), notices(html)
    assert statuses(*dead["held"]) == ["running", "running"]


def test_requeue_runner_needs_the_permission(client, dead):
    """Staff without everystep.requeue_workflow get 403; the runs stay running."""
    client.force_login(staff())
    assert client.post(REQUEUE, {"runner": "dead"}).status_code == 403
    assert statuses(*dead["held"]) == ["running", "running"]


def test_requeue_runner_refuses_anonymous_users_even_when_the_ui_is_public(client, dead, settings):
    """EVERYSTEP_UI_PUBLIC opens the pages, never this action."""
    settings.EVERYSTEP_UI_PUBLIC = True
    assert client.post(REQUEUE, {"runner": "dead"}).status_code == 403
    assert statuses(*dead["held"]) == ["running", "running"]


def test_requeue_runner_needs_a_csrf_token(dead):
    """Without a valid CSRF token the POST is refused with 403."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("requeue_workflow"))
    assert client.post(REQUEUE, {"runner": "dead"}).status_code == 403
    assert statuses(*dead["held"]) == ["running", "running"]
    # The token the page hands out works: the refusal above was the missing token.
    html = client.get(RUNNERS).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token is not None
    data = {"runner": "dead", "csrfmiddlewaretoken": token.group(1)}
    assert client.post(REQUEUE, data).status_code == 302
    assert statuses(*dead["held"]) == ["scheduled", "scheduled"]


def test_requeue_runner_is_post_only(client, dead):
    """GET (and any other method but POST) gets 405."""
    client.force_login(staff("requeue_workflow"))
    assert client.get(REQUEUE, {"runner": "dead"}).status_code == 405
    assert client.put(REQUEUE).status_code == 405
    assert statuses(*dead["held"]) == ["running", "running"]


ACTION_PERMISSIONS = {
    "cancel": "cancel_workflow",
    "requeue": "requeue_workflow",
    "resolve": "resolve_workflow",
    "send": "send_event",
    "fork": "fork_workflow",
}


@pytest.mark.parametrize("action", sorted(ACTION_PERMISSIONS))
def test_an_action_needs_the_view_permission_too(client, settings, action):
    """A user holding an action's permission but not ``view_workflow`` cannot act on runs
    they cannot see (issue 39): the run's action, the bulk action and a runner's requeue
    are 403, public UI or not, and change nothing."""
    settings.EVERYSTEP_UI_PUBLIC = True  # the pages open to all; the actions are not
    runs = {
        "cancel": make_run(status=Status.SCHEDULED),
        "requeue": make_run(status=Status.RUNNING, claimed_by="gone"),
        "resolve": make_run(status=Status.BLOCKED),
        "send": make_run(status=Status.SCHEDULED),
        "fork": make_run(status=Status.FAILED),
    }
    before = statuses(*runs.values())
    client.force_login(staff_user(ACTION_PERMISSIONS[action], name="blind", view=False))
    form = {"action": action, "step_id": "1", "mode": "discard", "name": "e", "reason": "r"}
    assert act(client, runs[action], **form).status_code == 403
    bulk = reverse("everystep:bulk")
    if action in ("cancel", "requeue", "fork"):
        query = f"?action={action}&workflow=wf.a"
        assert client.get(bulk + query).status_code == 403
        assert client.post(bulk.replace("/bulk/", "/bulk/do/") + query).status_code == 403
    if action == "requeue":
        assert client.post(REQUEUE, {"runner": "gone"}).status_code == 403
    assert statuses(*runs.values()) == before
    page = client.get(reverse("everystep:run", args=[runs[action].id])).content.decode()
    assert 'name="action"' not in page  # and the page offers no action button


def test_the_ui_log_records_are_safe_under_any_formatter(client, caplog):
    """A username, a reason and an event name holding a newline, an escape code and a
    bidi override reach the records of ``everystep.ui`` escaped (issue 39, 41): a
    project's own formatter, which prints a record as it is, cannot be made to forge a
    line or recolour a terminal."""
    forged = "ev\n2026-01-01 INFO forged line \x1b[31mred\u202e"
    run = schedule(wf.sequential, 1, 1)
    user = staff_user("cancel_workflow", "send_event", "requeue_workflow", name=forged[:150])
    client.force_login(user)
    with caplog.at_level(logging.INFO, logger="everystep.ui"):
        act(client, run, action="send", name="x\ny\x1b", payload="", reason=forged)
        act(client, run, action="requeue", reason=forged)  # refused: not running
        client.post(
            reverse("everystep:bulk").replace("/bulk/", "/bulk/do/")
            + "?action=cancel&workflow="
            + forged[:20]
        )
        act(client, run, action="cancel", reason=forged)
    plain = logging.Formatter("%(levelname)s %(message)s %(user)s")
    records = [record for record in caplog.records if record.name == "everystep.ui"]
    assert len(records) >= 3
    for record in records:
        text = record.getMessage() + " ".join(str(value) for value in vars(record).values())
        line = plain.format(record) if hasattr(record, "user") else record.getMessage()
        for bad in ("\n", "\x1b", "\u202e"):
            assert bad not in line and bad not in record.getMessage(), (bad, line)
        assert "\x1b" not in text
