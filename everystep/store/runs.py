"""The engine's reads and fenced writes for one run, and scheduling.

Writes made on behalf of a claimed run are *fenced*: they happen in a transaction that
first updates the run row on the condition that it is still ``running`` under the
caller's claim token. That update takes the row lock (PostgreSQL, MariaDB) or the write
lock (SQLite), so a requeue or a takeover by another worker serialises with it, and a
stale worker's late write is rejected instead of overwriting the newer claimer's work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.utils import timezone

from everystep.claim import notify_due
from everystep.engine.state import Claim, RecordedStep
from everystep.errors import ClaimLost, EverystepError, RunGone, StepFailure, StoreUnavailable
from everystep.models import Status, Step, StepStatus, Workflow
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


def cancel_run(run_id: str, *, by: str) -> Workflow:
    """Cancel a run that has not reached a final status.

    A scheduled or blocked run ends at once. A running run ends too: its worker's next
    write (the step in flight's record, or the outcome) is refused by the fence, so that
    step's effect may have happened but nothing more runs.
    """
    now = timezone.now()
    error = encode_error(EverystepError(f"cancelled by {by}"))
    cancelled = Workflow.objects.filter(
        id=run_id, status__in=[Status.SCHEDULED, Status.RUNNING, Status.BLOCKED]
    ).update(
        status=Status.CANCELLED, claim_token=None, error=error, completed_at=now, updated_at=now
    )
    return _changed_run(run_id, cancelled, "only unfinished runs can be cancelled")


def requeue_one(run_id: str) -> Workflow:
    """Put one ``running`` run back to ``scheduled`` (its holder is gone or stuck); the
    holder's late writes are refused by the fence."""
    requeued = Workflow.objects.filter(id=run_id, status=Status.RUNNING).update(
        status=Status.SCHEDULED, claimed_by=None, claim_token=None, updated_at=timezone.now()
    )
    run = _changed_run(run_id, requeued, "only running runs can be requeued")
    notify_due()
    return run


def _changed_run(run_id: str, changed: int, rule: str) -> Workflow:
    """The run an operator's conditional update changed, or why it did not change."""
    run = get_run(run_id)
    if run is None:
        raise EverystepError(f"no run with id {run_id}")
    if not changed:
        raise EverystepError(f"run {run_id} is {run.status}: {rule}")
    return run
