"""Runs of a name this process's code does not have: which wait for other code and which
fail once as unknown, and how a worker says that some wait (its log line, its gauge).
Real database, this process's code; the two-process version of the story is
``test_two_code_versions``."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from everystep import code_version
from everystep.models import Runner, Status, Workflow
from everystep.testing import run_due
from everystep.worker import carrying
from everystep.worker.worker_state import WorkerOptions, WorkerState

pytestmark = pytest.mark.django_db(transaction=True)


def unknown_run(version: str | None) -> Workflow:
    return Workflow.objects.create(name="elsewhere.only", args=[], code_version=version)


def test_an_unknown_name_fails_once_unless_other_code_scheduled_it():
    """Scheduled by this very code, or by code that did not say (a row written by hand,
    an older release): failed once, as unknown. Scheduled by another version: left due."""
    mine, unsaid, other = (
        unknown_run(code_version.current()),
        unknown_run(None),
        unknown_run("src-other"),
    )
    run_due()
    for run in (mine, unsaid):
        run.refresh_from_db()
        assert run.status == Status.FAILED and "unknown workflow" in run.error["message"]
    other.refresh_from_db()
    assert other.status == Status.SCHEDULED and other.claimed_by is None


def test_a_worker_logs_once_per_name_and_counts_what_it_leaves(caplog):
    """The heartbeat's check: one warning per name no live worker carries, not repeated
    while nothing changes; the gauge's counts; none once the runs are gone."""
    for _ in range(2):
        unknown_run("src-other")
    options = WorkerOptions.resolve(name="checker")
    state = WorkerState(options=options)
    check = carrying.WaitingRuns(state)
    caplog.set_level(logging.WARNING, logger="everystep.worker")
    for _ in range(2):
        check.checked_at -= carrying.CHECK_EVERY
        check.check_if_due()
    lines = [r.getMessage() for r in caplog.records if "wait for code" in r.getMessage()]
    assert lines == [
        f"2 due runs of elsewhere.only wait for code: no live worker carries them (this "
        f"worker runs code {code_version.current()}); start a worker on the code that "
        "scheduled them"
    ]
    assert state.left_for_other_code == {"elsewhere.only": 2}
    # A live worker on the other code carries them: no line, though still counted here.
    caplog.clear()
    check.logged.clear()
    now = timezone.now()
    Runner.objects.create(
        name="other-code",
        boot_id="00000000-0000-0000-0000-000000000001",
        pool_size=1,
        started_at=now,
        last_seen=now,
        code_version="src-other",
        carries=["elsewhere.only"],
    )
    check.checked_at -= carrying.CHECK_EVERY
    check.check_if_due()
    assert not [r for r in caplog.records if "wait for code" in r.getMessage()]
    assert state.left_for_other_code == {"elsewhere.only": 2}
    Workflow.objects.filter(name="elsewhere.only").delete()
    check.checked_at -= carrying.CHECK_EVERY
    check.check_if_due()
    assert state.left_for_other_code == {} and check.logged == {}
