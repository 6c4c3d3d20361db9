"""Child runs and waits for runs (``start``, ``result``, ``gather``), driven in this
process by ``run_due``, which claims like a worker: one run at a time, only due ones."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

import everystep
from everystep import schedule
from everystep.errors import EverystepError, RunCancelled, RunStopped, WaitTimeout
from everystep.models import RunWait, Step, Workflow
from everystep.store import run_waits
from everystep.store.audit import Actor
from everystep.store.claims import claim_due
from everystep.store.outcome import suspend_run
from everystep.store.runs import cancel_run
from everystep.testing import crash_at, deployed, run_due
from tests.testapp import composition as cw
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "several")]


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def passes(run: Workflow) -> int:
    return Execution.objects.filter(run_id=run.id, step="pass").count()


def children(run: Workflow) -> list[Workflow]:
    return list(Workflow.objects.filter(parent_id=run.id).order_by("id"))


def test_a_parent_completes_with_its_childs_result():
    parent = schedule(cw.parent_one, 5)
    run_due()
    done = fresh(parent)
    assert (done.status, done.result) == ("completed", 106)
    (child,) = children(parent)
    assert (child.name, child.status, child.result) == (
        cw.child_sum.__everystep_workflow__.name,
        "completed",
        6,
    )
    start_step = Step.objects.get(workflow=parent, step_id="1")
    assert start_step.name == "everystep.start"
    assert start_step.result == {"run": str(child.id), "workflow": child.name}
    wait_step = Step.objects.get(workflow=parent, step_id="2")
    assert (wait_step.name, wait_step.status) == ("everystep.result", "done")
    assert passes(parent) == 2, "one pass to start and wait, one once the child ended"
    assert not RunWait.objects.exists(), "the wait's rows are gone once it is over"


def test_a_waiting_parent_is_released_and_woken_by_its_childs_end():
    parent = schedule(cw.parent_catches, "waits")
    run_due()
    waiting = fresh(parent)
    (child,) = children(parent)
    assert (waiting.status, waiting.claimed_by, waiting.due_at) == ("scheduled", None, None)
    assert waiting.waiting_for == f"run {child.id}"
    assert fresh(child).status == "scheduled" and fresh(child).awaited
    assert RunWait.objects.filter(waiter_id=parent.id, awaited_run_id=child.id).exists()
    run_due()
    assert fresh(parent).status == "scheduled", "nothing ended: nothing woke it"
    everystep.send(child.id, "go", "green")
    run_due()
    assert fresh(parent).result == "value 'green'"
    assert passes(parent) == 2


def test_a_failed_child_raises_its_exception_in_the_parent():
    parent = schedule(cw.parent_catches, "fails")
    run_due()
    assert fresh(parent).result == "ValueError boom"


def test_a_stopped_child_raises_run_stopped_with_reason_and_payload():
    parent = schedule(cw.parent_catches, "stops")
    run_due()
    assert fresh(parent).result == "RunStopped enough {'why': 'enough'}"


def test_a_cancelled_child_raises_run_cancelled_in_the_parent():
    parent = schedule(cw.parent_catches, "waits")
    run_due()
    (child,) = children(parent)
    cancel_run(str(child.id), actor=Actor("test", "test"))
    run_due()
    assert fresh(parent).result == "RunCancelled"


def test_a_timeout_is_catchable_and_recorded():
    parent = schedule(cw.parent_catches, "waits", 0.3)
    run_due()
    assert fresh(parent).due_at is not None
    time.sleep(0.4)
    run_due()
    done = fresh(parent)
    assert done.result == "WaitTimeout, then 2"
    wait_step = Step.objects.get(workflow=parent, step_id="2")
    assert (wait_step.status, wait_step.error["type"]) == ("failed", "everystep.errors.WaitTimeout")
    (child,) = children(parent)
    assert fresh(child).status == "scheduled", "a timeout leaves the child alone"
    assert not RunWait.objects.filter(waiter_id=parent.id).exists()


def test_run_due_advance_moves_a_result_wait_deadline():
    parent = schedule(cw.parent_catches, "waits", 3600)
    run_due()
    run_due(advance=3601)
    assert fresh(parent).result == "WaitTimeout, then 2"


def test_gather_returns_results_in_order_after_a_bounded_number_of_passes():
    parent = schedule(cw.parent_many, 25)
    run_due()
    done = fresh(parent)
    assert done.result == [2 * i for i in range(25)]
    assert len(children(parent)) == 25
    assert passes(parent) == 2, "resumed once, when the last child ended"
    assert Step.objects.filter(workflow=parent, name="everystep.gather").count() == 1


def test_gather_of_several_failures_raises_an_exception_group():
    parent = schedule(cw.parent_gathers_failures)
    run_due()
    assert fresh(parent).result == "one + two"


def test_fork_branches_each_start_and_await_a_child():
    parent = schedule(cw.parent_in_branches)
    run_due()
    assert fresh(parent).result == [3, 7]
    assert {child.result for child in children(parent)} == {3, 7}


def test_cancelling_a_run_cancels_its_unfinished_children_and_theirs():
    top = schedule(cw.grandparent)
    run_due()  # grandparent waits for parent_one, which waits for child_sum… which is done
    middle = children(top)[0]
    assert fresh(top).status == "completed"
    top = schedule(cw.parent_catches, "waits")
    run_due()
    (child,) = children(top)
    cancel_run(str(top.id), actor=Actor("test", "test"))
    assert fresh(top).status == "cancelled"
    assert fresh(child).status == "cancelled"
    assert "parent was cancelled" in fresh(child).error["message"]
    assert fresh(middle).status == "completed", "finished runs are left as they are"


def test_cancel_reaches_grandchildren():
    top = schedule(cw.grandparent)
    middle_run = None
    # Run only the top and its child's first pass: claim one run at a time.
    run_due(max_passes=2)
    (middle_run,) = children(top)
    cancel_run(str(top.id), actor=Actor("test", "test"))
    assert fresh(middle_run).status == "cancelled"
    for grandchild in children(middle_run):
        assert fresh(grandchild).status in ("cancelled", "completed")


def test_a_crash_after_the_childs_start_never_starts_a_second_child():
    parent = schedule(cw.parent_one, 1)
    with crash_at("after_record", "1") as crash:
        run_due(max_passes=1)
    assert crash.fired == ["1"]
    assert fresh(parent).status == "running", "the pass died holding the run"
    assert len(children(parent)) == 1
    run_due()
    assert fresh(parent).result == 102
    assert len(children(parent)) == 1


def test_start_in_a_step_body_is_schedule():
    run = schedule(cw.outside_starter, 2)
    run_due()
    started = Workflow.objects.get(id=fresh(run).result)
    assert started.parent_id is None
    assert started.status == "completed"


def test_start_outside_a_body_is_schedule():
    run = everystep.start(cw.child_sum, 1, 2, idempotency_key="k")
    again = everystep.start(cw.child_sum, 1, 2, idempotency_key="k")
    assert run.id == again.id and run.parent_id is None


def test_start_checks_arguments_like_schedule():
    with pytest.raises(TypeError, match="cannot start workflow"):
        everystep.start(cw.child_sum, 1)


def test_result_outside_a_body_returns_a_finished_runs_result():
    run = schedule(cw.child_sum, 2, 3)
    run_due()
    assert everystep.result(run) == 5
    assert everystep.result(str(run.id), timeout=0) == 5
    assert everystep.gather([run, run.id]) == [5, 5]


def test_result_outside_a_body_blocks_until_the_run_ends():
    run = schedule(cw.child_sum, 4, 4)

    def later() -> None:
        time.sleep(0.3)
        run_due()
        connection.close()

    worker = threading.Thread(target=later)
    worker.start()
    began = time.monotonic()
    try:
        assert everystep.result(run, timeout=30) == 8
    finally:
        worker.join()
    assert time.monotonic() - began >= 0.25


def test_result_outside_a_body_times_out():
    run = schedule(cw.child_waits, "never")
    began = time.monotonic()
    with pytest.raises(WaitTimeout):
        everystep.result(run, timeout=0.3)
    assert 0.25 <= time.monotonic() - began < 5


def test_result_outside_raises_the_outcomes():
    failed = schedule(cw.child_fails, "bad")
    stopped = schedule(cw.child_stops, "halt")
    cancelled = schedule(cw.child_waits, "x")
    run_due()
    cancel_run(str(cancelled.id), actor=Actor("test", "test"))
    with pytest.raises(ValueError, match="bad"):
        everystep.result(failed)
    with pytest.raises(RunStopped) as stop:
        everystep.result(stopped)
    assert (stop.value.reason, stop.value.payload) == ("halt", {"why": "halt"})
    with pytest.raises(RunCancelled):
        everystep.result(cancelled)
    with pytest.raises(ExceptionGroup):
        everystep.gather([failed, stopped])


def test_result_of_an_unknown_or_malformed_run_is_a_clear_error():
    with pytest.raises(EverystepError, match="no run with id"):
        everystep.result("00000000-0000-7000-8000-000000000000")
    with pytest.raises(EverystepError, match="not a run id"):
        everystep.result("nope")
    with pytest.raises(EverystepError, match="list of runs"):
        everystep.gather("00000000-0000-7000-8000-000000000000")


def test_result_will_not_wait_inside_a_transaction():
    run = schedule(cw.child_sum, 1, 1)
    with transaction.atomic(), pytest.raises(EverystepError, match="inside a database transaction"):
        everystep.result(run)


def test_a_blocked_run_is_waited_through(blocked_run):
    with pytest.raises(WaitTimeout):
        everystep.result(blocked_run, timeout=0.2)


def test_sweep_wakes_a_waiter_whose_childs_end_did_not():
    parent = schedule(cw.parent_catches, "waits")
    run_due()
    (child,) = children(parent)
    # The child ends without the wake (as if its worker died right after the outcome).
    Workflow.objects.filter(id=child.id).update(status="completed", result="late")
    assert fresh(parent).due_at is None
    assert run_waits.sweep() == 1
    run_due()
    assert fresh(parent).result == "value 'late'"


def _checked() -> dict:
    """The replay check's JSON report."""
    out = StringIO()
    with contextlib.suppress(SystemExit):  # it exits 1 when a run fails the check
        call_command("everystep_check_replay", "--json", stdout=out)
    return json.loads(out.getvalue())


def _failures(report: dict) -> list[dict]:
    return [failure for entry in report["workflows"] for failure in entry["failing"]]


def _quiet_parent_starting_another_child(event: str) -> Any:
    return everystep.result(everystep.start(cw.child_fails, event))


def _quiet_parent_sleeping_first(event: str) -> Any:
    child = everystep.start(cw.child_waits, event)
    everystep.sleep(1)
    return everystep.result(child)


def test_the_replay_check_replays_child_starts_and_result_waits():
    parent = schedule(cw.quiet_parent, "go")
    run_due()
    before = list(Step.objects.values_list("step_id", "status").order_by("step_id"))
    report = _checked()
    assert report["ok"] and report["checked"] == 2, report
    assert list(Step.objects.values_list("step_id", "status").order_by("step_id")) == before
    assert len(children(parent)) == 1, "the check started no child"


@pytest.mark.parametrize(
    "new_body, recorded",
    [
        (_quiet_parent_starting_another_child, "start(tests.testapp.composition.child_waits)"),
        (_quiet_parent_sleeping_first, "everystep.result"),
    ],
)
def test_the_replay_check_finds_a_changed_child_start_or_wait(new_body, recorded):
    parent = schedule(cw.quiet_parent, "go")
    run_due()
    with deployed(cw.quiet_parent, new_body):
        report = _checked()
    (failure,) = _failures(report)
    assert failure["run_id"] == str(parent.id)
    assert recorded in json.dumps(failure)


def test_a_run_released_to_wait_for_runs_that_all_ended_meanwhile_is_due_at_once():
    """The body saw a run still going; it ended before the release: the release finds it
    ended under its lock and leaves the waiter due, not asleep with nothing to wake it."""
    ended = schedule(cw.child_sum, 1, 1)
    run_due()
    waiter = schedule(cw.child_waits, "x")
    (claim,) = claim_due("by-hand", 1)
    assert claim.run_id == waiter.id
    assert suspend_run(claim, None, frozenset(), frozenset({ended.id}))
    released = fresh(waiter)
    assert released.status == "scheduled"
    assert released.due_at is not None and released.due_at <= timezone.now()
    assert not RunWait.objects.filter(waiter_id=waiter.id).exists()


def test_a_wake_that_fails_leaves_the_outcome_and_the_sweep_wakes_the_waiter(monkeypatch, caplog):
    """The database goes away between a child's outcome and the wake of its parent: the
    outcome stands, a warning says so, the rows stay, and the sweep wakes the parent."""
    from django.db import DatabaseError

    parent = schedule(cw.parent_catches, "waits")
    run_due()
    (child,) = children(parent)
    everystep.send(child.id, "go", "late")

    def unreachable(runs: object) -> None:
        raise DatabaseError("server closed the connection unexpectedly")

    with monkeypatch.context() as patch:
        patch.setattr(run_waits, "ended", unreachable)
        run_due()
    assert fresh(child).status == "completed"
    assert (fresh(parent).status, fresh(parent).due_at) == ("scheduled", None)
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "run.wake_failed"]
    assert str(child.id) in warning.getMessage()
    assert RunWait.objects.filter(waiter_id=parent.id, awaited_run_id=child.id).exists()
    assert run_waits.sweep() == 1
    run_due()
    assert fresh(parent).result == "value 'late'"


def waiting_lines(caplog: pytest.LogCaptureFixture, run: Workflow) -> list[str]:
    """The worker's "run.waiting" log lines about ``run``, in order."""
    return [
        record.getMessage()
        for record in caplog.records
        if getattr(record, "event", "") == "run.waiting" and record.run_id == str(run.id)
    ]


def test_a_parent_waiting_for_children_logs_which_runs(caplog):
    """The log line of a parent released at result() names the child it waits for, and
    at gather() how many children, as everystep_show words a wait."""
    one, many = schedule(cw.parent_one, 5), schedule(cw.parent_many, 3)
    with caplog.at_level(logging.INFO, logger="everystep.run"):
        run_due()
    (child,) = children(one)
    prefix = f"run {one.id} ({one.name}) "
    assert waiting_lines(caplog, one) == [f"{prefix}waits for run {child.id}"]
    prefix = f"run {many.id} ({many.name}) "
    assert waiting_lines(caplog, many) == [f"{prefix}waits for 3 runs"]
