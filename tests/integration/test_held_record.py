"""A pass's last record, held back and written with the run's outcome.

On PostgreSQL an outcome record of the body's own scope is written only when the pass
writes anything else, forks, starts another step's body or ends, and the run's outcome
carries the last one in the same statement. These are the guarantees that must survive
it, on every database (elsewhere each record is written at once, and the same holds):
no step starts while an earlier outcome is unwritten; the last record and the outcome
commit together or not at all; a drain or a clash still writes or replays what it must.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from everystep import schedule, step, workflow
from everystep.context import current
from everystep.engine.execute import run_pass
from everystep.models import Step, Workflow
from everystep.store.claims import claim_due
from everystep.testing import run_due

pytestmark = pytest.mark.django_db(transaction=True)

executed: list[str] = []


@step
def first(x: int) -> int:
    executed.append("first")
    return x + 1


@step
def sees_first_recorded(x: int) -> list[str]:
    """Reads, from the database, which steps of its run are recorded."""
    executed.append("second")
    ctx = current()
    assert ctx is not None
    return sorted(
        Step.objects.filter(workflow_id=ctx.workflow_id).values_list("step_id", flat=True)
    )


@step
def loses_the_claim(x: int) -> int:
    """Its run is taken back (as an operator's requeue would) while it runs."""
    executed.append("loses")
    ctx = current()
    assert ctx is not None
    Workflow.objects.filter(id=ctx.workflow_id).requeue()
    return x


@step
def recorded_meanwhile(x: int) -> int:
    """Another pass records this very step while it runs: this one's record clashes."""
    executed.append("clash")
    ctx = current()
    assert ctx is not None and ctx.step_id is not None
    Step.objects.create(
        workflow_id=ctx.workflow_id,
        step_id=ctx.step_id,
        name=f"{__name__}.recorded_meanwhile",
        status="done",
        result=41,
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    return x


@step(atomic=True)
def in_its_transaction(x: int) -> int:
    executed.append("atomic")
    return x


@workflow
def atomic_at_the_end(x: int) -> Any:
    return in_its_transaction(first(x))


@workflow
def reads_back(x: int) -> Any:
    return sees_first_recorded(first(x))


@workflow
def lost_at_the_end(x: int) -> Any:
    return loses_the_claim(first(x))


@workflow
def clash_at_the_end(x: int) -> Any:
    return recorded_meanwhile(first(x))


@pytest.fixture(autouse=True)
def _reset() -> None:
    executed.clear()


def test_a_step_starts_only_once_the_outcome_before_it_is_written():
    """The second step's body finds the first's record in the database."""
    run = schedule(reads_back, 1)
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", ["1"])
    assert sorted(Step.objects.filter(workflow=run).values_list("step_id", flat=True)) == [
        "1",
        "2",
    ]


def test_the_last_record_and_the_outcome_are_written_together_or_not_at_all():
    """The claim is lost while the last step runs: neither its record nor the outcome
    is written; the record before it is."""
    run = schedule(lost_at_the_end, 1)
    (held,) = claim_due("held", 1)
    assert run_pass(held).status == "abandoned"
    run.refresh_from_db()
    assert run.status == "scheduled" and run.result is None
    assert list(Step.objects.filter(workflow=run).values_list("step_id", flat=True)) == ["1"]


def test_a_last_record_that_clashes_requeues_the_run_and_the_next_pass_serves_it():
    """Another pass recorded the last step meanwhile: the outcome is not written, the run
    is requeued, and the next pass ends with the record that won."""
    run = schedule(clash_at_the_end, 1)
    (held,) = claim_due("held", 1)
    assert run_pass(held).status == "requeued"
    run.refresh_from_db()
    assert run.status == "scheduled"
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", 41)
    assert executed == ["first", "clash"]


def test_a_drain_writes_the_held_record_before_the_run_is_requeued():
    """A drain asked while the first step runs: the run goes back with that step
    recorded, and the next pass does not run it again."""
    run = schedule(reads_back, 1)
    (held,) = claim_due("held", 1)
    assert run_pass(held, should_drain=lambda: "first" in executed).status == "requeued"
    assert list(Step.objects.filter(workflow=run).values_list("step_id", flat=True)) == ["1"]
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", ["1"])
    assert executed == ["first", "second"]


def statements_of_a_pass(held: Any) -> list[str]:
    """Every statement a completed pass over ``held`` sent, blanks squeezed."""
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(" ".join(sql.split()))
        return execute(sql, params, many, context)

    connection.ensure_connection()
    with connection.execute_wrapper(count):
        assert run_pass(held).status == "completed"
    return statements


@pytest.mark.backends("postgres")
def test_on_postgresql_the_last_record_costs_no_statement_of_its_own():
    """Two steps: one statement for the first record, one for the outcome with the second."""
    schedule(reads_back, 1)
    (held,) = claim_due("held", 1)
    statements = statements_of_a_pass(held)
    recorded = [sql for sql in statements if "INSERT INTO everystep_step " in sql]
    assert len(recorded) == 2, statements
    assert recorded[1].startswith("WITH") and "UPDATE everystep_workflow" in recorded[1]


@pytest.mark.backends("postgres")
def test_an_atomic_steps_record_is_never_held_back_from_its_transaction():
    """An atomic last step: its record is its own INSERT, sent inside the step's
    transaction with the body's writes, never carried by the run's outcome."""
    schedule(atomic_at_the_end, 1)
    (held,) = claim_due("held", 1)
    statements = statements_of_a_pass(held)
    assert executed == ["first", "atomic"]
    plain = [sql for sql in statements if sql.startswith("INSERT INTO everystep_step ")]
    assert len(plain) == 2, statements
    assert not any(sql.startswith("WITH") for sql in statements), statements
