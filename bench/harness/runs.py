"""Runs in the benchmark database: scheduling them in bulk, waiting for them, counting
what finished, and clearing the tables between phases."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

SCHEDULE_BATCH = 10_000


def id_floor(at: float | None = None) -> uuid.UUID:
    """The smallest run id (UUIDv7: the high 48 bits are the Unix time in ms) made at or
    after ``at`` (seconds since the epoch; now by default): runs scheduled from now on
    have ids ``>=`` it, so it separates them from older rows such as a history."""
    ms = int((time.time() if at is None else at) * 1000)
    return uuid.UUID(int=(ms & ((1 << 48) - 1)) << 80)


def _runs_since(since: uuid.UUID | None) -> tuple[Any, Any]:
    """(runs, steps) querysets: every row, or those of runs with ids ``>= since``."""
    from everystep.models import Step, Workflow

    if since is None:
        return Workflow.objects.all(), Step.objects.all()
    return Workflow.objects.filter(id__gte=since), Step.objects.filter(workflow_id__gte=since)


def clear_runs(since: uuid.UUID | None = None) -> None:
    """Delete every run and step, or only those of runs with ids ``>= since``."""
    runs, steps = _runs_since(since)
    steps.delete()
    runs.delete()


def tidy_tables(db: str, keep_before: uuid.UUID | None = None) -> None:
    """Empty the run tables (but for the runs with ids below ``keep_before``: a
    history); on PostgreSQL also vacuum them, so every phase starts with the same table
    state."""
    from django.db import connection

    clear_runs(since=keep_before)
    if db == "postgres":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE everystep_workflow, everystep_step")


def schedule_runs(
    workflow: Callable[..., Any],
    runs: int,
    arguments: Callable[[int], list[Any]] | None = None,
) -> None:
    """``runs`` runs of ``workflow(i, 1)`` (or ``workflow(*arguments(i))``), scheduled in
    one transaction: the rows ``everystep.schedule`` makes, inserted ``SCHEDULE_BATCH`` per
    statement, and one wake-up (PostgreSQL NOTIFY keeps one of identical notifications per
    transaction). With ``arguments`` they are stored as ``everystep.schedule`` stores them,
    typed values where the workflow's annotations name them (a tree with
    ``everystep.shapes``, issue 55, only)."""
    from django.db import transaction

    from everystep import registry, serde
    from everystep.models import Workflow
    from everystep.store.wake import notify_due

    defn = registry.workflow_def(workflow)
    if defn is None:
        raise TypeError(f"{workflow!r} is not a @workflow function")
    where = f"arguments of workflow {defn.name}"

    def stored(i: int) -> Any:
        if arguments is None:
            return serde.encode([i, 1], where)
        from everystep import shapes

        return shapes.encode_arguments(defn.fn, arguments(i), where)

    with transaction.atomic():
        for first in range(0, runs, SCHEDULE_BATCH):
            batch = [
                Workflow(name=defn.name, args=stored(i))
                for i in range(first, min(first + SCHEDULE_BATCH, runs))
            ]
            Workflow.objects.bulk_create(batch, batch_size=SCHEDULE_BATCH)
        notify_due()


def schedule_sleeping(runs: int) -> None:
    """``runs`` runs of ``workflow`` that are due only in a day: runs sleeping or waiting
    in the tables, which a claim must not walk."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from everystep.models import Workflow

    later = timezone.now() + timedelta(days=1)
    with transaction.atomic():
        for first in range(0, runs, SCHEDULE_BATCH):
            batch = [
                Workflow(name="bench.sleeping", args=[i], due_at=later, waiting_for=None)
                for i in range(first, min(first + SCHEDULE_BATCH, runs))
            ]
            Workflow.objects.bulk_create(batch, batch_size=SCHEDULE_BATCH)


def pending_runs() -> int:
    """Runs not finished yet, but for those that sleep (not due: ``schedule_sleeping``)."""
    from django.db.models import Q
    from django.utils import timezone

    from everystep.models import Status, Workflow

    due = Q(status=Status.SCHEDULED, due_at__lte=timezone.now())
    return Workflow.objects.filter(due | Q(status=Status.RUNNING)).count()


def finished_span(since: uuid.UUID | None = None) -> dict[str, Any]:
    """Completed runs and step rows, and runs/s from the first claim (``started_at``) to
    the last ``completed_at``: the same rows measure everystep and the raw limit. Only
    runs with ids ``>= since`` when given (a phase's runs, not a history's)."""
    from django.db.models import Count, Max, Min

    from everystep.models import Status

    runs, steps = _runs_since(since)
    done = runs.filter(status=Status.COMPLETED)
    span = done.aggregate(first=Min("started_at"), last=Max("completed_at"))
    completed, step_rows = done.count(), steps.count()
    seconds = (span["last"] - span["first"]).total_seconds() if completed else math.nan
    return {
        "completed": completed,
        "steps": step_rows,
        "span_s": round(seconds, 3),
        "runs_per_s": round(completed / seconds, 1) if completed else 0.0,
        "statuses": dict(runs.order_by().values_list("status").annotate(n=Count("id"))),
    }


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    every: float,
    alive: Callable[[], None] = lambda: None,
) -> None:
    """Until ``predicate()``; ``alive()`` between looks (it raises if a worker died)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s")
        time.sleep(every)


def db_connections_opened(db: str) -> int | None:
    """A counter of connections opened: this database's sessions on PostgreSQL (their
    statistics reach the server within about a second), the server's on MariaDB."""
    from django.db import connection

    with connection.cursor() as cursor:
        if db == "postgres":
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            )
            return int(cursor.fetchone()[0])
        if db == "mariadb":
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
            return int(cursor.fetchone()[1])
    return None


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]
