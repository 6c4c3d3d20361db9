"""Starting a run from inside a body is exactly-once (issue 54, SPEC §14): ``schedule()``
and ``aschedule()`` in a workflow body, a task's ``enqueue()`` and ``aenqueue()`` in a task
body, and ``start()`` / ``astart()`` of a ``@task`` are recorded like ``start()``. Each
test crashes the pass after the starts (``crash_at``) and resumes it as a restarted worker
does: the replay returns the same runs, inserts none, and Django's ``task_enqueued`` is
sent once per child. Real worker processes killed mid-run:
tests/acceptance/test_tasks_worker.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import everystep
from everystep.errors import EverystepError
from everystep.models import Status, Step, Workflow
from everystep.testing import crash_at, run_due
from tests.testapp import composition as cw
from tests.testapp import tasks
from tests.testapp.models import Execution

try:  # Django 6
    from django.tasks import TaskResultStatus, signals
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus, signals  # type: ignore[no-redef]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]


@pytest.fixture
def enqueued() -> Iterator[list[str]]:
    """The ids ``task_enqueued`` was sent for, in order."""
    sent: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result.id)

    signals.task_enqueued.connect(receiver)
    try:
        yield sent
    finally:
        signals.task_enqueued.disconnect(receiver)


def started_by(run_id: Any) -> list[Workflow]:
    return list(Workflow.objects.filter(parent_id=run_id).order_by("created_at", "id"))


def passes() -> int:
    """The passes a sync parent took (an async body writes no row of its own)."""
    return Execution.objects.filter(step__in=["pass", "chains:pass"]).count()


@pytest.mark.parametrize("body", [cw.schedules_children, cw.aschedules_children])
def test_schedule_in_a_workflow_body_is_recorded_and_not_repeated_on_replay(body):
    parent = everystep.schedule(body, 5)
    # The pass dies before the step that follows the two schedules.
    with crash_at("before_body", cw.add) as crash:
        run_due(max_passes=1)
    assert crash.fired
    first_pass = started_by(parent.id)
    assert [run.name for run in first_pass] == ["tests.testapp.composition.child_sum"] * 2
    later = first_pass[1]
    assert (later.due_at - first_pass[0].due_at).total_seconds() > 3500, "delay= kept"
    run_due(max_passes=1)  # the parent's replay, after the crash
    row = Workflow.objects.get(id=parent.id)
    assert row.status == Status.COMPLETED
    assert passes() == (2 if body is cw.schedules_children else 0)
    assert row.result == [str(first_pass[0].id), str(later.id)], "the replay got the same runs"
    assert [run.id for run in started_by(parent.id)] == [first_pass[0].id, later.id]
    records = Step.objects.filter(workflow_id=parent.id, name="everystep.start")
    assert records.count() == 2


@pytest.mark.parametrize("body", [tasks.chains, tasks.achains])
def test_enqueue_and_start_of_a_task_in_a_task_body_happen_once(body, enqueued):
    parent = body.enqueue(4)
    target = tasks.first if body is tasks.chains else tasks.first_plus_one
    with crash_at("before_body", target) as crash:
        run_due(max_passes=1)
    assert crash.fired
    children = started_by(parent.id)
    assert len(children) == len(enqueued) - 1 == (3 if body is tasks.chains else 2)
    run_due(max_passes=1)  # the parent's replay
    parent.refresh()
    assert parent.status == TaskResultStatus.SUCCESSFUL
    ids = parent.return_value
    assert sorted(ids.values()) == sorted(str(run.id) for run in started_by(parent.id))
    assert len(started_by(parent.id)) == len(children), "no child enqueued twice"
    assert passes() == (2 if body is tasks.chains else 0)
    in_order = [ids[key] for key in ("enqueued", "routed", "started") if key in ids]
    assert enqueued == [parent.id, *in_order], "task_enqueued once per child"
    if body is tasks.chains:
        routed = Workflow.objects.get(id=ids["routed"])
        assert routed.queue == "emails", "using()'s queue kept"
    started = Workflow.objects.get(id=ids["started"])
    assert started.args == [[4, 3], {"scale": 2}]
    run_due()
    assert tasks.add.get_result(ids["started"]).return_value == 14
    assert everystep.result(tasks.add.get_result(ids["enqueued"])) == 5, "result() of a TaskResult"


def test_start_of_a_task_outside_a_body_enqueues_it_with_an_idempotency_key():
    once = everystep.start(tasks.add, 1, 2, idempotency_key="add-1-2")
    again = everystep.start(tasks.add, 1, 2, idempotency_key="add-1-2")
    assert once.id == again.id and once.task.name == "add"
    run_due()
    assert everystep.gather([once, again]) == [3, 3]


def test_a_sync_start_in_an_async_body_says_which_call_to_await():
    run = everystep.schedule(cw.async_sync_scheduler)
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert "use await aschedule()" in row.error["message"]
    assert not started_by(run.id)


def test_result_names_what_it_takes():
    with pytest.raises(EverystepError, match=r"result\(\): not a run id \(nor a run or a TaskR"):
        everystep.result("nope")
