"""``run_due(advance=...)``: tests that let days pass without waiting for them. Only the
stored pending times move (``everystep.store.timeshift``); the engine and the claim keep
reading the real clock, so these tests also show that what they read stays consistent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone

from everystep import schedule, send, sleep_until, workflow
from everystep.errors import EverystepError
from everystep.models import Step, Workflow
from everystep.serde import decode
from everystep.testing import run_due
from everystep.times import project_time
from tests.testapp import wait_workflows as ww
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]

DAY = timedelta(days=1)


@workflow(name="tests.testing_clock.sleeps_until")
def sleeps_until(when: datetime) -> str:
    sleep_until(when)
    return "awake"


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def recorded(run: Workflow, step_id: str) -> Step:
    return Step.objects.get(workflow=run, step_id=step_id)


def executions(run: Workflow, label: str) -> int:
    return Execution.objects.filter(run_id=run.id, step=label).count()


def due_in(run: Workflow) -> timedelta:
    due = fresh(run).due_at
    assert due is not None
    return due - timezone.now()


def test_a_sleep_is_over_once_its_duration_is_advanced():
    """A three-day sleep ends on run_due(advance=3 days); the steps around it run once."""
    run = schedule(ww.napper, 3 * 86_400)
    run_due()
    assert fresh(run).status == "scheduled"
    assert executions(run, "after") == 0
    run_due(advance=timedelta(days=3))
    assert fresh(run).status == "completed"
    assert (executions(run, "before"), executions(run, "after")) == (1, 1)


def test_a_partial_advance_leaves_the_rest_of_the_sleep():
    """Advances add up: one day of three leaves two, and the run stays asleep until then."""
    run = schedule(ww.napper, 3 * 86_400)
    run_due()
    run_due(advance=DAY)
    asleep = fresh(run)
    assert asleep.status == "scheduled"
    assert 2 * DAY - timedelta(minutes=5) < due_in(run) <= 2 * DAY
    wake = decode(recorded(run, "2").result)
    assert wake == asleep.due_at, "the sleep's wake time moves with the run's due time"
    run_due(advance=86_400)  # seconds, like sleep() takes
    assert fresh(run).status == "scheduled"
    assert executions(run, "after") == 0
    run_due(advance=DAY)
    assert fresh(run).status == "completed"


def test_sleep_until_moves_by_elapsed_time_across_a_daylight_saving_change():
    """A sleep_until in a zone with DST moves by exactly the advance, and keeps its zone
    (with USE_TZ = False, as naive local time: by the advance on the wall clock)."""
    paris = ZoneInfo("Europe/Paris")
    when = datetime(2099, 4, 15, 12, 0, tzinfo=paris)  # summer time; 30 days before: winter
    run = schedule(sleeps_until, when)
    run_due()
    assert fresh(run).due_at == project_time(when)
    run_due(advance=30 * DAY)
    wake = decode(recorded(run, "1").result)
    assert fresh(run).due_at == wake, "the run's due time moved with the sleep's wake time"
    if settings.USE_TZ:
        assert wake.tzinfo == paris
        assert wake.astimezone(UTC) == when.astimezone(UTC) - 30 * DAY
        assert wake.hour == 11, "one hour earlier on the wall clock: the zone changed offset"
    else:
        assert wake == project_time(when) - 30 * DAY
    run_due(advance=due_in(run))
    done = fresh(run)
    assert (done.status, done.result) == ("completed", "awake")


def test_a_wait_for_times_out_once_its_timeout_is_advanced():
    """wait_for(timeout=7 days) is still waiting after 6, and raises WaitTimeout after 7."""
    run = schedule(ww.approval, 1, 7 * 86_400)
    run_due()
    run_due(advance=6 * DAY)
    assert fresh(run).status == "scheduled"
    assert recorded(run, "2").status == "started"
    assert 1 * DAY - timedelta(minutes=5) < due_in(run) <= 1 * DAY
    run_due(advance=DAY)
    done = fresh(run)
    assert done.result == {"order": 1, "outcome": "expired"}
    wait = recorded(run, "2")
    assert (wait.status, wait.error["type"]) == ("failed", "everystep.errors.WaitTimeout")
    assert executions(run, "apply") == 0


def test_an_event_sent_before_the_advanced_timeout_is_taken():
    """An event sent three days into a seven-day wait wins over the timeout."""
    run = schedule(ww.approval, 2, 7 * 86_400)
    run_due()
    run_due(advance=3 * DAY)
    pending = recorded(run, "2").result
    assert pending["event"] == "approval"
    assert 4 * DAY - timedelta(minutes=5) < decode(pending["deadline"]) - timezone.now() <= 4 * DAY
    send(run.id, "approval", {"by": "ann"})
    run_due()
    done = fresh(run)
    assert done.result == {"order": 2, "outcome": "approved", "decision": {"by": "ann"}}
    assert executions(run, "expired") == 0


def test_a_delayed_start_runs_once_its_delay_is_advanced():
    """schedule(delay=1 hour) starts on an advance of an hour; a later one keeps its wait."""
    soon = schedule(ww.right_away, 1, delay=3_600)
    later = schedule(ww.right_away, 2, at=timezone.now() + timedelta(hours=2))
    passed = run_due(advance=timedelta(hours=1))
    assert [run.id for run in passed] == [soon.id]
    assert fresh(soon).status == "completed"
    assert fresh(later).status == "scheduled"
    assert timedelta(minutes=55) < due_in(later) <= timedelta(hours=1)
    run_due(advance=3_600)
    assert fresh(later).status == "completed"


def test_one_advance_moves_every_pending_time_of_a_run():
    """In a fork, the sleeping branch wakes after 3 days and the waiting one times out at 7;
    the wake time of the sleep that is over stays as it was."""
    run = schedule(ww.fork_waits, 3 * 86_400, 7 * 86_400)
    run_due()
    run_due(advance=3 * DAY)
    assert executions(run, "slept") == 1
    assert fresh(run).status == "scheduled"
    assert 4 * DAY - timedelta(minutes=5) < due_in(run) <= 4 * DAY
    sleep_record = Step.objects.get(workflow=run, name="everystep.sleep")
    run_due(advance=DAY)
    assert fresh(run).status == "scheduled"
    assert 3 * DAY - timedelta(minutes=5) < due_in(run) <= 3 * DAY
    assert Step.objects.get(pk=sleep_record.pk).result == sleep_record.result
    run_due(advance=3 * DAY)
    failed = fresh(run)
    assert (failed.status, failed.error["type"]) == ("failed", "everystep.errors.WaitTimeout")
    assert executions(run, "joined") == 0


def test_only_pending_times_move():
    """Past wake times, finished runs and runs waiting with no timeout keep their times."""
    done = schedule(ww.napper, 60)
    run_due()
    run_due(advance=60)
    assert fresh(done).status == "completed"
    history = recorded(done, "2").result
    waiting = schedule(ww.approval, 3, None)
    run_due()
    due_now = schedule(ww.right_away, 4, delay=0)
    due_at = fresh(due_now).due_at
    run_due(advance=0)  # nothing moves; the due run runs
    assert fresh(due_now).status == "completed"
    run_due(advance=365 * DAY)
    assert recorded(done, "2").result == history
    assert (fresh(waiting).status, fresh(waiting).due_at) == ("scheduled", None)
    assert recorded(waiting, "2").result == {"event": "approval", "deadline": None}
    assert fresh(due_now).due_at == due_at


@pytest.mark.parametrize(
    "advance, message",
    [
        (-1, "must not be negative"),
        (timedelta(seconds=-1), "must not be negative"),
        ("3 days", "timedelta or a number of seconds"),
        (True, "timedelta or a number of seconds"),
        (float("inf"), "timedelta or a number of seconds"),
        (float("nan"), "timedelta or a number of seconds"),
        (1e20, "at most 36525 days"),
        (timedelta(days=36_526), "at most 36525 days"),
    ],
)
def test_run_due_refuses_a_bad_advance(advance: Any, message: str):
    """A bad advance is refused before anything moves or runs."""
    run = schedule(ww.right_away, 5, delay=60)
    due_at = fresh(run).due_at
    with pytest.raises(EverystepError, match=message):
        run_due(advance=advance)
    assert (fresh(run).status, fresh(run).due_at) == ("scheduled", due_at)
