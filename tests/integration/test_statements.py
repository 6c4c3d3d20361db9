"""Round trips on the hot path, counted per database: a regression in the number of
statements a claim, a step or a finish costs fails here (timings live in bench/)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from everystep import schedule
from everystep.engine.execute import run_pass
from everystep.models import Step, Workflow
from everystep.store.claims import claim_due
from everystep.testing import crash_after
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

# MariaDB has no UPDATE … RETURNING: its claim is a locking SELECT, then the UPDATE.
CLAIM_STATEMENTS = 2 if connection.vendor == "mysql" else 1
# On PostgreSQL a pass's last record is written by the statement that gives the run its
# outcome (one statement, both or neither): no statement of its own.
LAST_RECORD_STATEMENTS = 0 if connection.vendor == "postgresql" else 1


@contextmanager
def counted() -> Iterator[list[str]]:
    """Every statement this thread's connection sends inside the block (the connection
    is opened first: its set-up statements are not the code under test)."""
    connection.ensure_connection()
    statements: list[str] = []

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(" ".join(sql.split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield statements


def inserts_into_step(statements: list[str]) -> list[str]:
    """The statements that insert a step record, alone or with the run's outcome."""
    return [sql for sql in statements if f"INSERT INTO {Step._meta.db_table} " in sql]


def test_a_claim_is_one_round_trip_and_carries_what_the_pass_needs():
    """Claiming costs one statement (two on MariaDB) and returns name, arguments and
    whether anything is recorded."""
    run = schedule(wf.sequential, 2, 3)
    with counted() as statements:
        (held,) = claim_due("counter", 8)
    assert len(statements) == CLAIM_STATEMENTS, statements
    assert (held.run_id, held.workflow, held.args, held.fresh) == (
        run.id,
        "tests.testapp.workflows.sequential",
        [2, 3],
        True,
    )


def test_a_fresh_run_costs_one_statement_per_step_and_one_to_finish():
    """A fresh 4-step run: 4 fenced inserts and 1 finish, the last insert in the finish
    on PostgreSQL; no read of the run or its steps."""
    run = schedule(wf.sequential, 2, 3)
    (held,) = claim_due("counter", 1)
    with counted() as statements:
        assert run_pass(held).status == "completed"
    assert len(inserts_into_step(statements)) == 4
    assert len(statements) == 4 + LAST_RECORD_STATEMENTS, statements
    assert Step.objects.filter(workflow=run).count() == 4


def test_a_resumed_run_reads_its_steps_once():
    """After a crash, the resuming pass reads the recorded steps in one query, then pays
    one statement per new step and one to finish."""
    run = schedule(wf.sequential, 2, 3)
    (held,) = claim_due("counter", 1)
    with crash_after(wf.pair):
        assert run_pass(held).status == "abandoned"
    Workflow.objects.filter(id=run.id).requeue()
    (again,) = claim_due("counter", 1)
    assert not again.fresh
    with counted() as statements:
        assert run_pass(again).status == "completed"
    # load steps (1) + pair and peek (2) + finish (1)
    assert len(inserts_into_step(statements)) == 2
    assert len(statements) == 3 + LAST_RECORD_STATEMENTS, statements


def test_an_unsafe_step_costs_its_start_and_its_outcome():
    """An unsafe_to_repeat step commits a start before its body and settles it after:
    two statements, the others one each."""
    schedule(wf.payment, 5)
    (held,) = claim_due("counter", 1)
    with counted() as statements:
        assert run_pass(held).status == "completed"
    # echo, charge (start + settle), echo, finish
    assert len(statements) == 4 + LAST_RECORD_STATEMENTS, statements


def test_a_claim_takes_at_most_its_limit():
    """A claim of n runs marks exactly n of the due runs running, oldest first (a locking
    subquery run more than once would take more)."""
    runs = [schedule(wf.sequential, i, i) for i in range(6)]
    held = claim_due("counter", 2)
    assert [claim.run_id for claim in held] == [run.id for run in runs[:2]]
    assert Workflow.objects.filter(status="running").count() == 2
    assert len(claim_due("counter", 10)) == 4


def test_an_idle_poll_is_one_statement():
    """An idle worker's poll costs one statement on every database when nothing is due,
    sleeping runs included, and tells it when the next run is due."""
    from datetime import timedelta

    from everystep.worker import Worker

    worker = Worker(name="counter", pool_size=4)
    # The loop's first statement on a connection sets how long it waits for a lock.
    worker._claim(4)
    worker._idle = True
    with counted() as statements:
        assert worker._claim(4) == []
    assert len(statements) == 1, statements
    sleeper = schedule(wf.sequential, 1, 1, delay=timedelta(minutes=5))
    with counted() as statements:
        assert worker._claim(4) == []
    assert len(statements) == 1, statements
    assert worker._next_due == Workflow.objects.get(id=sleeper.id).due_at
    assert 0 < worker._until_due(600) <= 300
    run = schedule(wf.sequential, 1, 1)
    (held,) = worker._claim(4)
    assert held.run_id == run.id


def test_a_task_runs_pass_costs_what_a_workflow_runs_does():
    """A Django task's run (issue 54): the claim records its attempt and reads what its
    ``TaskResult`` holds, and ``task_finished`` is built from the pass, so its pass is
    the outcome alone: no read of the run, no write of the attempt."""
    from tests.testapp import tasks

    tasks.add.enqueue(2, 3)
    with counted() as claiming:
        (held,) = claim_due("counter", 1)
    assert len(claiming) == CLAIM_STATEMENTS, claiming
    with counted() as statements:
        assert run_pass(held).status == "completed"
    assert len(statements) == 1, statements
