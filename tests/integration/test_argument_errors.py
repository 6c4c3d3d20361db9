"""The errors a newcomer meets in a first hour (issue 18) say what is wrong and what to
do, on every database (arguments that do not fit the workflow, a reused idempotency key,
a model instance as a step result, bad command arguments)."""

from __future__ import annotations

import functools
import io
import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.utils import timezone

from everystep import schedule, scheduling, step, workflow
from everystep.errors import EverystepError
from everystep.models import Status, Workflow
from everystep.store.runners import beat
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


# --- workflows of this module ------------------------------------------------------------


@workflow
def flexible(first: int, second: int = 2, *rest: int) -> int:
    return first + second + sum(rest)


@workflow
def keyword_only(first: int, *, required: int) -> int:
    return first + required


def logged(fn: Any) -> Any:
    """A decorator of the user's own, put over ``@workflow``: its wrapper takes anything."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@logged
@workflow
def decorated(first: int, second: int) -> int:
    return first + second


@step
def create_user(username: str) -> User:
    return User.objects.create(username=username)


@step
def staff_users() -> Any:
    return User.objects.filter(is_staff=True)


@workflow
def returns_a_user(username: str) -> Any:
    return create_user(username)


@workflow
def returns_a_queryset() -> Any:
    return staff_users()


# --- schedule(): arguments against the workflow's signature ------------------------------


def test_a_missing_argument_is_a_type_error_naming_the_workflow_and_writes_nothing():
    """schedule() with too few arguments raises TypeError naming the workflow; no row."""
    with pytest.raises(TypeError) as caught:
        schedule(wf.sequential, 1)
    message = str(caught.value)
    assert "tests.testapp.workflows.sequential" in message
    assert "missing a required argument: 'b'" in message
    assert Workflow.objects.count() == 0


def test_an_extra_argument_is_a_type_error_and_writes_nothing():
    """schedule() with more arguments than the workflow takes raises TypeError; no row."""
    with pytest.raises(TypeError, match=r"named-flow.*too many positional arguments"):
        schedule(wf.named, 1)
    # Python 3.12 says "missing a required keyword-only argument".
    with pytest.raises(TypeError, match=r"keyword_only.*missing a required (keyword-only )?arg"):
        schedule(keyword_only, 1)
    assert Workflow.objects.count() == 0


def test_defaults_and_star_args_are_accepted():
    """Arguments that bind (defaults left out, extra ones caught by *rest) are scheduled."""
    runs = [schedule(flexible, 1), schedule(flexible, 1, 5), schedule(flexible, 1, 2, 3, 4)]
    run_due()
    results = [Workflow.objects.get(id=run.id).result for run in runs]
    assert results == [3, 6, 10]


def test_arguments_are_bound_against_the_users_function_under_a_wrapper():
    """A wrapper over @workflow (taking *args) does not hide the body's real signature."""
    with pytest.raises(TypeError, match=r"decorated.*missing a required argument: 'second'"):
        schedule(decorated, 1)
    run = schedule(decorated, 1, 2)
    run_due()
    assert Workflow.objects.get(id=run.id).result == 3


def test_the_signature_is_read_once_per_workflow(monkeypatch: pytest.MonkeyPatch):
    """Scheduling a workflow many times inspects its signature once for the arguments'
    check and once for its annotations (``everystep.shapes``), both cached."""
    from everystep.shapes import signatures

    scheduling._signature.cache_clear()
    signatures._signatures.pop(wf.sequential, None)
    reads: list[Any] = []
    real = scheduling.inspect.signature

    def counting(fn: Any) -> Any:
        reads.append(fn)
        return real(fn)

    monkeypatch.setattr(scheduling.inspect, "signature", counting)
    for i in range(5):
        schedule(wf.sequential, i, i)
    assert len(reads) == 2


# --- idempotency keys ----------------------------------------------------------------------


def test_a_key_reused_with_other_arguments_returns_the_run_and_warns(caplog):
    """Same workflow and key, other arguments: the existing run, unchanged, and a warning
    naming the key, the run and both argument lists."""
    first = schedule(wf.sequential, 1, 2, idempotency_key="order-1")
    with caplog.at_level(logging.WARNING, logger="everystep.schedule"):
        again = schedule(wf.sequential, 9, 9, idempotency_key="order-1")
    assert again.id == first.id and again.args == [1, 2]
    assert list(Workflow.objects.values_list("id", "args")) == [(first.id, [1, 2])]
    [record] = [r for r in caplog.records if r.name == "everystep.schedule"]
    message = record.getMessage()
    assert record.event == "schedule.idempotency_conflict"
    assert str(first.id) in message and "'order-1'" in message
    assert "[1,2]" in message and "[9,9]" in message


def test_the_same_key_and_arguments_do_not_warn(caplog):
    """A plain repeat of a schedule (same key, same arguments) is not worth a warning."""
    first = schedule(wf.sequential, 1, 2, idempotency_key="order-2")
    with caplog.at_level(logging.WARNING, logger="everystep.schedule"), transaction.atomic():
        again = schedule(wf.sequential, 1, 2, idempotency_key="order-2")
        other = schedule(wf.sequential, 3, 4, idempotency_key="order-3")
    assert again.id == first.id
    assert set(Workflow.objects.values_list("id", flat=True)) == {first.id, other.id}
    assert not [r for r in caplog.records if r.name == "everystep.schedule"]


def test_same_arguments_in_another_python_form_return_the_existing_run():
    """Arguments are compared as stored: a tuple (stored as a list) or another key order
    of a dict is the same run."""
    first = schedule(wf.sequential, [1, 2], {"a": 1, "b": 2}, idempotency_key="same")
    again = schedule(wf.sequential, (1, 2), {"b": 2, "a": 1}, idempotency_key="same")
    assert again.id == first.id
    assert Workflow.objects.count() == 1


def test_same_key_and_arguments_at_another_time_return_the_run_unchanged():
    """The due time is not part of a key's identity: a later at=/delay= returns the
    existing run, whose due time stays as first scheduled."""
    first = schedule(wf.sequential, 1, 2, idempotency_key="timed")
    due = Workflow.objects.get(id=first.id).due_at
    again = schedule(wf.sequential, 1, 2, delay=timedelta(hours=1), idempotency_key="timed")
    assert again.id == first.id
    assert Workflow.objects.get(id=first.id).due_at == due
    assert Workflow.objects.count() == 1


def test_concurrent_schedules_of_one_key_with_different_arguments_make_one_run():
    """Eight threads race one key with eight argument lists: one run is created and every
    thread gets that run."""
    barrier = threading.Barrier(8)
    made: list[uuid.UUID] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def schedule_once(n: int) -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                run = schedule(wf.sequential, n, n, idempotency_key="race")
            with lock:
                made.append(run.id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=schedule_once, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(made) == 8 and len(set(made)) == 1
    assert list(Workflow.objects.values_list("id", flat=True)) == made[:1]


# --- a model instance where a value is stored ----------------------------------------------


def test_a_step_returning_a_model_instance_fails_saying_to_return_its_pk():
    """A step that returns a User fails the run with a message saying to return user.pk."""
    run = schedule(returns_a_user, "ada")
    run_due()
    run.refresh_from_db()
    assert run.status == Status.FAILED
    message = run.error["message"]
    assert "result of step 1" in message
    assert "is a User model instance (django.contrib.auth.models.User)" in message
    assert "return its primary key (user.pk) and load it again in the next step" in message


def test_a_model_instance_as_an_argument_is_refused_saying_to_pass_its_pk():
    """schedule() with a model instance raises EverystepError saying to pass its pk."""
    user = User.objects.create(username="grace")
    with pytest.raises(EverystepError, match=r"pass its primary key \(user\.pk\)"):
        schedule(wf.sequential, user, 1)
    assert Workflow.objects.count() == 0


def test_a_step_returning_a_queryset_fails_saying_to_return_primary_keys():
    """A step that returns a QuerySet fails the run with a message suggesting a pk list."""
    run = schedule(returns_a_queryset)
    run_due()
    run.refresh_from_db()
    assert run.status == Status.FAILED
    assert "is a QuerySet of User" in run.error["message"]
    assert "values_list('pk', flat=True)" in run.error["message"]


# --- commands: choices and names -----------------------------------------------------------


def test_check_replay_lists_its_status_choices_as_plain_words():
    """everystep_check_replay --status completed lists scheduled, running, blocked."""
    with pytest.raises(CommandError) as caught:
        call_command("everystep_check_replay", "--status", "completed")
    message = str(caught.value)
    assert "invalid choice: 'completed'" in message
    assert "Status" not in message
    assert all(f"'{status}'" in message for status in ("scheduled", "running", "blocked"))


def test_requeue_runner_refuses_an_unknown_runner_and_lists_the_known_ones():
    """An unknown runner name is an error listing the runner names that exist."""
    for name in ("worker-b", "worker-a"):
        beat(name, uuid.uuid4(), pool_size=1, inflight=0, draining=False, started_at=timezone.now())
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("everystep_requeue_runner", "no-such-runner", stdout=out)
    message = str(caught.value)
    assert message.startswith("unknown runner 'no-such-runner'")
    assert "known runners: 'worker-a', 'worker-b'" in message
    assert out.getvalue() == ""


def test_requeue_runner_still_takes_a_name_that_holds_runs_without_a_heartbeat():
    """A runner with running runs but no heartbeat row is known: its runs are requeued."""
    run = schedule(wf.sequential, 1, 2)
    Workflow.objects.filter(id=run.id).update(status=Status.RUNNING, claimed_by="gone")
    out = io.StringIO()
    call_command("everystep_requeue_runner", "gone", stdout=out)
    assert out.getvalue().splitlines() == [str(run.id), "requeued 1 run(s) held by 'gone'"]
    assert Workflow.objects.get(id=run.id).status == Status.SCHEDULED
