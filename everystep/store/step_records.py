"""The records of a claimed run's operations — steps, waits, patch decisions, child
starts — written for ``everystep.engine.core.recorded``: each fenced by the claim. The writes
that end a claimed pass (its outcome, its release to wait, its requeue) are
``everystep.store.outcome``'s; together the two modules hold every write made for a
claimed run.

*Fenced* (``everystep.models.fence``): a write applies only on the condition that the
claim still holds the run. A step record is one ``INSERT … SELECT … FROM`` the run row
``WHERE`` the claim holds it, taking a share lock on that row (PostgreSQL ``FOR SHARE``,
MariaDB ``LOCK IN SHARE MODE``; SQLite's write lock does it), so a cancel, requeue or
takeover serialises with the record and a stale worker's record inserts nothing. A
``started`` record is concluded (given its outcome) by one ``UPDATE`` on the same
condition. What a refused write means is said once (``refused``).

The per-step statements are built once per database (``everystep.store.sql``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, InterfaceError, OperationalError
from django.utils import timezone

from everystep import code_version
from everystep.errors import AlreadyRecorded, ClaimLost, RunGone, StoreUnavailable
from everystep.models import Status, StepStatus, Workflow, uuid7
from everystep.store import database, run_waits
from everystep.store.guard import guarded
from everystep.store.sql import RUNS, STEPS, Vendor, current, fenced
from everystep.store.wake import notify_due
from everystep.values import Claim

STEP_COLUMNS = (
    "step_id",
    "name",
    "args",
    "kwargs",
    "status",
    "result",
    "error",
    "started_at",
    "finished_at",
    "code_version",
)
_CONCLUDED = ("status", "result", "error", "finished_at")


def refused(claim: Claim) -> ClaimLost:
    """Why a fenced write changed nothing: the run is gone, or no longer ours."""
    if not Workflow.objects.filter(id=claim.run_id).exists():
        return RunGone(f"run {claim.run_id} no longer exists")
    return ClaimLost(f"run {claim.run_id} is no longer claimed by this pass of {claim.runner}")


@dataclass(frozen=True)
class Child:
    """A run a body starts (``everystep.start``: ``start()``, and ``schedule()`` or a
    task's ``enqueue()`` called in a body): inserted in the record's transaction, and
    named by the record's result. ``due_at`` None is now; ``queue`` and
    ``task_options`` are a Django task's (``everystep.tasks``)."""

    name: str
    args: list[Any]
    idempotency_key: str | None = None
    due_at: Any = None
    queue: str | None = None
    task_options: dict[str, Any] | None = None


@guarded
def record_step(
    claim: Claim,
    values: dict[str, Any],
    *,
    after_started: bool = False,
    child: Child | None = None,
) -> Any:
    """Record a step's start (unsafe steps, pending waits) or its outcome (``values``,
    from ``step_values``), fenced by the claim: one statement, in autocommit. With
    ``child``, the child run is inserted first and the record commits with it (or
    neither does); the record's result names it. Returns the result recorded."""
    step_id = values["step_id"]
    # A child's run and its start's record commit together: a transaction. Inside a
    # caller's transaction (a test wrapped in one) a failed statement would spoil it; a
    # savepoint keeps it usable. A worker's step record needs neither and pays nothing.
    together = child is not None or database.connection().in_atomic_block
    try:
        with database.atomic() if together else nullcontext():
            if child is not None:
                values["result"] = {"run": str(_insert_child(claim, child)), "workflow": child.name}
            if after_started and _conclude(claim, step_id, values):
                return values["result"]
            if _insert(claim, values):
                return values["result"]
            raise refused(claim)  # leaves the transaction: the child is not created
    except IntegrityError as exc:
        raise AlreadyRecorded(f"step {step_id} of run {claim.run_id} is already recorded") from exc


def step_values(
    *,
    step_id: str,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    status: str,
    started_at: Any,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A step record's columns, finished now unless it only says the step started."""
    return {
        "step_id": step_id,
        "name": name,
        "args": args,
        "kwargs": kwargs,
        "status": status,
        "result": result,
        "error": error,
        "started_at": started_at,
        "finished_at": None if status == StepStatus.STARTED else timezone.now(),
        "code_version": code_version.current(),
    }


@guarded
def conclude_started(
    claim: Claim,
    step_id: str,
    *,
    status: str,
    result: Any = None,
    error: Any = None,
    awaited_runs: bool = False,
) -> None:
    """Replace a pending wait's ``started`` record with its outcome, fenced.
    ``awaited_runs``: a wait for runs (``result``, ``gather``): the run no longer waits,
    so its ``RunWait`` rows go too (``run_waits.release``), once the record is in."""
    values = {"status": status, "result": result, "error": error, "finished_at": timezone.now()}
    if not _conclude(claim, step_id, values):
        raise refused(claim)
    if awaited_runs:
        run_waits.release(claim.run_id)


def _insert_child(claim: Claim, child: Child) -> uuid.UUID:
    """Insert the child run (in the record's transaction); its id. A parent starting a
    thousand children does this a thousand times in one pass, so a child without an
    idempotency key is one statement written for the database, like a step record; one
    with a key (or a task's, rarer) takes ``create_run``'s way, which returns the run
    holding the key."""
    if child.idempotency_key is not None or child.queue is not None:
        from everystep.store.runs import create_run

        return create_run(
            child.name,
            child.args,
            child.idempotency_key,
            due_at=child.due_at,
            parent=claim.run_id,
            queue=child.queue,
            task_options=child.task_options,
        ).id
    db, conn = current()
    run_id, now = uuid7(), timezone.now()
    values = {
        "id": run_id,
        "name": child.name,
        "args": child.args,
        "created_at": now,
        "updated_at": now,
        "due_at": child.due_at or now,
        "parent_id": claim.run_id,
        "code_version": code_version.current(),
    }
    params = [db.param(column, value) for column, value in values.items()]
    db.execute(conn, db.statement("insert_child", _insert_child_statement), params)
    notify_due()
    return run_id


def _insert_child_statement(db: Vendor) -> str:
    # Every column without a NULL default is given: Django's model defaults live in
    # Python, not in the table (``Workflow``'s fields).
    return (
        f"INSERT INTO {RUNS} (id, name, args, created_at, updated_at, due_at, parent_id, "
        f"code_version, status, recoveries, awaited) VALUES (%s, %s, {db.placeholder('args')}, "
        f"%s, %s, %s, %s, %s, '{Status.SCHEDULED.value}', 0, FALSE)"
    )


def step_params(db: Vendor, values: dict[str, Any]) -> list[Any]:
    """A step record's values (``step_values``) as the driver takes them, in the order
    of ``STEP_COLUMNS`` (``outcome.finish_run`` writes one with the outcome)."""
    return db.params(STEP_COLUMNS, values)


def _insert_statement(db: Vendor) -> str:
    return (
        f"INSERT INTO {STEPS} (workflow_id, {', '.join(STEP_COLUMNS)}) "
        f"SELECT w.id, {', '.join(db.placeholder(c) for c in STEP_COLUMNS)} "
        f"FROM {RUNS} w WHERE {fenced('w.')} {db.share}"
    )


def _insert(claim: Claim, values: dict[str, Any]) -> bool:
    db, conn = current()
    statement = db.statement("insert_step", _insert_statement)
    cursor = db.execute(conn, statement, step_params(db, values) + db.fence_params(claim))
    return bool(cursor.rowcount == 1)


def _conclude_statement(db: Vendor) -> str:
    return (
        f"UPDATE {STEPS} SET {', '.join(f'{c} = {db.placeholder(c)}' for c in _CONCLUDED)} "
        f"WHERE workflow_id = %s AND step_id = %s AND status = 'started' AND EXISTS ("
        f"SELECT 1 FROM {RUNS} w WHERE {fenced('w.')} {db.share})"
    )


def _conclude(claim: Claim, step_id: str, values: dict[str, Any]) -> bool:
    """Give a ``started`` record its outcome in one statement, if the claim still holds
    the run; False if nothing was updated."""
    db, conn = current()
    statement = db.statement("conclude_step", _conclude_statement)
    params = db.params(_CONCLUDED, values)
    params += [db.param("id", claim.run_id), step_id, *db.fence_params(claim)]
    cursor = db.execute(conn, statement, params)
    return bool(cursor.rowcount == 1)


@contextmanager
def fenced_transaction(claim: Claim) -> Iterator[None]:
    """A transaction for an atomic step: it starts by locking the run row on the fencing
    condition (a no-op ``UPDATE``: on SQLite it takes the write lock at once, rather than
    failing to upgrade a read lock later), so no requeue or takeover can interleave with
    the step, and the body's writes and the step's record commit together or not at all.
    ``ClaimLost``/``RunGone`` if the claim no longer holds the run: nothing runs."""
    try:
        with database.atomic():
            if not Workflow.objects.held_by(claim).update(claim_token=claim.token):
                raise refused(claim)
            yield
    except (OperationalError, InterfaceError) as exc:
        # Raised here only by the lock or the commit (the body's own errors are its
        # outcome): nothing committed, the step runs again once the database is back.
        raise StoreUnavailable(f"database unavailable in an atomic step: {exc}") from exc
