"""Every query and update the engine, the worker, the commands and the UI make.

Writes made on behalf of a claimed run are *fenced*: they happen in a transaction that
first updates the run row on the condition that it is still ``running`` under the
caller's claim token. That update takes the row lock (PostgreSQL, MariaDB) or the write
lock (SQLite), so a requeue or a takeover by another worker serialises with it, and a
stale worker's late write is rejected instead of overwriting the newer claimer's work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from everystep.claim import notify_due
from everystep.engine.state import Claim, RecordedStep
from everystep.errors import ClaimLost, EverystepError, RunGone, StepFailure, StoreUnavailable
from everystep.models import Runner, Status, Step, StepStatus, Workflow
from everystep.serde import encode_error

P = ParamSpec("P")
R = TypeVar("R")


def _guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a lost or unreachable database into ``StoreUnavailable`` for the engine: the
    pass stops without deciding anything, and the worker retries it later."""

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            raise StoreUnavailable(f"database unavailable in {func.__name__}: {exc}") from exc

    return guarded


def create_run(name: str, args: list[Any], idempotency_key: str | None) -> Workflow:
    """Insert a ``scheduled`` run in the caller's transaction, or return the run that
    already holds ``(name, idempotency_key)``."""
    if idempotency_key is None:
        run = Workflow.objects.create(name=name, args=args)
        notify_due()
        return run
    try:
        # Insert first, read only on conflict: a read before the write would make SQLite
        # upgrade a shared lock, which fails at once under concurrent writers instead of
        # waiting. The savepoint keeps the caller's transaction usable when the unique
        # index refuses the insert.
        with transaction.atomic():
            run = Workflow.objects.create(name=name, args=args, idempotency_key=idempotency_key)
            notify_due()
            return run
    except IntegrityError:
        existing = Workflow.objects.filter(name=name, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return existing


@_guarded
def get_run(run_id: UUID | str) -> Workflow | None:
    """The run row, or None if it does not exist."""
    return Workflow.objects.filter(id=run_id).first()


@_guarded
def load_steps(run_id: UUID) -> dict[str, RecordedStep]:
    """Every recorded step of a run, by step id."""
    rows = Step.objects.filter(workflow_id=run_id).values_list(
        "step_id", "name", "status", "result", "error"
    )
    return {row[0]: RecordedStep(*row) for row in rows}


def _fence(claim: Claim) -> None:
    touched = Workflow.objects.filter(
        id=claim.run_id, claim_token=claim.token, status=Status.RUNNING
    ).update(updated_at=timezone.now())
    if touched != 1:
        if not Workflow.objects.filter(id=claim.run_id).exists():
            raise RunGone(f"run {claim.run_id} no longer exists")
        raise ClaimLost(f"run {claim.run_id} is no longer claimed by this pass of {claim.runner}")


@_guarded
def record_step(
    claim: Claim,
    *,
    step_id: str,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    status: str,
    started_at: Any,
    result: Any = None,
    error: dict[str, Any] | None = None,
    after_started: bool = False,
) -> None:
    """Record a step's start (unsafe steps) or its outcome, fenced by the claim."""
    finished_at = None if status == StepStatus.STARTED else timezone.now()
    try:
        with transaction.atomic():
            _fence(claim)
            if after_started:
                settled = Step.objects.filter(
                    workflow_id=claim.run_id, step_id=step_id, status=StepStatus.STARTED
                ).update(status=status, result=result, error=error, finished_at=finished_at)
                if settled:
                    return
            Step.objects.create(
                workflow_id=claim.run_id,
                step_id=step_id,
                name=name,
                args=args,
                kwargs=kwargs,
                status=status,
                result=result,
                error=error,
                started_at=started_at,
                finished_at=finished_at,
            )
    except IntegrityError as exc:
        raise ClaimLost(f"step {step_id} of run {claim.run_id} is already recorded") from exc


@_guarded
def finish_run(
    claim: Claim, status: str, *, result: Any = None, error: dict[str, Any] | None = None
) -> bool:
    """Give the run its outcome; False if this claim no longer holds it."""
    now = timezone.now()
    final = status != Status.BLOCKED
    touched = Workflow.objects.filter(
        id=claim.run_id, claim_token=claim.token, status=Status.RUNNING
    ).update(
        status=status,
        result=result,
        error=error,
        claim_token=None,
        updated_at=now,
        completed_at=now if final else None,
    )
    return touched == 1


@_guarded
def requeue_run(claim: Claim) -> bool:
    """Put the run back to ``scheduled`` with its claim released; False if not ours."""
    touched = Workflow.objects.filter(
        id=claim.run_id, claim_token=claim.token, status=Status.RUNNING
    ).update(status=Status.SCHEDULED, claimed_by=None, claim_token=None, updated_at=timezone.now())
    if touched:
        notify_due()
    return touched == 1


def resolve_step(run_id: str, step_id: str, *, mode: str, value: Any = None) -> Workflow:
    """Settle the ``started`` step of a ``blocked`` run and requeue the run.

    ``mode`` is ``result`` (the effect happened; ``value`` is its encoded result),
    ``error`` (it failed; ``value`` is the message) or ``discard`` (it did not happen:
    the step runs again on the next pass).
    """
    with transaction.atomic():
        # Write first: on SQLite this takes the write lock before anything is read.
        requeued = Workflow.objects.filter(id=run_id, status=Status.BLOCKED).update(
            status=Status.SCHEDULED,
            claimed_by=None,
            claim_token=None,
            error=None,
            completed_at=None,
            updated_at=timezone.now(),
        )
        if not requeued:
            run = get_run(run_id)
            if run is None:
                raise EverystepError(f"no run with id {run_id}")
            raise EverystepError(f"run {run_id} is {run.status}, not blocked")
        step = Step.objects.filter(workflow_id=run_id, step_id=step_id).first()
        if step is None:
            raise EverystepError(f"run {run_id} has no step {step_id!r}")
        if step.status != StepStatus.STARTED:
            raise EverystepError(f"step {step_id!r} of run {run_id} is {step.status}, not started")
        if mode == "discard":
            step.delete()
        else:
            step.finished_at = timezone.now()
            if mode == "result":
                step.status, step.result = StepStatus.DONE, value
            else:
                step.status = StepStatus.FAILED
                step.error = encode_error(StepFailure(value, "everystep_resolve_step"))
            step.save(update_fields=["status", "result", "error", "finished_at"])
        notify_due()
    run = get_run(run_id)
    assert run is not None
    return run


def queue_stats() -> dict[str, Any]:
    """Counts of pending, running and blocked runs and the age of the oldest pending run."""
    rows = (
        Workflow.objects.filter(status__in=[Status.SCHEDULED, Status.RUNNING, Status.BLOCKED])
        .values("status")
        .annotate(n=Count("id"))
    )
    counts = {row["status"]: row["n"] for row in rows}
    # The claim index (status, id) serves this: ids are time-ordered UUIDv7.
    oldest = (
        Workflow.objects.filter(status=Status.SCHEDULED)
        .order_by("id")
        .values_list("created_at", flat=True)
        .first()
    )
    age = (timezone.now() - oldest).total_seconds() if oldest is not None else 0.0
    return {
        "pending": counts.get(Status.SCHEDULED, 0),
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


def requeue_runner(name: str) -> list[UUID]:
    """Put every run left ``running`` under runner ``name`` back to ``scheduled``."""
    with transaction.atomic():
        held = Workflow.objects.filter(status=Status.RUNNING, claimed_by=name)
        ids = list(held.values_list("id", flat=True))
        Workflow.objects.filter(id__in=ids, status=Status.RUNNING, claimed_by=name).update(
            status=Status.SCHEDULED,
            claimed_by=None,
            claim_token=None,
            updated_at=timezone.now(),
        )
        notify_due()
    return ids


def beat(
    name: str, boot_id: UUID, *, pool_size: int, inflight: int, draining: bool, started_at: Any
) -> None:
    """Record that runner ``name`` (this boot) is alive."""
    Runner.objects.update_or_create(
        name=name,
        defaults={
            "boot_id": boot_id,
            "pool_size": pool_size,
            "inflight": inflight,
            "draining": draining,
            "started_at": started_at,
            "last_seen": timezone.now(),
        },
    )


def get_runner(name: str) -> Runner | None:
    """The heartbeat row of runner ``name``, if any."""
    return Runner.objects.filter(name=name).first()


def forget_runner(name: str, boot_id: UUID) -> None:
    """Remove this boot's heartbeat row at a clean shutdown."""
    Runner.objects.filter(name=name, boot_id=boot_id).delete()


def requeue_orphans(timeout: float) -> list[tuple[UUID, str, str | None]]:
    """Requeue runs held by runners whose heartbeat is older than ``timeout`` seconds.

    Returns ``(run id, workflow name, dead runner)`` for each requeued run. The heartbeat
    age is checked again inside the UPDATE itself, so a runner that came back under the
    same name a moment ago keeps the runs it has just reclaimed.
    """
    cutoff = timezone.now() - timedelta(seconds=timeout)
    dead = Runner.objects.filter(last_seen__lt=cutoff).values("name")
    with transaction.atomic():
        orphans = list(
            Workflow.objects.filter(status=Status.RUNNING, claimed_by__in=dead).values_list(
                "id", "name", "claimed_by"
            )
        )
        if not orphans:
            return []
        requeued = Workflow.objects.filter(
            id__in=[row[0] for row in orphans], status=Status.RUNNING, claimed_by__in=dead
        ).update(
            status=Status.SCHEDULED, claimed_by=None, claim_token=None, updated_at=timezone.now()
        )
        notify_due()
    return orphans if requeued else []


# Operations: the queries behind everystep_runs, everystep_show and everystep_prune.
# ``cutoff`` values are aware datetimes, like the ``started_at`` arguments above.


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


# The UI's read-only queries (everystep.ui.views); list_runs, get_run and run_steps above
# serve it too.


def status_counts(*, name: str | None = None) -> dict[str, int]:
    """How many runs there are in each status (every status listed, zeros included), in
    one aggregate query; only runs of workflow ``name`` if given."""
    runs = Workflow.objects.all() if name is None else Workflow.objects.filter(name=name)
    rows = runs.order_by().values_list("status").annotate(n=Count("id"))
    counts = dict.fromkeys(Status.values, 0)
    counts.update({status: n for status, n in rows})
    return counts


def list_runners() -> list[Runner]:
    """Every runner heartbeat row, by name."""
    return list(Runner.objects.order_by("name"))


def held_runs() -> dict[str, int]:
    """How many ``running`` runs each runner name holds, in one aggregate query (names
    without a heartbeat row included: their runs wait for orphan recovery)."""
    rows = (
        Workflow.objects.filter(status=Status.RUNNING, claimed_by__isnull=False)
        .order_by()
        .values_list("claimed_by")
        .annotate(n=Count("id"))
    )
    return {name: n for name, n in rows}
