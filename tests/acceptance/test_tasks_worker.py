"""Django ``@task`` functions run by real worker processes on everystep's backend (issue
35): a task completes and reads back as a ``TaskResult``; a task whose worker is
SIGKILLed during its second step resumes after a restart without running the first step's
body again; a row naming anything but a task fails once and nothing is called; a parent
killed after starting a child starts no second one (issue 54)."""

from __future__ import annotations

import signal
from pathlib import Path
from uuid import UUID

import pytest

from everystep import schedule
from everystep.models import Status, Workflow
from everystep.store.runs import create_run
from tests.acceptance.conftest import wait_until
from tests.testapp import composition, tasks
from tests.testapp.models import Execution

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus  # type: ignore[no-redef]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]

FAST = ("--poll", "0.1")


def finished(*results: object) -> bool:
    for result in results:
        result.refresh()  # type: ignore[attr-defined]
    return all(result.is_finished for result in results)  # type: ignore[attr-defined]


def test_a_worker_process_runs_tasks_and_get_result_reads_them(workers):
    ok = tasks.add.enqueue(2, 3, scale=2)
    mail = tasks.notify.enqueue("ops@example.com")
    bad = tasks.explode.enqueue("in a worker")
    proc = workers("tasker", *FAST)
    wait_until(lambda: finished(ok, mail, bad), 60, "the tasks to finish")
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 10
    assert ok.worker_ids == ["tasker"]
    assert mail.return_value == "sent to ops@example.com"
    assert bad.status == TaskResultStatus.FAILED
    [error] = bad.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "tests/testapp/tasks.py" in error.traceback and "in explode" in error.traceback
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_a_task_killed_in_its_second_step_does_not_run_its_first_again(workers, tmp_path: Path):
    gate = tmp_path / "gate"
    result = tasks.two_steps.enqueue("kill", str(gate))
    first = workers("tasker", *FAST)
    wait_until(
        lambda: Execution.objects.filter(run_id=result.id, step="kill:second").exists(),
        60,
        "the second step to start",
    )
    first.signal(signal.SIGKILL)
    first.wait(30)
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING, "held by the dead worker"
    gate.touch()
    # A restart under the same name takes back what the killed process held.
    again = workers("tasker", *FAST)
    wait_until(lambda: finished(result), 60, "the task to finish after the restart")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == ["first done", "second done"]
    assert Execution.objects.filter(run_id=result.id, step="kill:first").count() == 1
    assert Execution.objects.filter(run_id=result.id, step="kill:second").count() == 2
    assert result.worker_ids == ["tasker", "tasker"], "the claim after the crash is an attempt"
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def test_a_sleeping_task_is_ready_and_wakes_in_the_same_attempt(workers):
    result = tasks.nap.enqueue(1.5)
    proc = workers("napper", *FAST)
    wait_until(
        lambda: (
            Workflow.objects.filter(id=result.id, status=Status.SCHEDULED)
            .exclude(started_at=None)
            .exists()
        ),
        60,
        "the task to sleep",
    )
    result.refresh()
    assert result.status == TaskResultStatus.READY
    wait_until(lambda: finished(result), 60, "the task to wake and finish")
    assert result.return_value == "rested"
    assert result.worker_ids == ["napper"]
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_a_row_named_os_system_is_failed_once_and_nothing_runs(workers, tmp_path: Path):
    witness = tmp_path / "called"
    run = create_run("os.system", [[f"touch {witness}"], {}], None, queue="default")
    proc = workers("guard", *FAST)
    wait_until(lambda: Workflow.objects.get(id=run.id).status == Status.FAILED, 60, "the refusal")
    row = Workflow.objects.get(id=run.id)
    assert "unknown workflow 'os.system'" in row.error["message"]
    assert "not a django.tasks Task" in row.error["message"]
    assert not witness.exists(), "os.system was not called"
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert "unknown workflow 'os.system'" in proc.log()


def test_a_parent_killed_after_starting_children_starts_each_only_once(workers, tmp_path: Path):
    """Chaining survives a crash (issue 54): a task that ``enqueue()``s a child and a
    workflow that ``schedule()``s one are SIGKILLed in the step that follows; after the
    restart each has exactly one child, and the task's result names it."""
    gate = tmp_path / "gate"
    task_parent = tasks.chain_then_wait.enqueue("chain", str(gate))
    flow_parent = schedule(composition.schedules_then_waits, "flow", str(gate))
    first = workers("chainer", *FAST)
    wait_until(
        lambda: Execution.objects.filter(step__in=["chain:second", "flow:gate"]).count() == 2,
        60,
        "both parents to reach their waiting step",
    )
    first.signal(signal.SIGKILL)
    first.wait(30)
    gate.touch()
    again = workers("chainer", *FAST)
    wait_until(lambda: finished(task_parent), 60, "the task parent to finish after the restart")
    wait_until(
        lambda: Workflow.objects.get(id=flow_parent.id).status == Status.COMPLETED,
        60,
        "the workflow parent to finish after the restart",
    )
    assert Workflow.objects.filter(name=tasks.add.module_path).count() == 1
    assert Workflow.objects.filter(name__endswith=".child_sum").count() == 1
    [task_child] = Workflow.objects.filter(parent_id=task_parent.id)
    [flow_child] = Workflow.objects.filter(parent_id=flow_parent.id)
    assert task_parent.return_value == str(task_child.id), "the same TaskResult on the replay"
    assert Workflow.objects.get(id=flow_parent.id).result == str(flow_child.id)
    assert Execution.objects.filter(step__in=["chain:second", "flow:gate"]).count() == 4
    wait_until(
        lambda: all(
            Workflow.objects.get(id=child.id).status == Status.COMPLETED
            for child in (task_child, flow_child)
        ),
        60,
        "the children to finish",
    )
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def test_a_worker_sends_task_finished_for_every_way_a_task_run_ends(workers):
    """Issue 54: Django's receivers in the worker process hear of a task run that
    completes, fails or ends the process's way (``SystemExit``), each failure with its
    exception being handled (what Django's ERROR line logs). A cancelled task run's
    ``task_finished`` is sent where it is cancelled: tests/integration/test_tasks.py."""
    done = tasks.add.enqueue(1, 2)
    failed = tasks.explode.enqueue("in a worker")
    exited = tasks.exits.enqueue(3)
    proc = workers("finisher", *FAST, env={"EVERYSTEP_TEST_RECORD_FINISHED": "1"})
    wait_until(lambda: finished(done, failed, exited), 60, "the tasks to finish")
    # Sent once each outcome is written: the receiver's row may follow the status.
    rows = Execution.objects.filter(step__startswith="finished:")
    wait_until(lambda: rows.count() >= 3, 30, "the receiver to hear of all three")
    heard = dict(rows.values_list("run_id", "step"))
    assert heard == {
        UUID(done.id): "finished:SUCCESSFUL:none",
        UUID(failed.id): "finished:FAILED:ValueError",
        UUID(exited.id): "finished:FAILED:SystemExit",
    }
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
