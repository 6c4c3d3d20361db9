"""Every write made on behalf of a claimed run, in one place.

Each is *fenced* (``everystep.models.fence``): it applies only on the condition that the
claim still holds the run. A step record is one ``INSERT … SELECT … FROM`` the run row
``WHERE`` the claim holds it, taking a share lock on that row (PostgreSQL ``FOR SHARE``,
MariaDB ``LOCK IN SHARE MODE``; SQLite's write lock does it), so a cancel, requeue or
takeover serialises with the record and a stale worker's record inserts nothing. The
outcome of the run is one fenced ``UPDATE``; releasing it to wait, or requeueing it, is
a fenced ``UPDATE`` too. What a refused write means is said once (``refused``).

The per-step statements are built once per database (``everystep.store.sql``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from django.utils import timezone

from everystep.errors import AlreadyRecorded, ClaimLost, RunGone, StoreUnavailable
from everystep.models import (
    FINAL_STATUSES,
    Event,
    Status,
    StepStatus,
    Workflow,
    finish_fields,
    uuid7,
)
from everystep.store import database, run_waits
from everystep.store.guard import guarded
from everystep.store.sql import RUNS, STEPS, Vendor, current, fenced, vendor_of
from everystep.store.wake import notify_due
from everystep.values import Claim
from everystep.wait_words import awaited

logger = logging.getLogger("everystep.run")

_STEP_COLUMNS = (
    "step_id",
    "name",
    "args",
    "kwargs",
    "status",
    "result",
    "error",
    "started_at",
    "finished_at",
)
_CONCLUDED = ("status", "result", "error", "finished_at")
_FINISH_COLUMNS = tuple(finish_fields(Status.FAILED, None, None, None))


def refused(claim: Claim) -> ClaimLost:
    """Why a fenced write changed nothing: the run is gone, or no longer ours."""
    if not Workflow.objects.filter(id=claim.run_id).exists():
        return RunGone(f"run {claim.run_id} no longer exists")
    return ClaimLost(f"run {claim.run_id} is no longer claimed by this pass of {claim.runner}")


@dataclass(frozen=True)
class Child:
    """A child run a record starts (``everystep.start``): inserted in the record's
    transaction, and named by the record's result."""

    name: str
    args: list[Any]
    idempotency_key: str | None = None


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
    with a key takes ``create_run``'s way, which returns the run holding the key."""
    if child.idempotency_key is not None:
        from everystep.store.runs import create_run

        return create_run(child.name, child.args, child.idempotency_key, parent=claim.run_id).id
    db, conn = current()
    run_id, now = uuid7(), timezone.now()
    values = {
        "id": run_id,
        "name": child.name,
        "args": child.args,
        "created_at": now,
        "updated_at": now,
        "due_at": now,
        "parent_id": claim.run_id,
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
        f"status, recoveries, awaited) VALUES (%s, %s, {db.placeholder('args')}, "
        f"%s, %s, %s, %s, '{Status.SCHEDULED.value}', 0, FALSE)"
    )


def _step_params(db: Vendor, values: dict[str, Any]) -> list[Any]:
    """A step record's values (``step_values``) as the driver takes them, in the order
    of ``_STEP_COLUMNS``."""
    return db.params(_STEP_COLUMNS, values)


def _insert_statement(db: Vendor) -> str:
    return (
        f"INSERT INTO {STEPS} (workflow_id, {', '.join(_STEP_COLUMNS)}) "
        f"SELECT w.id, {', '.join(db.placeholder(c) for c in _STEP_COLUMNS)} "
        f"FROM {RUNS} w WHERE {fenced('w.')} {db.share}"
    )


def _insert(claim: Claim, values: dict[str, Any]) -> bool:
    db, conn = current()
    statement = db.statement("insert_step", _insert_statement)
    cursor = db.execute(conn, statement, _step_params(db, values) + db.fence_params(claim))
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


def _finish_awaited_statement(db: Vendor) -> str:
    outcome = ", ".join(f"{c} = {db.placeholder(c)}" for c in _FINISH_COLUMNS)
    return f"UPDATE {RUNS} SET {outcome} WHERE {fenced()}"


def _finish_statement(db: Vendor) -> str:
    if db.returning:
        # Whether anyone awaits the run comes back with the outcome.
        return f"{_finish_awaited_statement(db)} RETURNING awaited"
    # MariaDB cannot return it: the outcome of a run nobody awaits (nearly every run)
    # is written on that condition, and an awaited one's by ``_finish_awaited_statement``.
    return f"{_finish_awaited_statement(db)} AND awaited = FALSE"


def _finish_with_step_statement(db: Vendor) -> str:
    # The outcome's UPDATE is the fence (its row lock, re-checked under concurrent
    # writes); the step is inserted from what it returns, so both apply or neither.
    outcome = ", ".join(f"{c} = {db.placeholder(c)}" for c in _FINISH_COLUMNS)
    return (
        f"WITH f AS (UPDATE {RUNS} SET {outcome} WHERE {fenced()} RETURNING id, awaited), "
        f"s AS (INSERT INTO {STEPS} (workflow_id, {', '.join(_STEP_COLUMNS)}) "
        f"SELECT f.id, {', '.join(db.placeholder(c) for c in _STEP_COLUMNS)} FROM f) "
        "SELECT awaited FROM f"
    )


def merges_records(conn: Any) -> bool:
    """Whether ``finish_run`` writes a step record with the outcome in one statement on
    everystep's connection ``conn`` (PostgreSQL, outside a caller's transaction): only
    then is a pass's last record worth holding back for it (``engine.recorded.record``)."""
    return vendor_of(conn).carries_records and not conn.in_atomic_block


@guarded
def finish_run(
    claim: Claim,
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    step: dict[str, Any] | None = None,
) -> bool:
    """Give the run its outcome in one statement, and wake whoever awaits it; False if
    this claim no longer holds it (nothing was written). ``step``: a step record
    (``step_values``) written with the outcome, in the same statement (only where
    ``merges_records``): both or neither."""
    db, conn = current()
    fields = finish_fields(status, result, error, timezone.now())
    params = db.params(_FINISH_COLUMNS, fields) + db.fence_params(claim)
    if step is None:
        cursor = db.execute(conn, db.statement("finish", _finish_statement), params)
    else:
        assert db.carries_records, "a step record is carried only where merges_records"
        statement = db.statement("finish_step", _finish_with_step_statement)
        try:
            cursor = db.execute(conn, statement, params + _step_params(db, step))
        except IntegrityError as exc:
            raise AlreadyRecorded(
                f"step {step['step_id']} of run {claim.run_id} is already recorded"
            ) from exc
    if db.returning:
        rows = cursor.fetchall()
        if not rows:
            return False
        awaited = bool(rows[0][0])
    elif cursor.rowcount == 1:
        awaited = False
    else:
        # Awaited, or no longer ours. A waiter that marks the run locks its row first, so
        # the condition above saw its mark, committed, or waited for it (``run_waits``).
        statement = db.statement("finish_awaited", _finish_awaited_statement)
        if db.execute(conn, statement, params).rowcount != 1:
            return False
        awaited = True
    if awaited and status in FINAL_STATUSES:
        try:
            run_waits.ended([claim.run_id])
        except DatabaseError as exc:  # the outcome stands; the heartbeats' sweep wakes them
            logger.warning(
                "run %s ended, but waking the runs that wait for it failed (%s); the "
                "next sweep wakes them",
                claim.run_id,
                exc,
                extra={
                    "event": "run.wake_failed",
                    "run_id": str(claim.run_id),
                    "runner": claim.runner,
                },
            )
    return True


@guarded
def requeue_run(claim: Claim) -> bool:
    """Put the run back to ``scheduled`` with its claim released; False if not ours."""
    touched = Workflow.objects.held_by(claim).requeue()
    if touched:
        notify_due()
    return touched == 1


@guarded
def suspend_run(
    claim: Claim,
    due: datetime | None,
    events: frozenset[str],
    runs: Collection[uuid.UUID] = frozenset(),
) -> bool:
    """Release the claimed run until ``due`` (None: until one of ``events`` is sent, or
    the last of ``runs`` ends); False if the claim no longer holds it.

    The race with an event sent meanwhile is closed by the run row's lock: this updates
    the row first and only then looks for the events it awaits, and ``send_event``
    updates (locks) the row before inserting the event. The race with an awaited run
    ending meanwhile is closed the same way from the other side (``run_waits.hold``)."""
    now = timezone.now()
    with database.atomic():
        # The awaited runs' rows are locked before this run's own (``run_waits``: one order).
        pending = run_waits.hold(claim.run_id, runs) if runs else []
        released = Workflow.objects.held_by(claim).update(
            status=Status.SCHEDULED,
            claimed_by=None,
            claim_token=None,
            due_at=now if runs and not pending else due,
            waiting_for=_waiting_for(events, pending),
            updated_at=now,
        )
        if not released:
            database.set_rollback()
            return False
        woken = bool(runs) and not pending
        if events:
            # Read with a lock: the latest committed events, whatever the isolation level.
            sent = Event.objects.select_for_update().filter(
                workflow_id=claim.run_id, name__in=events
            )
            if sent.exists():
                Workflow.objects.filter(id=claim.run_id).update(due_at=now)
                woken = True
        if woken or (due is not None and due <= now):
            notify_due()
    return True


def _waiting_for(events: frozenset[str], pending: list[uuid.UUID]) -> str | None:
    """What a waiting run awaits, for operators: its events, or the runs it awaits."""
    return awaited(events, pending)[:255] or None
