"""The writes that end a claimed pass, each fenced by the claim: the run's outcome
(``finish_run``, which can carry the pass's last step record), its release to wait
(``suspend_run``), its requeue (``requeue_run``). The records the pass makes before that
are ``everystep.store.step_records``'s; together the two modules hold every write made
for a claimed run.

*Fenced* (``everystep.models.fence``): each applies only on the condition that the claim
still holds the run, so a cancel, requeue or takeover serialises with it and a stale
worker's write changes nothing (it returns False). The outcome is one ``UPDATE`` (with
the step record's ``INSERT`` where the database carries one in the same statement);
releasing the run, or requeueing it, is a fenced ``UPDATE`` too.

The outcome's statements are built once per database (``everystep.store.sql``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db import DatabaseError, IntegrityError
from django.db.models import Case, Value, When
from django.utils import timezone

from everystep.errors import AlreadyRecorded
from everystep.models import FINAL_STATUSES, Event, Status, Workflow, finish_fields
from everystep.store import database, run_waits
from everystep.store.guard import guarded
from everystep.store.sql import RUNS, STEPS, Vendor, current, fenced, vendor_of
from everystep.store.step_records import STEP_COLUMNS, step_params
from everystep.store.wake import notify_due
from everystep.values import Claim
from everystep.wait_words import awaited

logger = logging.getLogger("everystep.run")

_FINISH_COLUMNS = tuple(finish_fields(Status.FAILED, None, None, None))


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
        f"s AS (INSERT INTO {STEPS} (workflow_id, {', '.join(STEP_COLUMNS)}) "
        f"SELECT f.id, {', '.join(db.placeholder(c) for c in STEP_COLUMNS)} FROM f) "
        "SELECT awaited FROM f"
    )


def merges_records(conn: Any) -> bool:
    """Whether ``finish_run`` writes a step record with the outcome in one statement on
    everystep's connection ``conn`` (PostgreSQL, outside a caller's transaction): only
    then is a pass's last record worth holding back for it (``engine.core.recorded.record``)."""
    return vendor_of(conn).carries_records and not conn.in_atomic_block


@guarded
def finish_run(
    claim: Claim,
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    step: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """Give the run its outcome in one statement, and wake whoever awaits it; False if
    this claim no longer holds it (nothing was written). ``step``: a step record
    (``step_values``) written with the outcome, in the same statement (only where
    ``merges_records``): both or neither."""
    db, conn = current()
    fields = finish_fields(status, result, error, now or timezone.now())
    params = db.params(_FINISH_COLUMNS, fields) + db.fence_params(claim)
    if step is None:
        cursor = db.execute(conn, db.statement("finish", _finish_statement), params)
    else:
        assert db.carries_records, "a step record is carried only where merges_records"
        statement = db.statement("finish_step", _finish_with_step_statement)
        try:
            cursor = db.execute(conn, statement, params + step_params(db, step))
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
def requeue_run(claim: Claim, **also: Any) -> bool:
    """Put the run back to ``scheduled`` with its claim released; False if not ours.
    ``also``: more columns to set (``handed_back_by``)."""
    touched = Workflow.objects.held_by(claim).requeue(**also)
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
            # A task's run (``queue`` set) resumes the same attempt when it is claimed
            # again (``everystep.store.task_attempts``); other runs keep NULL.
            resumes=Case(When(queue__isnull=False, then=Value(True)), default=Value(None)),
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
