"""Read-only queries for operators, metrics, health and the UI, and pruning.

``cutoff`` arguments are aware datetimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from everystep.models import Status, Step, Workflow
from everystep.store.waits import waiting_count


def queue_stats() -> dict[str, Any]:
    """Counts of pending (due), waiting (sleeping, waiting for an event, not started
    yet), running and blocked runs, and how long the longest-due run has waited."""
    now = timezone.now()
    rows = (
        Workflow.objects.filter(status__in=[Status.SCHEDULED, Status.RUNNING, Status.BLOCKED])
        .values("status")
        .annotate(n=Count("id"))
    )
    counts = {row["status"]: row["n"] for row in rows}
    waiting = waiting_count()
    # The claim index (status, due_at, id) serves this.
    oldest = (
        Workflow.objects.filter(status=Status.SCHEDULED, due_at__lte=now)
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )
    age = (now - oldest).total_seconds() if oldest is not None else 0.0
    return {
        # Two reads: never report a negative count if a run woke in between.
        "pending": max(counts.get(Status.SCHEDULED, 0) - waiting, 0),
        "waiting": waiting,
        "running": counts.get(Status.RUNNING, 0),
        "blocked": counts.get(Status.BLOCKED, 0),
        "oldest_pending_age": max(age, 0.0),
    }


def ping() -> None:
    """Raise if the database cannot be reached."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def unapplied_migrations() -> list[str]:
    """Migrations of every app that the database does not have yet."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def list_runs(
    *, status: str | None = None, name: str | None = None, runner: str | None = None, limit: int
) -> list[Workflow]:
    """The most recent runs, newest first, without their (possibly large) JSON payloads."""
    runs = Workflow.objects.defer("args", "result", "error")
    if status is not None:
        runs = runs.filter(status=status)
    if name is not None:
        runs = runs.filter(name=name)
    if runner is not None:
        runs = runs.filter(claimed_by=runner)
    # Ids are UUIDv7, so the primary key (or the status/name indexes ending in id) gives
    # creation order without sorting on created_at.
    return list(runs.order_by("-id")[:limit])


@dataclass(frozen=True)
class RunWait:
    """Why a scheduled run is not due yet: ``kind`` is ``start`` (a delayed start, never
    claimed yet), ``sleep``, or ``event`` (awaiting ``events``, the run's ``waiting_for``
    text); ``until`` is when it becomes due anyway (None: only an event wakes it)."""

    kind: str
    until: datetime | None
    events: str = ""


def run_wait(run: Workflow, now: datetime | None = None) -> RunWait | None:
    """What ``run`` waits for, or None if it is not a scheduled run waiting (it is due,
    running or finished). Reads the row's fields only: no query."""
    if run.status != Status.SCHEDULED:
        return None
    if run.due_at is not None and run.due_at <= (now or timezone.now()):
        return None
    if run.waiting_for or run.due_at is None:
        return RunWait("event", run.due_at, run.waiting_for or "")
    # A run is claimed before it can sleep, and its first claim sets started_at.
    return RunWait("start" if run.started_at is None else "sleep", run.due_at)


def run_steps(run_id: UUID | str) -> list[Step]:
    """Every recorded step of a run, in the order they started."""
    return list(Step.objects.filter(workflow_id=run_id).order_by("started_at", "step_id"))


def _prunable(cutoff: Any, statuses: list[str]) -> dict[str, Any]:
    from everystep.models import FINAL_STATUSES

    # Final statuses only, whatever the caller asks: a scheduled, running or blocked run
    # still has work (or a human decision) ahead of it.
    final = [status for status in statuses if status in FINAL_STATUSES]
    return {"status__in": final, "completed_at__lt": cutoff}


def prunable_counts(cutoff: Any, statuses: list[str]) -> dict[str, int]:
    """How many runs ``prune_batch`` would delete, per status."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses))
    return {status: due.filter(status=status).count() for status in statuses}


def prunable_sample(cutoff: Any, statuses: list[str], limit: int = 20) -> list[Workflow]:
    """The first ``limit`` runs (oldest ids first) ``prune_batch`` would delete."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("id")
    return list(due.only("id", "name", "status", "completed_at")[:limit])


def prune_batch(cutoff: Any, statuses: list[str], batch_size: int) -> tuple[int, int]:
    """Delete up to ``batch_size`` final runs completed before ``cutoff`` (oldest ids
    first) and their steps, in one short transaction. Returns ``(runs, steps)`` deleted;
    ``(0, 0)`` once nothing is left."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("id")
    with transaction.atomic():
        if transaction.get_connection().vendor == "sqlite":
            # Write first: the DELETE takes SQLite's write lock before anything is read,
            # and holding it keeps the batch the same for the second statement. A read
            # that later turns into a write fails at once if a worker wrote meanwhile.
            batch = due.values("id")[:batch_size]
            steps, _ = Step.objects.filter(workflow_id__in=batch).delete()
            ids = list(due.values_list("id", flat=True)[:batch_size])
        else:
            # MariaDB cannot LIMIT inside IN (…), so lock the batch's ids and delete by list.
            ids = list(due.select_for_update().values_list("id", flat=True)[:batch_size])
            steps, _ = Step.objects.filter(workflow_id__in=ids).delete()
        if not ids:
            return 0, steps
        _, deleted = Workflow.objects.filter(id__in=ids).delete()
    return deleted.get(Workflow._meta.label, 0), steps


# The UI's read-only queries (everystep.ui.views); list_runs and run_steps above serve it
# too, and get_run from store.runs.


COUNT_CAP = 10_000


def status_counts(*, name: str | None = None, cap: int = COUNT_CAP) -> dict[str, int]:
    """How many runs there are in each status (every status listed, zeros included); only
    runs of workflow ``name`` if given.

    Counting stops at ``cap + 1`` per status (a value above ``cap`` means "more than
    ``cap``"): each status is counted over at most that many entries of its index, so
    the runs page costs the same with a million finished runs as with a thousand.
    """
    runs = Workflow.objects.all() if name is None else Workflow.objects.filter(name=name)
    return {
        status: runs.filter(status=status).order_by().values("id")[: cap + 1].count()
        for status in Status.values
    }
