"""Runs of everystep's own workflows (``everystep.bulk_action``) are never forked (issue
50, item 4): refused by ``everystep.fork``, by ``everystep_fork`` with a run id, on the
run page; left out, and said to be, by a bulk fork from the command or the runs list. A
bulk requeue of a bulk action's run resumes that same action under its one entry."""

from __future__ import annotations

import html as htmllib
import re
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import everystep
from everystep import schedule
from everystep.builtins import bulk_action
from everystep.errors import EverystepError
from everystep.models import AuditEntry, Status, Workflow, uuid7
from everystep.replays.bulk_fork import bulk_fork
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import recovery_workflows as rwf

pytestmark = pytest.mark.django_db(transaction=True)

VICTIM = "builtin.victim"
CANCELLER = Actor("canceller", "ui")


def victims(count: int = 3) -> list[Workflow]:
    """Scheduled runs due tomorrow (no test worker takes them), a bulk cancel's targets."""
    later = timezone.now() + timedelta(days=1)
    return [
        Workflow.objects.create(id=uuid7(), name=VICTIM, args=[], due_at=later)
        for _ in range(count)
    ]


def stopped_bulk_cancel() -> Workflow:
    """A background bulk cancel the canceller confirmed, then cancelled before it ran:
    finished, so a fork would be offered if nothing refused it."""
    run = bulk_action.hand_over("cancel", bulk.RunFilter(workflow=VICTIM), CANCELLER)
    assert run is not None
    return cancel_run(str(run.id), actor=CANCELLER)


def scheduled_victims() -> int:
    return Workflow.objects.filter(name=VICTIM, status=Status.SCHEDULED).count()


def cancelled_user_run() -> Workflow:
    """A finished run of a project workflow that a fork accepts."""
    run = schedule(rwf.checkout, 1, 100)
    return cancel_run(str(run.id), actor=CANCELLER)


def command(*args: str) -> str:
    out = StringIO()
    call_command("everystep_fork", *args, stdout=out)
    return out.getvalue()


def forker(client: Client) -> None:
    """Signed in as the issue's user: view and fork, no cancel."""
    client.force_login(staff_user("fork_workflow", name="forker"))


def text(response: Any) -> str:
    page = re.sub(r"<[^>]+>", "", response.content.decode())
    return htmllib.unescape(re.sub(r"\s+", " ", page))


def test_the_api_refuses_to_fork_a_bulk_action_run_and_nothing_is_cancelled():
    """everystep.fork() of a stopped bulk cancel is refused with the reason; no run is
    written, and a worker pass afterwards cancels nothing."""
    targets = victims()
    original = stopped_bulk_cancel()
    with pytest.raises(EverystepError, match="everystep's own and cannot be forked"):
        everystep.fork(original.id)
    run_due()
    assert not Workflow.objects.filter(forked_from=original).exists()
    assert scheduled_victims() == len(targets)
    (entry,) = AuditEntry.objects.filter(action="bulk_cancel")
    assert entry.count == 0


def test_the_command_refuses_a_bulk_action_run_by_id():
    """everystep_fork RUN_ID of a bulk action's run fails with the reason and forks nothing."""
    original = stopped_bulk_cancel()
    with pytest.raises(CommandError, match="start a new bulk action"):
        command(str(original.id))
    assert not Workflow.objects.filter(forked_from=original).exists()


def test_a_bulk_fork_by_filter_leaves_bulk_action_runs_out_and_says_so():
    """everystep_fork with a filter forks the project's runs, leaves everystep's own out,
    and says how many it left out (the dry run too)."""
    user_run = cancelled_user_run()
    original = stopped_bulk_cancel()
    dry = command("--status", "cancelled", "--dry-run")
    assert "1 run match" in dry and "left out 1 run of everystep's own" in dry
    out = command("--status", "cancelled")
    assert "forked 1 run" in out and "left out 1 run of everystep's own" in out
    assert Workflow.objects.filter(forked_from=user_run).count() == 1
    assert not Workflow.objects.filter(forked_from=original).exists()
    result = bulk_fork(bulk.RunFilter(status=Status.CANCELLED), Actor.command("test"))
    assert (result.forked, result.refused, result.skipped) == (1, 0, 1)


def test_the_run_page_offers_no_fork_and_refuses_a_posted_one(client):
    """A bulk action's run page has no fork form; a POSTed fork is refused with the page's
    message, and the stopped action is not taken again."""
    targets = victims()
    original = stopped_bulk_cancel()
    forker(client)
    page = client.get(reverse("everystep:run", args=[original.id])).content.decode()
    assert 'class="es-fork"' not in page
    post = reverse("everystep:run-action", args=[original.id])
    response = client.post(post, {"action": "fork", "confirm": "a" * 32})
    assert response.status_code == 302 and "error=builtin" in response["Location"]
    said = text(client.get(response["Location"]))
    assert "everystep.bulk_action are everystep's own and cannot be forked" in said
    run_due()
    assert not Workflow.objects.filter(forked_from=original).exists()
    assert scheduled_victims() == len(targets)


def test_the_ui_bulk_fork_leaves_bulk_action_runs_out_and_says_so(client):
    """The confirm page of a bulk fork counts the project's runs only and says it leaves
    everystep's own out; after the POST, the runs list says so again."""
    user_run = cancelled_user_run()
    original = stopped_bulk_cancel()
    forker(client)
    confirm = f"{reverse('everystep:bulk')}?action=fork&status=cancelled"
    page = client.get(confirm)
    said = text(page)
    assert "Fork 1 run?" in said
    assert "1 finished run of everystep's own (everystep.bulk_action) left out" in said
    (post,) = re.findall(r'<form method="post" action="([^"]+)"', page.content.decode())
    (nonce,) = re.findall(r'name="confirm" value="([0-9a-f]{32})"', page.content.decode())
    response = client.post(htmllib.unescape(post), {"confirm": nonce})
    assert "skipped=1" in response["Location"]
    listed = text(client.get(response["Location"]))
    assert "Forked 1 run. 1 of everystep's own (everystep.bulk_action) left out" in listed
    assert Workflow.objects.filter(forked_from=user_run).count() == 1
    assert not Workflow.objects.filter(forked_from=original).exists()


def test_a_bulk_requeue_resumes_the_same_bulk_action_under_its_one_entry():
    """A bulk action's run left running by a dead runner, requeued in bulk by another
    operator: a worker resumes that action (the canceller's, as confirmed), counted in
    its one bulk_cancel entry; the requeue has an entry of its own and starts nothing new."""
    targets = victims()
    run = bulk_action.hand_over("cancel", bulk.RunFilter(workflow=VICTIM), CANCELLER)
    assert run is not None
    Workflow.objects.filter(id=run.id).update(status=Status.RUNNING, claimed_by="dead-runner")
    requeuer = Actor("requeuer", "ui")
    assert bulk.bulk_requeue(bulk.RunFilter(workflow=bulk_action.NAME), requeuer) == 1
    run_due()
    run.refresh_from_db()
    assert run.status == Status.COMPLETED
    assert Workflow.objects.filter(name=VICTIM, status=Status.CANCELLED).count() == len(targets)
    (entry,) = AuditEntry.objects.filter(action="bulk_cancel")
    assert (entry.actor, entry.count) == ("canceller", len(targets))
    (requeue,) = AuditEntry.objects.filter(action="bulk_requeue")
    assert (requeue.actor, requeue.count) == ("requeuer", 1)
    assert Workflow.objects.filter(name=bulk_action.NAME).count() == 1
