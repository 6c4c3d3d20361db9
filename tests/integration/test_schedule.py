"""schedule(): transactional insert, refusal before any write, idempotency keys."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from everystep import schedule
from everystep.errors import EverystepError
from everystep.models import Workflow
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def test_schedule_inserts_a_scheduled_run():
    """A scheduled run stores the workflow name and its encoded arguments."""
    run = schedule(wf.sequential, 1, 2)
    row = Workflow.objects.get(id=run.id)
    assert row.status == "scheduled"
    assert row.name == "tests.testapp.workflows.sequential"
    assert row.args == [1, 2]
    assert row.claimed_by is None and row.started_at is None


def test_schedule_rolled_back_with_its_transaction_leaves_no_row():
    """A rollback of the caller's transaction removes the scheduled run."""
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule(wf.sequential, 1, 2)
        raise RuntimeError("the business change failed")
    assert Workflow.objects.count() == 0


def test_schedule_commits_with_its_transaction():
    """The run becomes visible when the caller's transaction commits."""
    with transaction.atomic():
        run = schedule(wf.sequential, 1, 2)
    assert Workflow.objects.filter(id=run.id, status="scheduled").exists()


def test_schedule_refuses_a_non_workflow_before_writing():
    """A plain function is refused with TypeError and nothing is written."""
    with pytest.raises(TypeError, match="not a @workflow"):
        schedule(wf.add.__wrapped__, 1, 2)
    with pytest.raises(TypeError):
        schedule(wf.add, 1, 2)
    assert Workflow.objects.count() == 0


def test_schedule_refuses_unserializable_arguments_before_writing():
    """Arguments that cannot be stored raise EverystepError naming the type; no row."""
    with pytest.raises(EverystepError, match=r"builtins\.set"):
        schedule(wf.sequential, {1, 2}, 3)
    assert Workflow.objects.count() == 0


def test_idempotency_key_returns_the_existing_run():
    """The same workflow and key return the first run; another key or workflow does not."""
    first = schedule(wf.sequential, 1, 2, idempotency_key="order-1")
    again = schedule(wf.sequential, 9, 9, idempotency_key="order-1")
    other_key = schedule(wf.sequential, 1, 2, idempotency_key="order-2")
    other_flow = schedule(wf.named, idempotency_key="order-1")
    assert again.id == first.id and again.args == [1, 2]
    assert len({first.id, other_key.id, other_flow.id}) == 3
    assert Workflow.objects.count() == 3


def test_same_idempotency_key_from_eight_threads_yields_one_run():
    """Concurrent schedules of one key create exactly one run and all return it."""
    barrier = threading.Barrier(8)
    ids: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def schedule_once() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                run = schedule(wf.sequential, 1, 2, idempotency_key="race")
            with lock:
                ids.append(run.id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=schedule_once) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(ids) == 8 and len(set(ids)) == 1
    assert Workflow.objects.filter(idempotency_key="race").count() == 1
