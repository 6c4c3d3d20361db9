"""everystep_resolve_step: settling a blocked run's uncertain step."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from everystep import schedule
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def resolve(run: Workflow, step_id: str, *flags: str) -> None:
    call_command("everystep_resolve_step", str(run.id), step_id, *flags)


def test_resolve_with_result_serves_it_and_completes(blocked_run):
    """--result records the step as done: the next pass serves it and completes."""
    resolve(blocked_run, "2", "--result", '{"charged": 100, "manual": true}')
    blocked_run.refresh_from_db()
    assert blocked_run.status == "scheduled" and blocked_run.claimed_by is None
    run_due()
    blocked_run.refresh_from_db()
    assert blocked_run.status == "completed"
    assert blocked_run.result == {"charged": 100, "manual": True}
    assert wf.CALLS["charge"] == 1


def test_resolve_with_error_reraises_it_and_fails(blocked_run):
    """--error records the step as failed: the next pass re-raises it and the run fails."""
    resolve(blocked_run, "2", "--error", "the bank says no")
    run_due()
    blocked_run.refresh_from_db()
    assert blocked_run.status == "failed"
    assert blocked_run.error["type"] == "everystep.errors.StepFailure"
    assert "the bank says no" in blocked_run.error["message"]
    assert wf.CALLS["charge"] == 1


def test_resolve_discard_runs_the_step_again(blocked_run):
    """--discard forgets the start: the step executes again and the run completes."""
    resolve(blocked_run, "2", "--discard")
    assert not Step.objects.filter(workflow=blocked_run, step_id="2").exists()
    run_due()
    blocked_run.refresh_from_db()
    assert blocked_run.status == "completed"
    assert blocked_run.result == {"charged": 100}
    assert wf.CALLS["charge"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["00000000-0000-0000-0000-000000000000", "2", "--discard"], "no run with id"),
        (["not-a-uuid", "2", "--discard"], "not a run id"),
    ],
)
def test_resolve_unknown_run_is_a_command_error(args, message):
    """An unknown or malformed run id is a clear CommandError."""
    with pytest.raises(CommandError, match=message):
        call_command("everystep_resolve_step", *args)


def test_resolve_refuses_a_run_that_is_not_blocked():
    """A run that is not blocked cannot be resolved and is left as it was."""
    run = schedule(wf.sequential, 1, 1)
    run_due()
    with pytest.raises(CommandError, match="is completed, not blocked"):
        resolve(run, "1", "--discard")
    run.refresh_from_db()
    assert run.status == "completed"


def test_resolve_refuses_a_step_that_is_not_started(blocked_run):
    """Only the started step can be settled; a done step or a missing one is refused."""
    with pytest.raises(CommandError, match="is done, not started"):
        resolve(blocked_run, "1", "--result", "1")
    with pytest.raises(CommandError, match="has no step '9'"):
        resolve(blocked_run, "9", "--discard")
    blocked_run.refresh_from_db()
    assert blocked_run.status == "blocked", "a refused resolve changes nothing"


def test_resolve_rejects_invalid_json(blocked_run):
    """--result must be valid JSON."""
    with pytest.raises(CommandError, match="not valid JSON"):
        resolve(blocked_run, "2", "--result", "{nope")
    blocked_run.refresh_from_db()
    assert blocked_run.status == "blocked"


def test_resolve_needs_exactly_one_mode(blocked_run):
    """Giving no mode, or two, is refused by the argument parser."""
    with pytest.raises(CommandError):
        resolve(blocked_run, "2")
    with pytest.raises(CommandError):
        resolve(blocked_run, "2", "--discard", "--error", "x")
