"""The audit trail: one entry per operator's write action (commands and UI), written in
the action's transaction, pruned with its run or by age, listed on the audit page and in
the read-only admin."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import everystep
from everystep import schedule
from everystep.errors import EverystepError
from everystep.models import AuditEntry, Runner, Status, Step, Workflow
from everystep.store import audit
from everystep.store.audit import Actor
from everystep.store.runners import requeue_orphans, requeue_runner
from everystep.store.runs import cancel_run, requeue_one
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

AUDIT = "/everystep/audit/"
OPERATOR = Actor("operator", "ui")


def staff(*perms: str, name: str = "operator") -> User:
    return staff_user(*perms, name=name)


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def make_run(status: str = Status.SCHEDULED, **fields: Any) -> Workflow:
    return Workflow.objects.create(
        name="tests.testapp.workflows.payment", args=[1], status=status, **fields
    )


def the_entry() -> AuditEntry:
    (entry,) = AuditEntry.objects.all()
    return entry


def act(client: Client, run: Workflow, **data: str):
    return client.post(reverse("everystep:run-action", args=[run.id]), data)


# --- commands ---------------------------------------------------------------------------


def test_cancel_command_writes_one_entry_naming_the_run():
    """everystep_cancel: one "cancel" entry by the OS user via the command, on the run."""
    run = schedule(wf.sequential, 1, 1)
    command("everystep_cancel", str(run.id))
    entry = the_entry()
    assert (entry.action, entry.via, entry.run_id, entry.count) == (
        "cancel",
        "everystep_cancel",
        run.id,
        1,
    )
    assert entry.actor.startswith("command (")
    run.refresh_from_db()
    assert f"cancelled by {entry.actor} (everystep_cancel)" in run.error["message"]


def test_a_refused_cancel_writes_no_entry():
    """Cancelling a finished run is refused and leaves no entry (same transaction)."""
    run = make_run(Status.COMPLETED)
    with pytest.raises(EverystepError, match="only unfinished runs"):
        cancel_run(str(run.id), actor=OPERATOR, reason="why not")
    assert not AuditEntry.objects.exists()


def test_an_entry_rolls_back_with_its_action():
    """An action rolled back by its caller's transaction takes its entry with it."""
    from django.db import transaction

    run = make_run(Status.RUNNING, claimed_by="w")
    with pytest.raises(RuntimeError), transaction.atomic():
        requeue_one(str(run.id), actor=OPERATOR)
        raise RuntimeError("the caller changes its mind")
    assert not AuditEntry.objects.exists()
    assert Workflow.objects.get(id=run.id).status == Status.RUNNING


def test_requeue_command_writes_one_entry():
    """everystep_requeue: one "requeue" entry on the run."""
    run = make_run(Status.RUNNING, claimed_by="w")
    command("everystep_requeue", str(run.id))
    entry = the_entry()
    assert (entry.action, entry.via, entry.run_id) == ("requeue", "everystep_requeue", run.id)


def test_resolve_command_writes_an_entry_and_settled_by(blocked_run):
    """everystep_resolve_step: a "resolve" entry with the step and mode and the reason;
    the settled step says who settled it."""
    command("everystep_resolve_step", str(blocked_run.id), "2", "--result", "1", "--reason", "bank")
    entry = the_entry()
    assert (entry.action, entry.run_id, entry.reason) == ("resolve", blocked_run.id, "bank")
    assert entry.detail == {"step_id": "2", "mode": "result"}
    step = Step.objects.get(workflow=blocked_run, step_id="2")
    assert step.settled_by == f"{entry.actor} (everystep_resolve_step)"


def test_resolve_discard_keeps_the_step_in_the_entry(blocked_run):
    """--discard deletes the step row: the entry keeps its id and the mode."""
    command("everystep_resolve_step", str(blocked_run.id), "2", "--discard")
    assert not Step.objects.filter(workflow=blocked_run, step_id="2").exists()
    assert the_entry().detail == {"step_id": "2", "mode": "discard"}


def test_a_refused_resolve_writes_no_entry(blocked_run):
    """An unknown step is refused: the run stays blocked and no entry is written."""
    with pytest.raises(CommandError, match="has no step"):
        command("everystep_resolve_step", str(blocked_run.id), "9", "--discard")
    assert Workflow.objects.get(id=blocked_run.id).status == Status.BLOCKED
    assert not AuditEntry.objects.exists()


def test_send_command_writes_an_entry_also_for_a_repeat():
    """everystep_send: a "send" entry naming the event; a repeated send is recorded as
    one that changed nothing."""
    run = schedule(wf.sequential, 1, 1)
    command("everystep_send", str(run.id), "approval", "--reason", "ticket 7")
    command("everystep_send", str(run.id), "approval")
    first, second = AuditEntry.objects.order_by("id")
    assert (first.action, first.run_id, first.reason) == ("send", run.id, "ticket 7")
    assert first.detail == {"event": "approval"}
    assert second.detail == {"event": "approval", "already_sent": True}


def test_the_public_send_writes_no_entry():
    """everystep.send() is the application's own call, not an operator's: no entry."""
    run = schedule(wf.sequential, 1, 1)
    assert everystep.send(run.id, "approval")
    assert not AuditEntry.objects.exists()


def test_requeue_runner_command_writes_one_entry_with_the_runs():
    """everystep_requeue_runner: one entry listing the runs requeued and the runner."""
    held = {make_run(Status.RUNNING, claimed_by="gone").id for _ in range(3)}
    command("everystep_requeue_runner", "gone", "--reason", "node lost")
    entry = the_entry()
    assert (entry.action, entry.via, entry.count) == (
        "requeue_runner",
        "everystep_requeue_runner",
        3,
    )
    assert {str(run_id) for run_id in held} == set(entry.run_ids)
    assert entry.run_id is None and entry.detail == {"runner": "gone"}
    assert entry.reason == "node lost"


def test_a_workers_own_recovery_writes_no_entry():
    """Orphan recovery, and requeue_runner without an actor, are not operators' acts."""
    Runner.objects.create(
        name="dead",
        boot_id="00000000-0000-0000-0000-000000000001",
        pool_size=1,
        started_at=timezone.now(),
        last_seen=timezone.now() - timedelta(hours=1),
    )
    make_run(Status.RUNNING, claimed_by="dead")
    make_run(Status.RUNNING, claimed_by="other")
    assert len(requeue_orphans(60)) == 1
    assert len(requeue_runner("other")) == 1
    assert not AuditEntry.objects.exists()


# --- pruning ----------------------------------------------------------------------------


def old_run(days_ago: float) -> Workflow:
    run = make_run(Status.COMPLETED)
    Workflow.objects.filter(id=run.id).update(
        completed_at=timezone.now() - timedelta(days=days_ago)
    )
    return run


def aged(entry: AuditEntry, days: float) -> AuditEntry:
    AuditEntry.objects.filter(id=entry.id).update(at=timezone.now() - timedelta(days=days))
    return entry


def test_prune_takes_entries_with_their_runs_and_old_runless_ones_by_age():
    """A pruned run's entries go with it (the ORM's cascade, every database); entries
    naming no single run go once older than the cut-off; the prune is one entry whose
    count adds up every batch."""
    doomed = [old_run(40) for _ in range(5)]
    kept = old_run(1)
    for run in [*doomed, kept]:
        audit.record("cancel", OPERATOR, run=run.id)
    old_bulk = aged(audit.record("bulk_cancel", OPERATOR, filter={"status": "failed"}), 40)
    new_bulk = audit.record("requeue_runner", OPERATOR, run_ids=[doomed[0].id])
    out = command("everystep_prune", "--older-than", "30", "--batch-size", "2", "--reason", "q3")
    assert "deleted 5 run(s)" in out and "deleted 1 audit entr(ies)" in out
    left = AuditEntry.objects.order_by("id")
    assert [entry.action for entry in left] == ["cancel", "requeue_runner", "prune"]
    assert left[0].run_id == kept.id and left[1].id == new_bulk.id
    assert not AuditEntry.objects.filter(id=old_bulk.id).exists()
    prune = left[2]
    assert (prune.count, prune.via, prune.reason) == (5, "everystep_prune", "q3")
    assert prune.filter == {
        "older_than_days": 30.0,
        "statuses": sorted(["cancelled", "completed", "failed", "stopped"]),
    }


def test_a_dry_run_prune_writes_and_deletes_nothing():
    """--dry-run reports the entries it would delete and writes no entry of its own."""
    aged(audit.record("bulk_cancel", OPERATOR, filter={"status": "failed"}), 40)
    out = command("everystep_prune", "--older-than", "30", "--dry-run")
    assert "and 1 audit entr(ies) naming no single run" in out
    assert AuditEntry.objects.count() == 1


# --- UI actions -------------------------------------------------------------------------


def test_ui_cancel_is_recorded_with_the_user_and_the_reason(client):
    """A UI action's entry names the Django user, via the UI, with the form's reason."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff("cancel_workflow"))
    page = client.get(reverse("everystep:run", args=[run.id])).content.decode()
    assert '<label>Reason <input type="text" name="reason"' in page
    assert act(client, run, action="cancel", reason="duplicate order").status_code == 302
    entry = the_entry()
    assert (entry.action, entry.actor, entry.via) == ("cancel", "operator", "ui")
    assert (entry.run_id, entry.reason) == (run.id, "duplicate order")


def test_ui_requeue_send_and_runner_requeue_are_recorded(client):
    """Requeue, send and a runner's requeue from the UI each leave their entry."""
    client.force_login(staff("requeue_workflow", "send_event"))
    running = make_run(Status.RUNNING, claimed_by="gone")
    act(client, running, action="requeue")
    waiting = schedule(wf.sequential, 1, 1)
    act(client, waiting, action="send", name="go", payload="1")
    make_run(Status.RUNNING, claimed_by="gone")
    client.post(reverse("everystep:runner-requeue"), {"runner": "gone"})
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "actor", "via"))
    assert entries == [
        ("requeue", "operator", "ui"),
        ("send", "operator", "ui"),
        ("requeue_runner", "operator", "ui"),
    ]


def test_ui_resolve_is_recorded_and_settles_by_the_user(client, blocked_run):
    """Settling from the UI: the entry and the step's settled_by name the user."""
    client.force_login(staff("resolve_workflow"))
    act(client, blocked_run, action="resolve", step_id="2", mode="error", value="no")
    assert the_entry().detail == {"step_id": "2", "mode": "error"}
    assert Step.objects.get(workflow=blocked_run, step_id="2").settled_by == "operator (UI)"


def test_ui_fork_opens_the_new_run_and_is_recorded(client):
    """Fork from the UI: a new run forked from the original, its page next with a
    notice, and the fork's entry on the original naming the new run."""
    run = schedule(wf.sequential, 1, 1)
    run_due()
    client.force_login(staff("fork_workflow"))
    response = act(client, run, action="fork", from_step="2")
    fork = Workflow.objects.get(forked_from=run)
    assert fork.forked_from_step == "2"
    assert response.status_code == 302
    assert response["Location"] == reverse("everystep:run", args=[fork.id]) + "?done=fork"
    entry = the_entry()
    assert (entry.action, entry.run_id, entry.actor) == ("fork", run.id, "operator")
    assert entry.detail["fork"] == str(fork.id)
    assert "Forked" in client.get(response["Location"]).content.decode()


def test_ui_fork_is_refused_for_a_live_run_and_needs_the_permission(client):
    """A run not finished is refused with the reason and no entry; without
    everystep.fork_workflow the action is 403."""
    run = schedule(wf.sequential, 1, 1)
    client.force_login(staff("fork_workflow"))
    response = act(client, run, action="fork")
    assert response["Location"].endswith("?error=not-finished")
    assert "only finished runs" in client.get(response["Location"]).content.decode()
    other = Client()
    other.force_login(staff(name="viewer"))
    assert act(other, run, action="fork").status_code == 403
    assert not AuditEntry.objects.exists()
    assert Workflow.objects.count() == 1


# --- the audit page ---------------------------------------------------------------------


def reasons(html: str) -> list[str]:
    return re.findall(r"<td>(reason-\d+)</td>", html)


def test_the_page_lists_newest_first_fifty_a_page(client):
    """Newest first, 50 a page, "Older" links the next page until the last."""
    for n in range(120):
        audit.record("cancel", OPERATOR, reason=f"reason-{n:03d}")
    client.force_login(staff())
    html = client.get(AUDIT).content.decode()
    assert reasons(html) == [f"reason-{n:03d}" for n in range(119, 69, -1)]
    seen = reasons(html)
    while (older := re.search(r'rel="next" href="([^"]+)"', html)) is not None:
        html = client.get(older.group(1).replace("&amp;", "&")).content.decode()
        seen += reasons(html)
    assert seen == [f"reason-{n:03d}" for n in range(119, -1, -1)]
    assert 'aria-current="page">Audit<' in html


def test_the_page_links_runs_shows_filters_and_escapes_everything(client):
    """Runs link to their pages, a filter shows with its count, and operator text is
    escaped."""
    run = make_run()
    audit.record("cancel", Actor("<b>eve</b>", "ui"), run=run.id, reason="<script>x</script>")
    audit.record("bulk_cancel", OPERATOR, filter={"status": ["failed"], "workflow": "a<b"}, count=7)
    client.force_login(staff())
    html = client.get(AUDIT).content.decode()
    assert f'href="{reverse("everystep:run", args=[run.id])}"' in html
    assert "matching status=failed, workflow=a&lt;b: 7 run(s)" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert "&lt;b&gt;eve&lt;/b&gt;" in html


def test_bidi_controls_in_operator_text_are_shown_escaped(client):
    """An actor, a reason and a filter holding U+202E or an isolate would show the rest of
    their row reordered: the page writes them as escapes (issue 39)."""
    audit.record("cancel", Actor("eve\u202e", "ui"), reason="refund \u202egpj.exe")
    audit.record("bulk_cancel", OPERATOR, filter={"workflow": "a\u2066b"}, count=1)
    client.force_login(staff())
    html = client.get(AUDIT).content.decode()
    assert "\u202e" not in html and "\u2066" not in html
    assert "refund \\u202egpj.exe" in html and "eve\\u202e" in html
    assert "workflow=a\\u2066b" in html


def test_a_bad_cursor_reads_the_first_page_with_a_notice(client):
    """?before= that is not an entry id shows the newest entries and says so."""
    audit.record("cancel", OPERATOR, reason="reason-1")
    client.force_login(staff())
    html = client.get(AUDIT + "?before=x%00y").content.decode()
    assert reasons(html) == ["reason-1"] and "not a page of the trail" in html


def test_the_page_is_for_staff_even_when_the_ui_is_public(client, settings):
    """Anonymous and non-staff visitors go to the login, also with the public opt-out:
    public mode opens the pages about runs, and the trail names people (issue 39)."""
    audit.record("cancel", OPERATOR, reason="reason-1")
    login = reverse("admin:login") + "?next="
    settings.EVERYSTEP_UI_PUBLIC = True
    anonymous = Client().get(AUDIT)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(login)
    assert Client().get(reverse("everystep:runs")).status_code == 200  # runs stay public
    client.force_login(User.objects.create_user("plain", password="pw"))
    assert client.get(AUDIT)["Location"].startswith(login)
    settings.EVERYSTEP_UI_PUBLIC = False
    assert client.get(AUDIT)["Location"].startswith(login)
    client.force_login(staff_user(name="auditor"))
    html = client.get(AUDIT).content.decode()
    assert reasons(html) == ["reason-1"]


def test_the_admin_lists_entries_read_only(client):
    """The admin lists the entries but offers no add, change or delete."""
    entry = audit.record("cancel", OPERATOR, reason="reason-1")
    client.force_login(User.objects.create_superuser("root", password="pw"))
    listing = client.get("/admin/everystep/auditentry/")
    assert listing.status_code == 200 and "operator" in listing.content.decode()
    assert client.get("/admin/everystep/auditentry/add/").status_code == 403
    change = f"/admin/everystep/auditentry/{entry.id}/change/"
    client.post(change, {"reason": "rewritten"})
    assert (
        client.post(f"/admin/everystep/auditentry/{entry.id}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert AuditEntry.objects.get(id=entry.id).reason == "reason-1"
