"""Durable sleeps, delayed starts and events, driven in this process by ``run_due``
(which, like a worker, claims only runs that are due)."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from everystep import schedule, send
from everystep.errors import EverystepError
from everystep.models import Event, Step, Workflow
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from everystep.testing import run_due
from tests.testapp import wait_workflows as ww
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def wait_until_due(run: Workflow) -> None:
    due = fresh(run).due_at
    assert due is not None
    time.sleep(max((due - timezone.now()).total_seconds(), 0) + 0.01)


def executions(run: Workflow, label: str) -> int:
    return Execution.objects.filter(run_id=run.id, step=label).count()


def test_a_sleep_releases_the_run_until_its_wake_time():
    run = schedule(ww.napper, 0.5)
    run_due()
    slept = fresh(run)
    assert (slept.status, slept.claimed_by, slept.claim_token) == ("scheduled", None, None)
    sleep_step = Step.objects.get(workflow=run, step_id="2")
    assert (sleep_step.name, sleep_step.status) == ("everystep.sleep", "done")
    wake = slept.due_at
    assert wake > timezone.now()
    run_due()  # not due yet: nothing happens
    assert fresh(run).status == "scheduled"
    assert executions(run, "after") == 0
    wait_until_due(run)
    run_due()
    done = fresh(run)
    assert done.status == "completed"
    before, after = (datetime.fromisoformat(stamp) for stamp in done.result)
    assert after - before >= timedelta(seconds=0.5)
    assert executions(run, "before") == 1, "the step before the sleep ran once"


def test_sleep_until_a_past_time_returns_at_once():
    run = schedule(ww.nap_until, (timezone.now() - timedelta(minutes=1)).isoformat())
    run_due()
    assert fresh(run).status == "completed"


def test_a_delayed_start_is_not_claimed_early_and_rolls_back_with_its_transaction():
    later = schedule(ww.right_away, 1, delay=timedelta(minutes=5))
    at = schedule(ww.right_away, 2, at=timezone.now() + timedelta(seconds=0.3))
    run_due()
    assert fresh(later).status == fresh(at).status == "scheduled"
    assert fresh(later).due_at > timezone.now() + timedelta(minutes=4)
    wait_until_due(at)
    run_due()
    assert fresh(at).status == "completed"
    assert fresh(later).status == "scheduled"
    with pytest.raises(RuntimeError), transaction.atomic():
        doomed = schedule(ww.right_away, 3, delay=1)
        raise RuntimeError("roll back")
    assert not Workflow.objects.filter(id=doomed.id).exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"delay": -1}, "must not be negative"),
        ({"delay": "soon"}, "timedelta or a number of seconds"),
        ({"at": "tomorrow"}, "must be a datetime"),
        ({"at": timezone.now(), "delay": 1}, "not both"),
    ],
)
def test_schedule_refuses_bad_times(kwargs, message):
    with pytest.raises((EverystepError, TypeError), match=message):
        schedule(ww.right_away, 1, **kwargs)
    assert not Workflow.objects.exists()


def test_an_event_sent_while_the_run_waits_wakes_it():
    run = schedule(ww.approval, 1, None)
    run_due()
    waiting = fresh(run)
    assert (waiting.status, waiting.due_at, waiting.waiting_for) == ("scheduled", None, "approval")
    assert Step.objects.get(workflow=run, step_id="2").status == "started"
    assert send(run.id, "approval", {"by": "ann"}) is True
    assert fresh(run).due_at <= timezone.now()
    run_due()
    done = fresh(run)
    assert done.status == "completed"
    assert done.waiting_for is None, "a claim clears what the run waited for"
    assert done.result == {"order": 1, "outcome": "approved", "decision": {"by": "ann"}}
    wait_step = Step.objects.get(workflow=run, step_id="2")
    assert (wait_step.status, wait_step.result) == ("done", {"by": "ann"})
    assert executions(run, "ask-1") == 1


def test_an_event_sent_before_the_wait_is_kept_and_the_first_payload_wins():
    run = schedule(ww.approval, 2, 60)
    assert send(run.id, "approval", "first") is True
    assert send(run.id, "approval", "second") is False
    assert Event.objects.filter(workflow=run).count() == 1
    run_due()
    assert fresh(run).result["decision"] == "first"


def test_a_wait_times_out_durably():
    run = schedule(ww.approval, 3, 0.3)
    run_due()
    assert fresh(run).status == "scheduled"
    wait_until_due(run)
    run_due()
    done = fresh(run)
    assert done.result == {"order": 3, "outcome": "expired"}
    wait_step = Step.objects.get(workflow=run, step_id="2")
    assert wait_step.status == "failed"
    assert wait_step.error["type"] == "everystep.errors.WaitTimeout"
    with pytest.raises(EverystepError, match="completed"):
        send(run.id, "approval", "too late")


def test_send_refuses_unknown_and_malformed_runs_and_bad_names():
    with pytest.raises(EverystepError, match="no run with id"):
        send("0190f0f0-0000-7000-8000-000000000000", "approval")
    with pytest.raises(EverystepError, match="not a run id"):
        send("nope", "approval")
    run = schedule(ww.approval, 4, None)
    with pytest.raises(EverystepError, match="event name"):
        send(run.id, "")
    with pytest.raises(EverystepError, match="cannot serialize"):
        send(run.id, "approval", object())
    assert not Event.objects.exists()


def test_a_fork_with_a_waiting_branch_and_a_sleeping_branch():
    run = schedule(ww.fork_waits, 0.3, 60)
    run_due()
    first = fresh(run)
    assert (first.status, first.waiting_for) == ("scheduled", "go")
    assert first.due_at <= timezone.now() + timedelta(seconds=0.3)
    wait_until_due(run)
    run_due()  # the sleep ends; the other branch still waits, until its deadline
    second = fresh(run)
    assert second.status == "scheduled"
    assert second.due_at > timezone.now() + timedelta(seconds=50)
    assert executions(run, "slept") == 1
    send(run.id, "go", 7)
    run_due()
    done = fresh(run)
    assert done.status == "completed"
    assert done.result == [7, "slept", "joined"]
    assert executions(run, "slept") == 1, "the branch that slept is served, not re-run"


def test_a_sleeping_run_can_be_cancelled():
    run = schedule(ww.napper, 60)
    run_due()
    cancel_run(str(run.id), actor=Actor("test", "test"))
    assert fresh(run).status == "cancelled"
    with pytest.raises(EverystepError):
        send(run.id, "approval")


def test_an_event_name_no_database_stores_is_refused():
    run = schedule(ww.approval, 5, None)
    with pytest.raises(EverystepError, match="NUL"):
        send(run.id, "appro\x00val")
    assert not Event.objects.exists()


def test_a_repeated_send_does_not_push_a_woken_run_back():
    """A webhook retried: the run woken by the first send keeps its place."""
    run = schedule(ww.approval, 6, None)
    run_due()
    assert send(run.id, "approval", 1) is True
    woken = fresh(run).due_at
    time.sleep(0.01)
    assert send(run.id, "approval", 2) is False
    assert fresh(run).due_at == woken


def test_the_log_words_a_sleep_and_an_event_wait_as_the_commands_do(caplog):
    """A run released at a sleep logs "sleeps until T"; at wait_for with a timeout,
    "waits for event NAME until T"; without one, "waits for event NAME"."""
    napping, timed, open_ended = (
        schedule(ww.napper, 60),
        schedule(ww.approval, 4, 60),
        schedule(ww.approval, 5, None),
    )
    with caplog.at_level(logging.INFO, logger="everystep.run"):
        run_due()
    lines = {
        record.run_id: record.getMessage().split(") ", 1)[1]
        for record in caplog.records
        if getattr(record, "event", "") == "run.waiting"
    }
    due = {run.id: fresh(run).due_at for run in (napping, timed)}
    assert lines == {
        str(napping.id): f"sleeps until {due[napping.id].isoformat()}",
        str(timed.id): f"waits for event approval until {due[timed.id].isoformat()}",
        str(open_ended.id): "waits for event approval",
    }
