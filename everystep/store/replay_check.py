"""The reads of the replay check (``everystep_check_replay``): unfinished runs in id order,
a batch at a time, with their records, inside a read-only transaction.

The check runs against a live production database while workers write to it, so it
must never write and never hold anything for long: each batch is one short transaction
that the database itself keeps read-only (a bug, or a workflow body that writes between
its steps, gets an error instead of changing anything), with a consistent view of the
batch's runs and steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Exists, OuterRef

from everystep.errors import EverystepError
from everystep.models import Status, Step, Workflow
from everystep.store import database
from everystep.values import RecordedStep

# Statuses a run can be replayed from: waiting runs are ``scheduled`` (``due_at`` and
# ``waiting_for`` say what they wait for).
CHECKED_STATUSES = (Status.SCHEDULED, Status.RUNNING, Status.BLOCKED)


@dataclass(frozen=True)
class RunToCheck:
    run_id: UUID
    workflow: str
    status: str
    args: Any
    records: dict[str, RecordedStep]


@contextmanager
def read_only() -> Iterator[None]:
    """A transaction the database refuses to write in, with one snapshot for all its
    reads. Refused inside an open transaction: the mode must be set before its first
    statement, and would otherwise leak into the caller's transaction."""
    if database.connection().in_atomic_block:
        raise EverystepError(
            "the replay check must run outside a transaction (it opens read-only ones)"
        )
    if database.connection().vendor == "sqlite":
        # No read-only transactions: the connection itself refuses writes meanwhile.
        with database.connection().cursor() as cursor:
            cursor.execute("PRAGMA query_only = ON")
        try:
            with ExitStack() as transaction:
                with _deferred_begin(database.connection()):
                    transaction.enter_context(database.atomic())
                yield
        finally:
            with database.connection().cursor() as cursor:
                cursor.execute("PRAGMA query_only = OFF")
        return
    with database.atomic():
        with database.connection().cursor() as cursor:
            # First statement of the transaction: PostgreSQL sets this transaction's mode;
            # MariaDB (autocommit off, nothing read yet) sets the one the next read opens.
            # Repeatable read: the runs and their steps, read by separate queries while
            # workers write, come from one snapshot (Django's default is read committed).
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


@contextmanager
def _deferred_begin(conn: BaseDatabaseWrapper) -> Iterator[None]:
    """While entered, an outermost ``atomic()`` on ``conn`` (SQLite, connected) opens its
    transaction with a plain ``BEGIN``, whatever the alias's ``transaction_mode``.

    The docs recommend ``"transaction_mode": "IMMEDIATE"`` (and the runner adds it to
    every sqlite URL), and Django >= 5.1 then begins every transaction with ``BEGIN
    IMMEDIATE``, which asks for the write lock: under ``query_only`` SQLite refuses that
    ("attempt to write a readonly database"), and without it the check would wait for,
    then hold, the lock every worker needs. A deferred transaction takes only a read
    snapshot. Django reads ``transaction_mode`` only to begin a transaction (a savepoint
    inside never does), and sets it again at each connect; older Django has none.
    """
    mode = getattr(conn, "transaction_mode", None)
    if mode is None:
        yield
        return
    conn.transaction_mode = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        conn.transaction_mode = mode  # type: ignore[attr-defined]


def unfinished_batch(
    statuses: tuple[str, ...], workflow: str | None, after: UUID | None, size: int
) -> list[RunToCheck]:
    """Up to ``size`` runs in ``statuses`` (of ``workflow``, if given) with ids after
    ``after``, in id order, with their recorded steps: two queries."""
    runs = Workflow.objects.filter(status__in=statuses)
    if workflow is not None:
        runs = runs.filter(name=workflow)
    if after is not None:
        runs = runs.filter(id__gt=after)
    rows = list(
        runs.order_by("id")
        .annotate(recorded=Exists(Step.objects.filter(workflow_id=OuterRef("id"))))
        .values_list("id", "name", "status", "args", "recorded")[:size]
    )
    with_steps = [row[0] for row in rows if row[4]]
    records: dict[UUID, dict[str, RecordedStep]] = {run_id: {} for run_id in with_steps}
    if with_steps:
        # With their arguments: an async body's replay compares them
        # (engine.asynchronous.async_steps).
        steps = Step.objects.filter(workflow_id__in=with_steps).values_list(
            "workflow_id", "step_id", "name", "status", "result", "error", "args", "kwargs"
        )
        for run_id, step_id, name, status, result, error, args, kwargs in steps:
            records[run_id][step_id] = RecordedStep(
                step_id, name, status, result, error, call=[args, kwargs]
            )
    return [
        RunToCheck(run_id, name, status, args, records.get(run_id, {}))
        for run_id, name, status, args, _ in rows
    ]
