"""Bulk actions from the UI that are too large for one request (issue 39): the POST
hands them to a background run of everystep itself (``everystep.bulk_action``), which
acts batch by batch, counts up the action's one audit entry, stops when cancelled,
resumes after a crash, and is started once however many times its form is sent."""

from __future__ import annotations

import html as htmllib
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep import schedule, signals
from everystep.builtins import bulk_action
from everystep.models import AuditEntry, Status, Workflow, uuid7
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from everystep.testing import crash_at, run_due
from everystep.ui import bulk as ui_bulk
from tests.staff import staff_user
from tests.testapp import recovery_workflows as rwf
from tests.workers import worker_process

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "bulk.bg"


def make_runs(count: int, name: str = NAME) -> None:
    """``count`` scheduled runs, due tomorrow (so no test worker takes them), written a
    few thousand rows per statement."""
    later = timezone.now() + timedelta(days=1)
    Workflow.objects.bulk_create(
        (Workflow(id=uuid7(), name=name, args=[], due_at=later) for _ in range(count)),
        batch_size=2000,
    )


def tally(name: str = NAME) -> dict[str, int]:
    """How many runs of ``name`` are in each status."""
    rows = Workflow.objects.filter(name=name).values_list("status", flat=True)
    counted: dict[str, int] = {}
    for status in rows.iterator():
        counted[status] = counted.get(status, 0) + 1
    return counted


def operator(client: Client, *perms: str) -> None:
    client.force_login(staff_user(*perms))


def confirm_page(client: Client, action: str, **filters: str) -> tuple[str, str, str]:
    """The confirm page's text, the URL its form posts to, and the form's confirmation."""
    query = "&".join(f"{key}={value}" for key, value in {"action": action, **filters}.items())
    page = client.get(f"{reverse('everystep:bulk')}?{query}").content.decode()
    (confirm,) = re.findall(r'name="confirm" value="([0-9a-f]{32})"', page)
    (post,) = re.findall(r'<form method="post" action="([^"]+)"', page)
    text = htmllib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page)))
    return text, htmllib.unescape(post), confirm


def background_runs() -> list[Workflow]:
    return list(Workflow.objects.filter(name=bulk_action.NAME).order_by("id"))


def bulk_entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=f"bulk_{action}").order_by("id"))


def handed_to(response: Any) -> UUID:
    """The background run the POST's redirect names."""
    assert response.status_code == 302, response
    (run_id,) = re.findall(r"background=([0-9a-f-]{36})", response["Location"])
    return UUID(run_id)


def test_a_bulk_cancel_of_100000_runs_returns_at_once_and_runs_in_the_background(client):
    """100,000 matching runs: the POST acts on none of them and answers within a second,
    handing the action to one everystep.bulk_action run (on the runs list, linked from
    the notice) with one audit entry; that run cancels every one of them batch by batch,
    the entry counts 100,000, and a run created after the POST is left alone."""
    make_runs(100_000)
    operator(client, "cancel_workflow")
    text, post, confirm = confirm_page(client, "cancel", workflow=NAME)
    assert "Cancel more than 10,000 runs?" in text and "a background run" in text
    began = time.monotonic()
    response = client.post(post, {"confirm": confirm})
    took = time.monotonic() - began
    run_id = handed_to(response)
    assert tally() == {Status.SCHEDULED: 100_000}, "nothing is done inside the request"
    assert took < 1.0, f"the POST took {took:.2f} s"
    (run,) = background_runs()
    assert (run.id, run.status) == (run_id, Status.SCHEDULED)
    (entry,) = bulk_entries("cancel")
    assert (entry.count, entry.actor, entry.via) == (0, "operator", "ui")
    assert entry.filter == {"workflow": NAME} and entry.detail["run"] == str(run_id)
    notice = client.get(response["Location"]).content.decode()
    assert f'href="{reverse("everystep:run", args=[run_id])}"' in notice
    listed = client.get(f"{reverse('everystep:runs')}?workflow={bulk_action.NAME}")
    assert str(run_id) in listed.content.decode()
    make_runs(1)  # created after the POST: not the action's

    run_due()
    run.refresh_from_db()
    assert run.status == Status.COMPLETED, run.error
    assert run.result["count"] == 100_000
    assert tally() == {Status.CANCELLED: 100_000, Status.SCHEDULED: 1}
    (entry,) = bulk_entries("cancel")
    assert entry.count == 100_000 and len(entry.run_ids) == 100
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["bulk_cancel"]
    # 100 full batches of 1,000, then one that finds the end.
    assert run.steps.count() == 101


@pytest.fixture
def small_limit(monkeypatch):
    """The UI hands more than 5 runs to the background, so a few dozen runs show it."""
    monkeypatch.setattr(ui_bulk, "INLINE_LIMIT", 5)


def test_cancelling_the_background_run_stops_it_at_the_next_batch(client, small_limit):
    """The background run cancelled while its first batch commits takes no other batch:
    the runs of that batch are cancelled and counted in the entry, the rest are left as
    they were, and the run ends cancelled."""
    make_runs(50)
    operator(client, "cancel_workflow")
    run = bulk_action.hand_over(
        "cancel", bulk.RunFilter(workflow=NAME), Actor("operator", "ui"), batch_size=10
    )

    def cancel_after_first_batch(*, run_id: UUID, step_id: str, **_: Any) -> None:
        # Heard in the batch's transaction: the cancel commits with the batch, as an
        # operator's cancel landing between two batches would.
        if run_id == run.id and step_id == "1":
            cancel_run(str(run.id), actor=Actor("operator", "ui"))

    signals.step_recorded.connect(cancel_after_first_batch)
    try:
        run_due()
    finally:
        signals.step_recorded.disconnect(cancel_after_first_batch)
    run.refresh_from_db()
    assert run.status == Status.CANCELLED
    assert tally() == {Status.CANCELLED: 10, Status.SCHEDULED: 40}
    (entry,) = bulk_entries("cancel")
    assert entry.count == 10
    assert list(run.steps.values_list("step_id", flat=True)) == ["1"]


def test_a_crash_inside_a_batch_resumes_with_that_batch_and_counts_each_run_once():
    """A worker dying in the second batch's body, before its record: the batch's
    transaction rolls back, the next pass does it again, and every run is cancelled and
    counted once."""
    make_runs(25)
    run = bulk_action.hand_over(
        "cancel", bulk.RunFilter(workflow=NAME), Actor("operator", "ui"), batch_size=10
    )
    with crash_at("after_body", "2") as crash:
        run_due()
    assert crash.fired == ["2"]
    assert tally() == {Status.CANCELLED: 10, Status.SCHEDULED: 15}
    assert bulk_entries("cancel")[0].count == 10
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result["count"]) == (Status.COMPLETED, 25)
    assert tally() == {Status.CANCELLED: 25}
    (entry,) = bulk_entries("cancel")
    assert entry.count == 25


def test_the_same_post_twice_starts_one_background_run(client, small_limit):
    """The same confirmation sent twice (a double click, a reload): one background run,
    one audit entry, and the second POST goes back to the first one's run; a fresh
    confirmation is a new action."""
    make_runs(20)
    operator(client, "cancel_workflow")
    _, post, confirm = confirm_page(client, "cancel", workflow=NAME)
    first = handed_to(client.post(post, {"confirm": confirm}))
    second = handed_to(client.post(post, {"confirm": confirm}))
    assert first == second
    assert [run.id for run in background_runs()] == [first]
    assert len(bulk_entries("cancel")) == 1
    run_due()
    assert tally() == {Status.CANCELLED: 20}
    assert bulk_entries("cancel")[0].count == 20
    again = handed_to(client.post(post, {"confirm": confirm}))
    assert again == first and len(bulk_entries("cancel")) == 1
    make_runs(6)
    _, post, fresh = confirm_page(client, "cancel", workflow=NAME)
    assert fresh != confirm
    assert handed_to(client.post(post, {"confirm": fresh})) != first
    assert len(background_runs()) == 2 and len(bulk_entries("cancel")) == 2


def test_the_same_inline_post_twice_acts_once(client):
    """Under the inline limit the request acts itself; the same form sent twice forks
    each run once, with one audit entry, and the second POST says what the first did."""
    rwf.BROKEN.add("charge")
    originals = [schedule(rwf.checkout, order, 100) for order in (1, 2, 3)]
    run_due()
    rwf.BROKEN.clear()
    operator(client, "fork_workflow")
    _, post, confirm = confirm_page(client, "fork", status="failed")
    first = client.post(post, {"confirm": confirm})
    second = client.post(post, {"confirm": confirm})
    assert "count=3" in first["Location"] and "count=3" in second["Location"]
    forks = Workflow.objects.filter(forked_from__in=[run.id for run in originals])
    assert forks.count() == 3
    (entry,) = bulk_entries("fork")
    assert entry.count == 3 and "run" not in entry.detail
    assert not background_runs()


def test_a_background_bulk_fork_forks_each_run_once(client, small_limit):
    """Over the limit a bulk fork runs in the background too: each finished run forked
    once, the entry counting the forks; a fork batch done again (a crash before its
    record) forks no run twice and counts nothing twice."""
    rwf.BROKEN.add("charge")
    originals = [schedule(rwf.checkout, order, 100) for order in range(8)]
    run_due()
    rwf.BROKEN.clear()
    operator(client, "fork_workflow")
    _, post, confirm = confirm_page(client, "fork", status="failed")
    run_id = handed_to(client.post(post, {"confirm": confirm}))
    with crash_at("after_body", "1"):
        run_due(max_passes=1)
    forks = Workflow.objects.filter(forked_from__in=[run.id for run in originals])
    assert forks.count() == 8, "the batch's forks committed one by one"
    run_due()
    run = Workflow.objects.get(id=run_id)
    assert run.status == Status.COMPLETED, run.error
    assert (run.result["count"], run.result["refused"]) == (8, 0)
    assert forks.count() == 8
    (entry,) = bulk_entries("fork")
    assert entry.count == 8


def test_a_fork_batch_done_again_forks_nothing_more():
    """``fork_runs`` called twice over the same batch (what a replay after a crash before
    its record does): the second forks nothing and leaves the entry's count alone."""
    rwf.BROKEN.add("charge")
    originals = [schedule(rwf.checkout, order, 100) for order in (1, 2)]
    run_due()
    rwf.BROKEN.clear()
    run_filter = bulk.RunFilter(status=Status.FAILED)
    entry = bulk.open_entry("fork", Actor("operator", "ui"), run_filter)
    arguments = (run_filter.as_json(), str(uuid7()), None, 10, entry.id, "base")
    assert bulk_action.fork_runs(*arguments)["count"] == 2
    assert bulk_action.fork_runs(*arguments)["count"] == 2
    assert Workflow.objects.filter(forked_from__in=[r.id for r in originals]).count() == 2
    entry.refresh_from_db()
    assert entry.count == 2


def test_two_hand_overs_of_one_confirmation_make_one_run_and_one_entry():
    """What two simultaneous POSTs of one form come to once both have passed the UI's
    look-up: the run's idempotency key lets one run in, and the loser's audit entry is
    rolled back with its insert."""
    make_runs(3)
    actor, run_filter = Actor("operator", "ui"), bulk.RunFilter(workflow=NAME)
    first = bulk_action.hand_over("cancel", run_filter, actor, confirmation="everystep.test:1")
    second = bulk_action.hand_over("cancel", run_filter, actor, confirmation="everystep.test:1")
    assert first.id == second.id and len(background_runs()) == 1
    (entry,) = bulk_entries("cancel")
    assert entry.detail == {"confirmation": "everystep.test:1", "run": str(first.id)}


def test_a_post_without_a_confirmation_is_bounded_too(client, small_limit):
    """A POST that carries no confirmation (a script, a page from before) is not
    refused, and is bounded all the same: over the limit it goes to the background."""
    make_runs(20)
    operator(client, "cancel_workflow")
    _, post, _ = confirm_page(client, "cancel", workflow=NAME)
    handed_to(client.post(post))
    assert tally() == {Status.SCHEDULED: 20}
    run_due()
    assert tally() == {Status.CANCELLED: 20}


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[None]:
    """A real worker subprocess (``everystep_worker``), stopped with SIGTERM."""
    with worker_process("bulk-bg", ["--pool", "2", "--poll", "0.05"], tmp_path / "worker.log"):
        yield


def test_a_worker_process_resolves_and_runs_the_built_in_workflow(client, small_limit, worker):
    """A worker started on its own (everystep_worker) knows everystep.bulk_action from
    the app's loading and takes the UI's background action to its end."""
    make_runs(60)
    operator(client, "cancel_workflow")
    _, post, confirm = confirm_page(client, "cancel", workflow=NAME)
    run_id = handed_to(client.post(post, {"confirm": confirm}))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = Workflow.objects.get(id=run_id)
        if run.status not in (Status.SCHEDULED, Status.RUNNING):
            break
        time.sleep(0.05)
    assert (run.status, run.result) == (
        Status.COMPLETED,
        {"action": "cancel", "count": 60, "refused": 0, "reasons": []},
    )
    assert tally() == {Status.CANCELLED: 60}
    assert bulk_entries("cancel")[0].count == 60
