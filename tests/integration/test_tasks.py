"""Django's task framework on everystep (issue 35, SPEC §13): ``@task`` functions enqueued
through ``everystep.tasks.EverystepBackend`` become runs, executed here by
``everystep.testing.run_due()`` (the worker's own pass), and read back as ``TaskResult``.
On Django 5.2 this is the django-tasks backport; on Django 6 (the compat tier)
``django.tasks``. Real worker processes: tests/acceptance/test_tasks_worker.py."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from everystep import conf, fork, send, task_runs
from everystep.checks import check_settings
from everystep.errors import EverystepError
from everystep.models import Status, Step, Workflow
from everystep.replays.check import check_replay
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run, create_run
from everystep.tasks import EverystepBackend
from everystep.testing import crash_at, run_due
from tests.testapp import tasks
from tests.testapp.models import Execution

try:  # Django 6
    from django.tasks import TaskResultStatus, exceptions, signals
    from django.tasks import task as django_task
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus, exceptions, signals  # type: ignore[no-redef]
    from django_tasks import task as django_task  # type: ignore[no-redef]

# The released backport (0.12) still names these InvalidTaskError / InvalidTaskBackendError.
InvalidTask = getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]

RUNNER = "everystep-testing"  # run_due()'s runner name


def test_enqueue_in_a_transaction_that_rolls_back_leaves_no_run():
    # everystep's alias: the tier with several databases keeps it apart from "default".
    with pytest.raises(RuntimeError), transaction.atomic(using=conf.database()):
        result = tasks.add.enqueue(1, 2)
        assert Workflow.objects.filter(id=result.id).exists()
        raise RuntimeError("roll back")
    assert not Workflow.objects.filter(id=result.id).exists()
    with transaction.atomic(using=conf.database()):
        kept = tasks.add.enqueue(1, 2)
    run = Workflow.objects.get(id=kept.id)
    assert run.name == "tests.testapp.tasks.add" == tasks.add.module_path
    assert run.queue == "default"
    assert run.status == Status.SCHEDULED


def test_a_worker_completes_a_task_and_get_result_reports_it():
    before = timezone.now()
    result = tasks.add.enqueue(2, 3, scale=10)
    assert result.status == TaskResultStatus.READY
    assert result.args == [2, 3] and result.kwargs == {"scale": 10}
    assert result.worker_ids == [] and result.started_at is None
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 50, "kwargs arrive"
    assert result.worker_ids == [RUNNER]
    assert result.attempts == 1
    assert result.errors == []
    assert before <= result.enqueued_at <= result.started_at
    assert result.started_at <= result.last_attempted_at <= result.finished_at
    fetched = tasks.add.get_result(result.id)
    assert fetched.return_value == 50
    assert fetched.backend == "default"
    assert fetched.task.func is tasks.add.func


def test_a_failing_task_is_failed_with_its_exception_and_traceback():
    result = tasks.explode.enqueue("kaboom")
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "tests/testapp/tasks.py" in error.traceback
    assert "in explode" in error.traceback
    assert "ValueError: exploded: kaboom" in error.traceback
    assert result.finished_at is not None


def test_run_after_defers_the_run():
    later = timezone.now() + timedelta(hours=1)
    if not timezone.is_naive(later) and not _use_tz():
        later = timezone.make_naive(later)
    result = tasks.add.using(run_after=later).enqueue(1, 1)
    run = Workflow.objects.get(id=result.id)
    assert run.due_at >= later - timedelta(seconds=1)
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.READY, "not claimed before run_after"
    run_due(advance=timedelta(hours=2))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def _use_tz() -> bool:
    from django.conf import settings

    return bool(settings.USE_TZ)


def test_priority_and_an_unknown_queue_are_refused_by_django():
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=10)
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid"):
        tasks.add.using(queue_name="reports")
    assert not Workflow.objects.exists()


def test_a_task_on_another_queue_keeps_its_queue():
    result = tasks.notify.enqueue("ops@example.com")
    assert Workflow.objects.get(id=result.id).queue == "emails"
    run_due()
    assert tasks.notify.get_result(result.id).return_value == "sent to ops@example.com"


def test_unknown_ids_and_another_tasks_run_raise_djangos_exceptions():
    with pytest.raises(exceptions.TaskResultDoesNotExist):
        tasks.add.get_result("01a240e3-0000-7000-8000-000000000000")
    with pytest.raises(exceptions.TaskResultDoesNotExist):
        tasks.add.get_result("not-a-uuid")
    plain = create_run("tests.testapp.workflows.sequential", [1], None)
    with pytest.raises(exceptions.TaskResultDoesNotExist, match="no task run"):
        tasks.add.get_result(str(plain.id))
    other = tasks.notify.enqueue("x@example.com")
    with pytest.raises(exceptions.TaskResultMismatch):
        tasks.add.get_result(other.id)


def test_the_context_carries_the_result_and_the_attempt():
    result = tasks.introspect.enqueue("hello")
    run_due()
    value = tasks.introspect.get_result(result.id).return_value
    assert value == {"tag": "hello", "attempt": 1, "id": result.id, "worker_ids": [RUNNER]}


def test_djangos_three_signals_are_sent():
    seen: list[tuple[str, str, Any]] = []

    def receiver(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            assert sender is EverystepBackend
            seen.append((name, task_result.id, task_result.status))

        return receive

    handlers = {name: receiver(name) for name in ("enqueued", "started", "finished")}
    signals.task_enqueued.connect(handlers["enqueued"])
    signals.task_started.connect(handlers["started"])
    signals.task_finished.connect(handlers["finished"])
    try:
        ok = tasks.add.enqueue(1, 2)
        bad = tasks.explode.enqueue("x")
        run_due()
    finally:
        signals.task_enqueued.disconnect(handlers["enqueued"])
        signals.task_started.disconnect(handlers["started"])
        signals.task_finished.disconnect(handlers["finished"])
    assert seen == [
        ("enqueued", ok.id, TaskResultStatus.READY),
        ("enqueued", bad.id, TaskResultStatus.READY),
        ("started", ok.id, TaskResultStatus.RUNNING),
        ("finished", ok.id, TaskResultStatus.SUCCESSFUL),
        ("started", bad.id, TaskResultStatus.RUNNING),
        ("finished", bad.id, TaskResultStatus.FAILED),
    ]


def test_a_receiver_that_raises_does_not_fail_the_run(caplog: pytest.LogCaptureFixture):
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.task_finished.connect(broken)
    try:
        result = tasks.add.enqueue(1, 2)
        run_due()
    finally:
        signals.task_finished.disconnect(broken)
    assert tasks.add.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert "receiver bug" in caplog.text


def test_steps_inside_a_task_are_recorded_and_forks_run_in_parallel():
    result = tasks.fan_out.enqueue(["a", "b", "c"])
    run_due()
    assert tasks.fan_out.get_result(result.id).return_value == ["A", "B", "C"]
    assert Execution.objects.filter(run_id=result.id).count() == 3


def test_a_sleeping_task_is_ready_and_its_resume_is_not_a_new_attempt():
    result = tasks.nap.enqueue(3600)
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.READY, "released to sleep: ready to run again"
    assert result.worker_ids == [RUNNER]
    run_due(advance=timedelta(hours=2))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "rested"
    assert result.worker_ids == [RUNNER], "the resume after the sleep is the same attempt"
    assert Execution.objects.filter(run_id=result.id, step="nap:first").count() == 1


def test_a_task_waiting_for_an_event_is_ready_until_the_event():
    result = tasks.approval.enqueue(7)
    run_due()
    assert tasks.approval.get_result(result.id).status == TaskResultStatus.READY
    assert send(result.id, "approve", {"by": "ann"}) is True
    run_due()
    done = tasks.approval.get_result(result.id)
    assert done.return_value == {"order": 7, "approval": {"by": "ann"}}
    assert done.worker_ids == [RUNNER]


def test_a_requeued_task_run_counts_a_new_attempt():
    """A claim after an interruption (here: a pass that ended by requeueing, as a drain
    ends it) begins a new attempt."""
    from everystep.store.claims import claim_due
    from everystep.store.outcome import requeue_run

    result = tasks.introspect.enqueue("again")
    [claim] = claim_due("first-worker", 1)
    assert task_runs.begin(claim) is not None
    assert requeue_run(claim)
    run_due(runner="second-worker")
    value = tasks.introspect.get_result(result.id).return_value
    assert value["attempt"] == 2
    assert value["worker_ids"] == ["first-worker", "second-worker"]


def test_cancelled_and_running_runs_map_to_djangos_statuses():
    result = tasks.add.enqueue(1, 2)
    cancel_run(result.id, actor=Actor("ann", "test"))
    assert tasks.add.get_result(result.id).status == TaskResultStatus.FAILED
    queued = tasks.add.enqueue(3, 4)
    Workflow.objects.filter(id=queued.id).update(status=Status.BLOCKED)
    assert tasks.add.get_result(queued.id).status == TaskResultStatus.RUNNING
    Workflow.objects.filter(id=queued.id).update(status=Status.RUNNING)
    assert tasks.add.get_result(queued.id).status == TaskResultStatus.RUNNING


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("os.system", "'os.system' is a builtin_function_or_method, not a django.tasks Task"),
        ("antigravity.fly", "module 'antigravity' is not imported and is not part of the project"),
        ("tests.testapp.workflows.nothing_here", "is nothing, not a django.tasks Task"),
        ("tests.testapp.tasks.first", "is a function, not a django.tasks Task"),
    ],
)
def test_a_row_naming_anything_but_a_task_is_failed_once_and_nothing_is_called(
    name: str, reason: str
):
    run = create_run(name, [["echo called"], {}], None, queue="default")
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert f"unknown workflow {name!r}" in row.error["message"]
    assert reason in row.error["message"]
    assert "antigravity" not in sys.modules, "a module outside the project is not imported"
    assert not Execution.objects.exists(), "no step body ran"
    assert run_due() == [], "failed once, not retried"


def test_a_task_configured_for_another_backend_is_not_run(monkeypatch: pytest.MonkeyPatch):
    dummy = ("django.tasks" if "django.tasks" in sys.modules else "django_tasks") + (
        ".backends.dummy.DummyBackend"
    )
    with override_settings(
        TASKS={
            "default": {"BACKEND": "everystep.tasks.EverystepBackend"},
            "other": {"BACKEND": dummy},
        }
    ):
        # The module's attribute is the same function on the other backend.
        monkeypatch.setattr(tasks, "add", tasks.add.using(backend="other"))
        refused = r"backend 'other' .*DummyBackend.*not everystep's"
        with pytest.raises(EverystepError, match=refused):
            task_runs._find_task("tests.testapp.tasks.add")


def test_a_task_over_a_workflow_is_refused_at_enqueue():
    from tests.testapp.workflows import sequential

    with pytest.raises(InvalidTask, match="is a @task over a @workflow: remove @workflow"):
        django_task(sequential).enqueue(1)
    assert not Workflow.objects.exists()


def test_arguments_django_cannot_store_are_refused_before_any_run():
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)
    assert not Workflow.objects.exists()


def test_the_replay_check_and_fork_work_on_a_task_run():
    result = tasks.two_steps.enqueue("check", "/")  # the gate exists: both steps run
    run_due()
    assert tasks.two_steps.get_result(result.id).return_value == ["first done", "second done"]
    sleeper = tasks.nap.enqueue(3600)
    run_due()
    report = check_replay(workflow="tests.testapp.tasks.nap")
    assert report.checked == 1 and report.failing == 0, sleeper.id
    forked = fork(result.id, from_step="2")
    assert forked.queue == "default"
    run_due()
    again = tasks.two_steps.get_result(str(forked.id))
    assert again.status == TaskResultStatus.SUCCESSFUL
    assert Execution.objects.filter(run_id=forked.id, step="check:first").count() == 0
    assert Execution.objects.filter(run_id=forked.id, step="check:second").count() == 1


def test_system_check_reports_keys_and_options_the_backend_does_not_know():
    entry = {"BACKEND": "everystep.tasks.EverystepBackend", "QUEUE": ["x"], "OPTIONS": {"poll": 1}}
    other = {"BACKEND": "elsewhere.Backend", "OPTIONS": {"anything": 1}}
    with override_settings(TASKS={"default": entry, "other": other}):
        messages = [(m.id, m.msg) for m in check_settings() if m.id == "everystep.E010"]
    assert messages == [
        (
            "everystep.E010",
            "TASKS['default'] has the key 'QUEUE', which EverystepBackend does not know "
            "(it reads BACKEND and QUEUES, and OPTIONS, which must be empty: it takes no "
            "options)",
        ),
        (
            "everystep.E010",
            "TASKS['default']['OPTIONS'] has 'poll': EverystepBackend takes no options",
        ),
    ]
    assert not [m for m in check_settings() if m.id == "everystep.E010"], "the suite's TASKS"


def test_manage_py_check_reports_it():
    """Through ``manage.py check``, whichever task framework is installed."""
    import os

    from tests.workers import manage

    env = dict(os.environ, EVERYSTEP_TEST_TASKS_OPTIONS="1")
    done = manage(env, "check")
    assert done.returncode != 0
    assert "everystep.E010" in done.stderr


def test_a_misspelt_queues_key_is_named_when_a_task_fails_validation_at_start():
    """``QUEUE`` for ``QUEUES``: the backend then lists only ``default``, and a task of
    queue ``emails`` fails Django's validation as its module is imported at start, before
    any system check runs. The error says which key is misspelt (issue 54)."""
    import os

    from tests.workers import manage

    env = dict(os.environ, EVERYSTEP_TEST_TASKS_MISSPELT="1")
    done = manage(env, "check")
    assert done.returncode != 0
    assert "importing 'tests.testapp.tasks'" in done.stderr
    assert "TASKS['default'] has the key 'QUEUE', which EverystepBackend does not know" in (
        done.stderr
    )


def test_aenqueue_and_aget_result_from_async_code():
    """Django's async API works through the backend (run in a thread, as Django's base
    backend does; async workflows themselves are not built yet)."""
    import asyncio

    result = asyncio.run(tasks.add.aenqueue(4, 5, scale=2))
    assert result.status == TaskResultStatus.READY
    run_due()
    fetched = asyncio.run(tasks.add.aget_result(result.id))
    assert fetched.return_value == 18
    asyncio.run(result.arefresh())
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_an_async_task_runs_as_an_async_workflow_with_awaited_steps():
    """``supports_async_task``: an ``async def`` task's steps are awaited and recorded,
    and its result reads back through Django's API."""
    result = tasks.async_lookup.enqueue(4)
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 41
    steps = Step.objects.filter(workflow_id=result.id).order_by("step_id")
    assert [(s.step_id, s.status, s.result) for s in steps] == [
        ("1", "done", 40),
        ("2", "done", 41),
    ]


def test_a_pass_run_again_under_the_same_claim_is_not_a_new_attempt():
    """The worker runs a pass again under the same claim when the database interrupted
    it (``retry``): that is still the attempt it began."""
    from everystep.store.claims import claim_due

    result = tasks.add.enqueue(1, 1)
    [claim] = claim_due("only-worker", 1)
    assert task_runs.begin(claim) is not None
    assert task_runs.begin(claim) is not None
    assert tasks.add.get_result(result.id).worker_ids == ["only-worker"]


def test_a_task_run_row_whose_arguments_are_not_args_and_kwargs_fails_with_a_reason():
    run = create_run("tests.testapp.tasks.add", [1, 2], None, queue="default")
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert "not a task's [args, kwargs]" in row.error["message"]


def test_a_task_defined_in_main_is_refused_at_enqueue(monkeypatch: pytest.MonkeyPatch):
    import types

    main = types.ModuleType("__main__")

    def report() -> None:
        return None

    report.__module__ = "__main__"
    report.__qualname__ = "report"  # module level, as Django requires
    defined = django_task(report)
    main.report = defined  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(InvalidTask, match="script being run"):
        defined.enqueue()
    assert not Workflow.objects.exists()


def test_a_task_ending_with_system_exit_fails_and_sends_task_finished():
    """``SystemExit`` from a task body under run_due(), as in a worker: the run fails,
    Django's task_finished is sent (receivers such as alerting hear of it), and the test
    goes on."""
    seen: list[tuple[str, Any]] = []

    def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((task_result.id, task_result.status))

    signals.task_finished.connect(finished)
    try:
        result = tasks.exits.enqueue(3)
        run_due()
    finally:
        signals.task_finished.disconnect(finished)
    assert seen == [(result.id, TaskResultStatus.FAILED)]
    assert tasks.exits.get_result(result.id).status == TaskResultStatus.FAILED


def test_get_result_gives_back_the_task_as_using_enqueued_it():
    """``Task.using()``'s queue and run_after survive the row: ``get_result()`` equals the
    result ``enqueue()`` returned (every ``TaskResult`` of the run is built the same way:
    the signals' and the body's own ``context.task_result`` too)."""
    from datetime import timedelta

    from django.utils import timezone

    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(queue_name="emails", run_after=later).enqueue(1, 2)
    fetched = tasks.add.get_result(result.id)
    assert fetched == result
    assert (fetched.task.queue_name, fetched.task.run_after, fetched.backend) == (
        "emails",
        later,
        "default",
    )
    plain = tasks.add.enqueue(3, 4)
    assert tasks.add.get_result(plain.id) == plain
    assert tasks.add.get_result(plain.id).task.queue_name == "default"


def finished_with_exceptions() -> tuple[list[tuple[str, Any, Any]], Any]:
    """A ``task_finished`` receiver recording each result's id and status, and the
    exception being handled as it was sent (what Django's ``logger.exception`` logs)."""
    seen: list[tuple[str, Any, Any]] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((task_result.id, task_result.status, sys.exc_info()[1]))

    return seen, receiver


def test_a_cancelled_task_run_sends_task_finished_with_the_cancellation():
    """Issue 54: cancelling a task run (from code, the command, the UI, a bulk action)
    ends it FAILED, and Django's receivers hear of it, with ``RunCancelled`` handled."""
    from everystep import cancel
    from everystep.errors import RunCancelled

    seen, receiver = finished_with_exceptions()
    signals.task_finished.connect(receiver)
    try:
        result = tasks.approval.enqueue(7)
        run_due()  # it waits for its event
        cancel(result, reason="order withdrawn")
        later = tasks.add.enqueue(1, 1)
        cancel_run(later.id, actor=Actor("test", "someone"))
    finally:
        signals.task_finished.disconnect(receiver)
    [(first, status, exc), (second, _, other)] = seen
    assert (first, status, second) == (result.id, TaskResultStatus.FAILED, later.id)
    assert isinstance(exc, RunCancelled) and "cancelled by code (everystep.cancel)" in str(exc)
    assert isinstance(other, RunCancelled) and "someone" in str(other)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_a_failed_tasks_task_finished_is_sent_while_its_exception_is_handled(caplog):
    """As Django's own backends send it: Django's receiver logs the failure with
    ``logger.exception``, so its ERROR line carries the task's exception."""
    seen, receiver = finished_with_exceptions()
    signals.task_finished.connect(receiver)
    try:
        result = tasks.explode.enqueue("handled")
        with caplog.at_level("INFO"):
            run_due()
    finally:
        signals.task_finished.disconnect(receiver)
    [(_, status, exc)] = seen
    assert status == TaskResultStatus.FAILED
    assert isinstance(exc, ValueError) and str(exc) == "exploded: handled"
    [line] = [r for r in caplog.records if "state=FAILED" in r.getMessage()]
    assert line.levelname == "ERROR" and line.exc_info and line.exc_info[1] is exc
    [error] = tasks.explode.get_result(result.id).errors
    assert error.traceback.endswith("ValueError: exploded: handled\n"), "as Django formats it"


def test_a_task_returning_what_cannot_be_stored_fails_with_a_type_error():
    """As on Django's backends, where JSON refuses it: the failure is a ``TypeError``."""
    result = tasks.returns_a_set.enqueue()
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert issubclass(error.exception_class, TypeError)
    assert "cannot serialize value of type builtins.set" in error.traceback


@pytest.mark.parametrize("resumed", [False, True])
def test_the_claim_records_the_attempt_so_no_reader_sees_it_running_without_one(resumed):
    """Issue 54: between a claim and its pass a reader saw RUNNING with no worker and no
    attempt. The claim's own statement records it now; a claim after a durable wait
    continues the attempt instead. ``task_finished``'s result is what ``get_result()``
    reads back."""
    from everystep.engine.execute import run_pass
    from everystep.store.claims import claim_due

    results: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        results.append(task_result)

    result = (tasks.nap if resumed else tasks.add).enqueue(*([0.01] if resumed else [1, 2]))
    if resumed:
        run_due(max_passes=1)  # the nap's first pass, which sleeps 10 ms
        time.sleep(0.05)
    (held,) = claim_due("claimer", 1)
    seen = (tasks.nap if resumed else tasks.add).get_result(result.id)
    assert seen.status == TaskResultStatus.RUNNING
    assert seen.worker_ids == ([RUNNER] if resumed else ["claimer"])
    assert held.task is not None and held.task.new_attempt is not resumed
    signals.task_finished.connect(receiver)
    try:
        assert run_pass(held).status == "completed"
    finally:
        signals.task_finished.disconnect(receiver)
    [sent] = results
    assert sent == (tasks.nap if resumed else tasks.add).get_result(result.id)
    assert sent.return_value == ("rested" if resumed else 3)


def test_cancelled_task_runs_are_told_of_in_chunks(monkeypatch: pytest.MonkeyPatch):
    """A parent's cancelled children may be more than one statement takes parameters:
    the task runs among them are read a chunk at a time, and each is told of."""
    from everystep import cancel

    monkeypatch.setattr(task_runs, "_CANCELLED_CHUNK", 2)
    seen, receiver = finished_with_exceptions()
    parent = tasks.chains.enqueue(1)
    with crash_at("before_body", tasks.first):
        run_due(max_passes=1)  # its three children started, the parent left running
    signals.task_finished.connect(receiver)
    try:
        cancel(parent)
    finally:
        signals.task_finished.disconnect(receiver)
    children = {str(run.id) for run in Workflow.objects.filter(parent_id=parent.id)}
    assert len(children) == 3
    assert {result_id for result_id, _, _ in seen} == {parent.id, *children}
