"""Durable sleeps and events with real worker processes: a waiting run holds no slot,
wakes on time, and survives the worker being killed while it waits."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from everystep import schedule, send
from everystep.models import Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import wait_workflows as ww
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]

FAST = ("--poll", "0.1")


def status_of(run: Workflow) -> str:
    return Workflow.objects.get(id=run.id).status


def sleeping(run: Workflow) -> bool:
    row = Workflow.objects.get(id=run.id)
    return row.status == "scheduled" and Step.objects.filter(workflow=run, step_id="2").exists()


def ran_at(run: Workflow, label: str):
    return Execution.objects.get(run_id=run.id, step=label).started_at


def test_a_sleeping_run_holds_no_slot_and_wakes_on_time(workers):
    """Pool 1: while one run sleeps 4 s, other runs complete; it wakes within a poll."""
    napper = schedule(ww.napper, 4.0)
    proc = workers("single", "--pool", "1", *FAST)
    wait_until(lambda: sleeping(napper), 60, "the run to sleep")
    wake = Workflow.objects.get(id=napper.id).due_at
    others = [schedule(ww.right_away, i) for i in range(3)]
    wait_until(lambda: all(status_of(run) == "completed" for run in others), 60, "the other runs")
    finished = [ran_at(run, "right-away") for run in others]
    assert max(finished) < wake, "the other runs completed while the first one slept"
    wait_until(lambda: status_of(napper) == "completed", 60, "the sleeper to wake")
    after = ran_at(napper, "after")
    assert after >= wake
    # Within one poll of its time (0.1 s), with a wide margin for a loaded machine.
    assert after - wake < timedelta(seconds=1.5)
    assert Execution.objects.filter(run_id=napper.id, step="before").count() == 1
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_killing_the_worker_mid_sleep_does_not_reset_the_clock(workers):
    napper = schedule(ww.napper, 4.0)
    first = workers("first", *FAST)
    wait_until(lambda: sleeping(napper), 60, "the run to sleep")
    wake = Workflow.objects.get(id=napper.id).due_at
    first.signal(signal.SIGKILL)
    first.wait(30)
    second = workers("second", *FAST)
    wait_until(lambda: status_of(napper) == "completed", 60, "the sleeper to wake")
    assert Step.objects.get(workflow=napper, step_id="2").result is not None
    after = ran_at(napper, "after")
    assert wake <= after < wake + timedelta(seconds=1.5), "woke at the recorded time"
    assert Execution.objects.filter(run_id=napper.id, step="before").count() == 1
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0


def test_an_event_sent_while_no_worker_runs_is_not_lost(workers):
    """The worker dies while the run waits; the event is committed; a new worker takes it."""
    run = schedule(ww.approval, 7, None)
    first = workers("first", *FAST)
    wait_until(lambda: Workflow.objects.get(id=run.id).waiting_for == "approval", 60, "the wait")
    first.signal(signal.SIGKILL)
    first.wait(30)
    assert send(run.id, "approval", {"by": "bob"}) is True
    second = workers("second", *FAST)
    wait_until(lambda: status_of(run) == "completed", 60, "the run to complete")
    assert Workflow.objects.get(id=run.id).result == {
        "order": 7,
        "outcome": "approved",
        "decision": {"by": "bob"},
    }
    assert Execution.objects.filter(run_id=run.id, step="ask-7").count() == 1
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0


def test_an_event_wakes_a_waiting_run_in_a_live_worker(workers):
    run = schedule(ww.approval, 8, 600)
    proc = workers("live", *FAST)
    wait_until(lambda: Workflow.objects.get(id=run.id).waiting_for == "approval", 60, "the wait")
    send(run.id, "approval", "yes")
    wait_until(lambda: status_of(run) == "completed", 30, "the run to complete")
    assert Workflow.objects.get(id=run.id).result["decision"] == "yes"
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
