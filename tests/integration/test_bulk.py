"""Bulk actions by filter: everystep_cancel / everystep_requeue with the runs list's
filters instead of an id (dry run, batches, the audit entry, bad flags), bulk fork, and
the UI's confirm page and its POST."""

from __future__ import annotations

import html as htmllib
import re
import uuid
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep import schedule
from everystep.errors import EverystepError
from everystep.models import AuditEntry, Runner, Status, Workflow
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import recovery_workflows as rwf

pytestmark = pytest.mark.django_db(transaction=True)

UNFINISHED = (Status.SCHEDULED, Status.RUNNING, Status.BLOCKED)


def id_at(moment: datetime) -> uuid.UUID:
    """A UUIDv7 made at ``moment`` (random below its millisecond time)."""
    ms = int(moment.timestamp() * 1000)
    rest = uuid.uuid4().int
    rand_a, rand_b = (rest >> 62) & 0xFFF, rest & ((1 << 62) - 1)
    return uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)


def make(
    status: str = Status.SCHEDULED,
    name: str = "bulk.a",
    at: datetime | None = None,
    **fields: Any,
) -> Workflow:
    """A run row as the filters see it (no body runs)."""
    made = {"id": id_at(at)} if at is not None else {}
    if status == Status.RUNNING:
        fields.setdefault("claimed_by", "runner-1")
    return Workflow.objects.create(name=name, status=status, args=[1], **made, **fields)


def statuses() -> dict[uuid.UUID, str]:
    return dict(Workflow.objects.values_list("id", "status"))


def command(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().strip()


def entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


# --- commands ------------------------------------------------------------------------


def test_dry_run_counts_the_runs_the_action_would_change_and_changes_nothing():
    """--dry-run prints how many matching runs the action would change; no row moves and
    no audit entry is written."""
    for status in (Status.SCHEDULED, Status.RUNNING, Status.BLOCKED, Status.COMPLETED):
        make(status)
    make(Status.SCHEDULED, name="bulk.b")
    before = statuses()
    assert command("everystep_cancel", "--workflow", "bulk.a", "--dry-run").startswith(
        "3 runs match (filter workflow=bulk.a)"
    )
    assert command("everystep_requeue", "--workflow", "bulk.a", "--dry-run").startswith(
        "1 run match"
    )
    assert statuses() == before
    assert not AuditEntry.objects.exists()


def test_cancel_by_filter_touches_exactly_the_matching_unfinished_runs():
    """Only the unfinished runs of the workflow are cancelled; finished ones and other
    workflows' runs are left exactly as they were."""
    targets = [make(status) for status in UNFINISHED]
    done = make(Status.COMPLETED)
    other = make(Status.SCHEDULED, name="bulk.b")
    output = command("everystep_cancel", "--workflow", "bulk.a", "--reason", "bad deploy")
    assert output == "cancelled 3 runs (filter workflow=bulk.a)"
    after = statuses()
    assert {after[run.id] for run in targets} == {Status.CANCELLED}
    assert (after[done.id], after[other.id]) == (Status.COMPLETED, Status.SCHEDULED)
    cancelled = Workflow.objects.get(id=targets[0].id)
    assert "everystep_cancel" in cancelled.error["message"] and cancelled.completed_at
    (entry,) = entries("bulk_cancel")
    assert entry.filter == {"workflow": "bulk.a"} and entry.count == 3
    assert entry.via == "everystep_cancel" and entry.reason == "bad deploy"
    assert sorted(entry.run_ids) == sorted(str(run.id) for run in targets)


def test_requeue_by_filter_touches_only_running_runs():
    """Requeue by filter puts the matching running runs back to scheduled, their claim
    released; scheduled and blocked runs of the filter are skipped."""
    running = [make(Status.RUNNING, claimed_by="gone") for _ in range(3)]
    elsewhere = make(Status.RUNNING, claimed_by="alive")
    blocked = make(Status.BLOCKED, claimed_by="gone")
    output = command("everystep_requeue", "--runner", "gone")
    assert output == "requeued 3 runs (filter runner=gone)"
    rows = {run.id: run for run in Workflow.objects.all()}
    assert {(rows[r.id].status, rows[r.id].claimed_by) for r in running} == {
        (Status.SCHEDULED, None)
    }
    assert rows[elsewhere.id].status == Status.RUNNING
    assert rows[blocked.id].status == Status.BLOCKED
    (entry,) = entries("bulk_requeue")
    assert entry.filter == {"runner": "gone"} and entry.count == 3


def beating(name: str, seconds_ago: float) -> Runner:
    """A heartbeat row for runner ``name``, last heard ``seconds_ago``."""
    now = timezone.now()
    return Runner.objects.create(
        name=name,
        boot_id=uuid.uuid4(),
        pool_size=4,
        started_at=now - timedelta(hours=1),
        last_seen=now - timedelta(seconds=seconds_ago),
    )


def test_requeue_by_filter_leaves_the_runs_of_a_runner_still_beating():
    """The runners page's rule holds for a bulk requeue too (issue 41): a runner heard from
    within the orphan timeout may be alive and would carry on with runs handed to other
    workers, so its runs stay; a silent runner's are requeued, in the same action."""
    beating("alive", seconds_ago=1)
    beating("silent", seconds_ago=3600)
    live = make(Status.RUNNING, claimed_by="alive")
    dead = make(Status.RUNNING, claimed_by="silent")
    assert command("everystep_requeue", "--runner", "alive", "--dry-run").startswith("0 runs match")
    assert (
        command("everystep_requeue", "--runner", "alive") == "requeued 0 runs (filter runner=alive)"
    )
    assert bulk.count(bulk.RunFilter(status=Status.RUNNING), "requeue") == 1
    assert bulk.bulk_requeue(bulk.RunFilter(status=Status.RUNNING), Actor.command("test")) == 1
    assert statuses()[live.id] == Status.RUNNING
    assert statuses()[dead.id] == Status.SCHEDULED


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--workflow", "bulk.b"], {"b"}),
        (["--status", "running"], {"running"}),
        (["--created-after", "2026-03-10T12:00"], {"noon", "late"}),
        (["--created-before", "2026-03-10T12:00"], {"early", "a", "b", "running", "child"}),
        (["--created-after", "2026-03-10", "--created-before", "2026-03-11"], {"early", "noon"}),
        (["--runner", "runner-9"], {"running"}),
        (["--status", "scheduled", "--workflow", "bulk.a"], {"a", "early", "noon", "late"}),
    ],
)
def test_each_filter_flag(flags: list[str], expected: set[str]):
    """Each flag narrows the runs as the runs page does (times in the project's zone,
    created-after inclusive, created-before exclusive), and they combine."""
    day = timezone.make_aware(datetime(2026, 3, 10))
    runs = {
        "a": make(at=day - timedelta(days=2)),
        "b": make(name="bulk.b", at=day - timedelta(days=2)),
        "running": make(Status.RUNNING, claimed_by="runner-9", at=day - timedelta(days=2)),
        "early": make(at=day + timedelta(hours=11, minutes=59)),
        "noon": make(at=day + timedelta(hours=12)),
        "late": make(at=day + timedelta(days=1, hours=1)),
    }
    runs["child"] = make(name="bulk.c", parent=runs["b"], at=day - timedelta(days=1))
    names = {run.id: name for name, run in runs.items()}
    command("everystep_cancel", *flags)
    cancelled = {names[run_id] for run_id, status in statuses().items() if status == "cancelled"}
    # A cancelled parent takes its unfinished child with it.
    assert cancelled == expected | ({"child"} if "b" in expected else set())


def test_parent_flag_cancels_the_runs_a_run_started():
    """--parent matches the children of one run, not the run itself."""
    parent = make(Status.RUNNING)
    children = [make(name="bulk.child", parent=parent) for _ in range(3)]
    output = command("everystep_cancel", "--parent", str(parent.id))
    assert output == f"cancelled 3 runs (filter parent={parent.id})"
    after = statuses()
    assert after[parent.id] == Status.RUNNING
    assert {after[child.id] for child in children} == {Status.CANCELLED}


def test_batches_of_7_over_30_runs():
    """Batch size 7 over 30 runs: five batches (7, 7, 7, 7, 2) in id order, every run
    cancelled once, and the one audit entry counted up to 30."""
    made = sorted(make().id for _ in range(30))
    run_filter = bulk.RunFilter(workflow="bulk.a")
    batches = list(bulk.for_each_batch(run_filter, 7))
    assert [len(batch) for batch in batches] == [7, 7, 7, 7, 2]
    assert [run_id for batch in batches for run_id in batch] == made
    output = command("everystep_cancel", "--workflow", "bulk.a", "--batch-size", "7")
    assert output == "cancelled 30 runs (filter workflow=bulk.a)"
    assert set(statuses().values()) == {Status.CANCELLED}
    (entry,) = entries("bulk_cancel")
    assert entry.count == 30 and len(entry.run_ids) == 30


def test_a_batch_skips_runs_that_stopped_matching():
    """A run whose status changed after it was counted is skipped, not an error: a
    finished run is never cancelled, a requeue takes only runs still running."""
    runs = [make(Status.RUNNING) for _ in range(5)]
    run_filter = bulk.RunFilter(status=Status.RUNNING)
    assert bulk.count(run_filter, "requeue") == 5
    Workflow.objects.filter(id__in=[runs[1].id, runs[3].id]).update(status=Status.COMPLETED)
    assert bulk.bulk_requeue(run_filter, Actor.command("test"), batch_size=2) == 3
    after = statuses()
    assert [after[run.id] for run in runs] == [
        Status.SCHEDULED,
        Status.COMPLETED,
        Status.SCHEDULED,
        Status.COMPLETED,
        Status.SCHEDULED,
    ]


def test_nothing_matching_is_still_on_record():
    """A bulk action that matches no run changes nothing, says so, and is audited with a
    count of 0."""
    make(Status.COMPLETED)
    assert command("everystep_cancel", "--workflow", "bulk.a") == (
        "cancelled 0 runs (filter workflow=bulk.a)"
    )
    (entry,) = entries("bulk_cancel")
    assert entry.count == 0 and entry.run_ids == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a run id, or filter flags"),
        (["--dry-run"], "a bulk action needs a filter"),
        (["--status", "done"], "unknown status 'done'"),
        (["--workflow", ""], "--workflow is empty"),
        (["--workflow", "a\x00b"], "NUL"),
        (["--created-after", "yesterday"], "--created-after 'yesterday' is not a time"),
        (["--created-before", "2026-13-01"], "--created-before '2026-13-01' is not a time"),
        (["--created-after", "2026-03-10", "--created-before", "2026-03-09"], "must be earlier"),
        (["--parent", "nope"], "'nope' is not a run id"),
        (["--status", "scheduled", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--status", "scheduled", "--batch-size", "99999"], "--batch-size must be at most"),
        (["RUN", "--status", "scheduled"], "not both"),
        (["RUN", "--dry-run"], "not both"),
    ],
)
def test_bad_flags_are_clear_errors_that_change_nothing(args: list[str], message: str):
    """Each mistake is a CommandError saying what is wrong; no run changes and nothing
    is audited."""
    run = make()
    args = [str(run.id) if arg == "RUN" else arg for arg in args]
    for name in ("everystep_cancel", "everystep_requeue"):
        with pytest.raises(CommandError, match=re.escape(message)):
            command(name, *args)
    assert statuses() == {run.id: Status.SCHEDULED}
    assert not AuditEntry.objects.exists()


def test_a_run_id_alone_behaves_as_before():
    """RUN_ID without flags cancels that one run, with the message it always had."""
    run = make()
    assert command("everystep_cancel", str(run.id)) == f"run {run.id} (bulk.a) cancelled"
    with pytest.raises(CommandError, match="only unfinished runs can be cancelled"):
        command("everystep_cancel", str(run.id))


def test_an_empty_filter_is_refused_by_the_store():
    """RunFilter() with no filter at all is refused: "every run" needs an explicit
    choice, such as a status."""
    with pytest.raises(EverystepError, match="needs a filter"):
        bulk.RunFilter()
    with pytest.raises(EverystepError, match="unknown status"):
        bulk.RunFilter(status="nope")


def test_bulk_fork_forks_the_finished_runs_and_counts_the_refused():
    """Bulk fork forks each finished run that matches (default from-step: the failed
    one), leaves unfinished runs alone, counts a run fork_run refuses, and writes one
    bulk_fork entry."""
    from everystep.replays.bulk_fork import bulk_fork

    rwf.BROKEN.add("charge")
    failed = [schedule(rwf.checkout, order, 100) for order in (1, 2)]
    run_due()
    rwf.BROKEN.clear()
    unknown = make(Status.FAILED, name="bulk.not_installed")
    pending = schedule(rwf.checkout, 3, 100)
    result = bulk_fork(bulk.RunFilter(status=Status.FAILED), Actor.command("test"))
    assert (result.forked, result.refused) == (2, 1)
    assert str(unknown.id) in result.reasons[0]
    forks = Workflow.objects.filter(forked_from__in=[run.id for run in failed])
    assert forks.count() == 2 and set(forks.values_list("forked_from_step", flat=True)) == {"2"}
    assert not Workflow.objects.filter(forked_from=pending).exists()
    (entry,) = entries("bulk_fork")
    assert entry.count == 2 and entry.filter == {"status": "failed"}
    assert not entries("fork")


# --- the UI --------------------------------------------------------------------------


def staff(*perms: str, name: str = "operator") -> User:
    return staff_user(*perms, name=name)


def page_text(response: Any) -> str:
    """The page's text: tags dropped, white space collapsed."""
    text = re.sub(r"<[^>]+>", "", response.content.decode())
    return htmllib.unescape(re.sub(r"\s+", " ", text))


def confirm_url(action: str, **filters: str) -> str:
    query = "&".join(f"{key}={value}" for key, value in {"action": action, **filters}.items())
    return f"{reverse('everystep:bulk')}?{query}"


def test_the_runs_page_offers_bulk_actions_only_on_a_filtered_list_with_permission(client):
    """No filter, or no permission: no bulk links. A filtered list shows the ones the
    user may take."""
    make()
    client.force_login(staff("cancel_workflow"))
    runs = reverse("everystep:runs")
    assert "runs/bulk/" not in client.get(runs).content.decode()
    filtered = page_text(client.get(f"{runs}?workflow=bulk.a"))
    assert "Cancel the runs matching this filter" in filtered
    assert "Requeue the runs" not in filtered and "Fork the runs" not in filtered
    client.force_login(staff(name="viewer"))
    assert "runs/bulk/" not in client.get(f"{runs}?workflow=bulk.a").content.decode()


def test_confirm_page_shows_the_count_and_the_post_does_it(client):
    """The confirm page counts the runs the action would change and changes nothing; the
    POST cancels them in batches and goes back to the list, which says how many."""
    targets = [make() for _ in range(4)]
    make(Status.COMPLETED)
    make(name="bulk.b")
    client.force_login(staff("cancel_workflow"))
    page = page_text(client.get(confirm_url("cancel", workflow="bulk.a")))
    assert "Cancel 4 runs?" in page and "workflow = bulk.a" in page
    assert set(statuses().values()) == {Status.SCHEDULED, Status.COMPLETED}
    response = client.post(confirm_url("cancel", workflow="bulk.a").replace("/bulk/", "/bulk/do/"))
    assert response.status_code == 302
    assert "bulk=cancel" in response["Location"] and "count=4" in response["Location"]
    after = statuses()
    assert {after[run.id] for run in targets} == {Status.CANCELLED}
    assert sorted(after.values()).count(Status.SCHEDULED) == 1
    (entry,) = entries("bulk_cancel")
    assert (entry.count, entry.via, entry.actor) == (4, "ui", "operator")
    assert "Cancelled 4 runs." in page_text(client.get(response["Location"]))


def test_confirm_page_caps_its_count(client, monkeypatch):
    """Above the cap the page says "more than N" instead of counting every run."""
    from everystep.ui import bulk as ui_bulk

    monkeypatch.setattr(ui_bulk, "COUNT_CAP", 3)
    for _ in range(5):
        make()
    client.force_login(staff("cancel_workflow"))
    page = page_text(client.get(confirm_url("cancel", status="scheduled")))
    assert "more than 3 runs" in page


def test_bulk_ui_needs_permission_staff_and_csrf(client, settings):
    """Without the permission the confirm page and the POST are 403; anonymous users
    are refused even with a public UI; a POST without the CSRF token is refused."""
    make()
    post = confirm_url("cancel", workflow="bulk.a").replace("/bulk/", "/bulk/do/")
    client.force_login(staff("requeue_workflow"))
    assert client.get(confirm_url("cancel", workflow="bulk.a")).status_code == 403
    assert client.post(post).status_code == 403
    client.logout()
    settings.EVERYSTEP_UI_PUBLIC = True
    assert client.post(post).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff("cancel_workflow", name="strict"))
    assert strict.post(post).status_code == 403
    assert set(statuses().values()) == {Status.SCHEDULED}
    assert client.get(post).status_code == 405


def test_the_ui_refuses_a_filter_it_cannot_honour(client):
    """No filter, a search, or a filter the page ignored (a bad time) would widen the
    action: the confirm page says why and offers no button; the POST changes nothing."""
    make()
    client.force_login(staff("cancel_workflow"))
    widening = (
        {},
        {"workflow": "bulk.a", "q": "abc"},
        {"status": "scheduled", "created_after": "x"},
    )
    for filters in widening:
        page = client.get(confirm_url("cancel", **filters)).content.decode()
        assert 'method="post"' not in page, filters
        response = client.post(confirm_url("cancel", **filters).replace("/bulk/", "/bulk/do/"))
        assert response.status_code == 302 and "bulk=" not in response["Location"]
    assert set(statuses().values()) == {Status.SCHEDULED}
    assert not AuditEntry.objects.exists()
