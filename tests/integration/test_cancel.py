"""Cancelling and requeueing single runs (everystep_cancel, everystep_requeue)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from everystep import schedule
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("several")]


def test_cancel_a_scheduled_run_means_it_never_runs():
    """A cancelled scheduled run is final and no worker claims it."""
    run = schedule(wf.sequential, 1, 1)
    call_command("everystep_cancel", str(run.id))
    run_due()
    run.refresh_from_db()
    assert run.status == "cancelled" and run.completed_at is not None
    assert "cancelled by" in run.error["message"]
    assert not Step.objects.filter(workflow=run).exists()


def test_cancel_a_running_run_stops_it_at_the_next_record():
    """Cancelled mid-run: the step in flight ran, its record and every later step did not."""
    run = schedule(wf.self_cancel)
    run_due()
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert list(Step.objects.filter(workflow=run).values_list("step_id", flat=True)) == ["1"]
    assert wf.CALLS["echo:after-cancel"] == 0


def test_cancel_a_blocked_run(blocked_run):
    """A blocked run can be cancelled instead of resolved."""
    call_command("everystep_cancel", str(blocked_run.id))
    blocked_run.refresh_from_db()
    assert blocked_run.status == "cancelled"


def test_cancel_refuses_a_finished_run():
    """A run that already has its outcome cannot be cancelled, and is left as it was."""
    run = schedule(wf.sequential, 1, 1)
    run_due()
    with pytest.raises(CommandError, match="is completed: only unfinished runs"):
        call_command("everystep_cancel", str(run.id))
    with pytest.raises(CommandError, match="no run with id"):
        call_command("everystep_cancel", "00000000-0000-0000-0000-000000000000")
    run.refresh_from_db()
    assert run.status == "completed"


def test_requeue_one_running_run():
    """everystep_requeue puts a running run back to scheduled; a worker then completes it."""
    run = schedule(wf.sequential, 2, 2)
    Workflow.objects.filter(id=run.id).update(status="running", claimed_by="stuck")
    call_command("everystep_requeue", str(run.id))
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("scheduled", None)
    run_due()
    run.refresh_from_db()
    assert run.status == "completed"
    with pytest.raises(CommandError, match="only running runs can be requeued"):
        call_command("everystep_requeue", str(run.id))


def test_cancel_from_code_ends_the_run_and_its_children_and_audits_the_reason():
    """``everystep.cancel(run, reason)``, as the command: the parent waiting on a child
    and the child end ``cancelled``; one audit entry names code as the actor, with the
    reason; a run given by its id text works the same."""
    from everystep import cancel
    from everystep.models import AuditEntry
    from tests.testapp import composition

    parent = schedule(composition.parent_catches, "waits")
    run_due()  # the parent starts its child, which waits for an event
    child = Workflow.objects.get(parent=parent)
    returned = cancel(parent, reason="customer left")
    assert (returned.id, returned.status) == (parent.id, "cancelled")
    child.refresh_from_db()
    assert child.status == "cancelled"
    assert "cancelled by code (everystep.cancel)" in returned.error["message"]
    entry = AuditEntry.objects.get(run=parent)
    assert (entry.action, entry.actor, entry.via, entry.reason) == (
        "cancel",
        "code",
        "everystep.cancel",
        "customer left",
    )
    other = schedule(wf.sequential, 1, 1)
    assert cancel(str(other.id)).status == "cancelled"


def test_cancel_from_code_refuses_a_finished_unknown_or_malformed_run():
    from everystep import cancel
    from everystep.errors import EverystepError

    run = schedule(wf.sequential, 1, 1)
    run_due()
    with pytest.raises(EverystepError, match="is completed: only unfinished runs"):
        cancel(run)
    with pytest.raises(EverystepError, match="no run with id"):
        cancel("00000000-0000-0000-0000-000000000000")
    with pytest.raises(EverystepError, match=r"cancel\(\): not a run id"):
        cancel("not-a-run")
    run.refresh_from_db()
    assert run.status == "completed"


def test_acancel_from_async_code():
    import asyncio

    from everystep import acancel

    run = schedule(wf.sequential, 1, 1)
    cancelled = asyncio.run(acancel(run.id, "not needed"))
    assert cancelled.status == "cancelled"
    run_due()
    run.refresh_from_db()
    assert run.status == "cancelled" and not Step.objects.filter(workflow=run).exists()
