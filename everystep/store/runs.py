"""The engine's reads and fenced writes for one run, and scheduling.

Writes made on behalf of a claimed run are *fenced* (``everystep.models.fence``): they
happen in a transaction that first updates the run row on the condition that the claim
still holds it. That update takes the row lock (PostgreSQL, MariaDB) or the write lock
(SQLite), so a requeue or a takeover by another worker serialises with it, and a stale
worker's late write is rejected instead of overwriting the newer claimer's work.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from django.apps import apps
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    connection,
    transaction,
)
from django.utils import timezone

from everystep.errors import (
    AlreadyRecorded,
    ClaimLost,
    EverystepError,
    RunGone,
    StepFailure,
    StoreUnavailable,
    TablesMissing,
)
from everystep.models import Status, Step, StepStatus, Workflow
from everystep.serde import encode, encode_error, parse_json, storable_text
from everystep.store import claims
from everystep.store.wake import notify_due
from everystep.values import Claim, RecordedStep

logger = logging.getLogger("everystep.schedule")

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
            too_large = _too_large(exc)
            if too_large is not None:
                raise too_large from exc
            raise StoreUnavailable(f"database unavailable in {func.__name__}: {exc}") from exc

    return guarded


# MySQL/MariaDB error 1153: a statement bigger than the server's max_allowed_packet (16 MiB
# by default on MariaDB). No outage: the same write fails each time, so retrying it would
# run the step again forever.
_PACKET_TOO_LARGE = 1153


def _too_large(exc: Exception) -> EverystepError | None:
    """The ``EverystepError`` for a write refused for its size, else None."""
    if connection.vendor != "mysql" or not exc.args or exc.args[0] != _PACKET_TOO_LARGE:
        return None
    if not connection.in_atomic_block:
        # The server drops the connection after this error: the next statement (the
        # run's failure) must open a new one.
        connection.close()
    return EverystepError(
        f"the database refused a value this large ({exc.args[-1]}): raise the server's "
        "max_allowed_packet, or keep large data out of arguments and results"
    )


def create_run(
    name: str, args: list[Any], idempotency_key: str | None, *, due_at: Any = None
) -> Workflow:
    """Insert a ``scheduled`` run in the caller's transaction, due at ``due_at`` (now by
    default), or return the run that already holds ``(name, idempotency_key)``."""
    try:
        return _insert_run(name, args, idempotency_key, due_at or timezone.now())
    except OperationalError as exc:
        too_large = _too_large(exc)
        if too_large is None:
            raise (missing_tables(exc) or exc) from exc
        raise EverystepError(f"cannot schedule {name}: {too_large}") from exc
    except ProgrammingError as exc:
        raise (missing_tables(exc) or exc) from exc


def _insert_run(name: str, args: list[Any], idempotency_key: str | None, due_at: Any) -> Workflow:
    if idempotency_key is None:
        run = Workflow.objects.create(name=name, args=args, due_at=due_at)
        notify_due()
        return run
    try:
        # Insert first, read only on conflict: a read before the write would make SQLite
        # upgrade a shared lock, which fails at once under concurrent writers instead of
        # waiting. The savepoint keeps the caller's transaction usable when the unique
        # index refuses the insert.
        with transaction.atomic():
            run = Workflow.objects.create(
                name=name, args=args, idempotency_key=idempotency_key, due_at=due_at
            )
            notify_due()
            return run
    except IntegrityError:
        existing = Workflow.objects.filter(name=name, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        # The key names one run (the contract: the existing run is returned). Other
        # arguments under it are almost always a caller's bug, so they are logged.
        # Compared in stored form (canonical JSON: 1 and 1.0 differ as they do in the
        # row); the due time is not part of the key's identity.
        if _canonical(existing.args) != _canonical(args):
            _log_conflict(existing, args)
        return existing


def _canonical(stored: Any) -> str:
    return json.dumps(stored, sort_keys=True, separators=(",", ":"))


def _log_conflict(existing: Workflow, args: list[Any]) -> None:
    def short(stored: Any) -> str:
        text = _canonical(stored)
        return text if len(text) <= 200 else f"{text[:200]}…"

    logger.warning(
        "idempotency_key %r of workflow %s already names run "
        "%s (%s), scheduled with other arguments: %s, not %s; the existing run is returned "
        "unchanged. Use a new key for new arguments",
        existing.idempotency_key,
        existing.name,
        existing.id,
        existing.status,
        short(existing.args),
        short(args),
        extra={
            "event": "schedule.idempotency_conflict",
            "run_id": str(existing.id),
            "workflow": existing.name,
        },
    )


def missing_tables(exc: BaseException) -> TablesMissing | None:
    """A ``TablesMissing`` if ``exc`` (or what caused it) is a database error naming an
    everystep table that the database does not have, else None."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ProgrammingError | OperationalError):
        cause = cause.__cause__
    tables = [model._meta.db_table for model in apps.get_app_config("everystep").get_models()]
    # SQLite: OperationalError "no such table: t"; PostgreSQL: ProgrammingError 'relation
    # "t" does not exist'; MariaDB: ProgrammingError "Table 'db.t' doesn't exist". Each
    # names the table, so only such an error costs the look at the database's tables.
    if cause is None or not any(table in str(cause) for table in tables):
        return None
    try:
        present = set(connection.introspection.table_names())
    except DatabaseError:  # unreachable after all: an outage, not missing tables
        return None
    missing = [table for table in tables if table not in present]
    if not missing:
        return None
    database = str(connection.settings_dict.get("NAME"))
    lacks = "none of them" if len(missing) == len(tables) else f"no {', '.join(missing)}"
    return TablesMissing(
        "everystep's tables are missing: run `python manage.py migrate` (the "
        f"{connection.vendor} database {database!r} has {lacks})"
    )


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


def _refused(claim: Claim) -> ClaimLost:
    """Why a fenced write changed nothing: the run is gone, or no longer ours."""
    if not Workflow.objects.filter(id=claim.run_id).exists():
        return RunGone(f"run {claim.run_id} no longer exists")
    return ClaimLost(f"run {claim.run_id} is no longer claimed by this pass of {claim.runner}")


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
    """Record a step's start (unsafe steps) or its outcome, fenced by the claim: one
    statement, in autocommit."""
    values = {
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
    # Inside a caller's transaction (a test wrapped in one) a failed statement would
    # spoil it; a savepoint keeps it usable. A worker's pass has none and pays nothing.
    savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
    try:
        with savepoint:
            if after_started and claims.settle_started_fenced(claim, step_id, values):
                return
            if claims.insert_step_fenced(claim, values):
                return
    except IntegrityError as exc:
        raise AlreadyRecorded(f"step {step_id} of run {claim.run_id} is already recorded") from exc
    raise _refused(claim)


@contextmanager
def fenced_transaction(claim: Claim) -> Iterator[None]:
    """A transaction for an atomic step: it starts by locking the run row on the fencing
    condition (a no-op ``UPDATE``: on SQLite it takes the write lock at once, rather than
    failing to upgrade a read lock later), so no requeue or takeover can interleave with
    the step, and the body's writes and the step's record commit together or not at all.
    ``ClaimLost``/``RunGone`` if the claim no longer holds the run: nothing runs."""
    try:
        with transaction.atomic():
            if not Workflow.objects.held_by(claim).update(claim_token=claim.token):
                raise _refused(claim)
            yield
    except (OperationalError, InterfaceError) as exc:
        # Raised here only by the lock or the commit (the body's own errors are its
        # outcome): nothing committed, the step runs again once the database is back.
        raise StoreUnavailable(f"database unavailable in an atomic step: {exc}") from exc


@_guarded
def finish_run(
    claim: Claim, status: str, *, result: Any = None, error: dict[str, Any] | None = None
) -> bool:
    """Give the run its outcome; False if this claim no longer holds it."""
    return claims.finish_fenced(claim, status, result, error)


@_guarded
def requeue_run(claim: Claim) -> bool:
    """Put the run back to ``scheduled`` with its claim released; False if not ours."""
    touched = Workflow.objects.held_by(claim).requeue()
    if touched:
        notify_due()
    return touched == 1


SETTLE_MODES = ("result", "error", "discard")


def settle_step(run_id: str, step_id: str, *, mode: str, text: str = "") -> Workflow:
    """Settle the uncertain step of a blocked run from an operator's input (the
    ``everystep_resolve_step`` command and the UI): ``text`` is the step's result as
    JSON for ``result``, the failure message for ``error``, ignored for ``discard``.
    Bad input is an ``EverystepError`` saying what was expected; nothing is written."""
    if mode not in SETTLE_MODES:
        raise EverystepError(f"the mode must be one of {', '.join(SETTLE_MODES)}, got {mode!r}")
    _check_step_id(step_id)
    value: Any = None
    if mode == "result":
        value = encode(parse_json(text, "the result"), "the result")
    elif mode == "error":
        value = text.strip()
        if not value:
            raise EverystepError("an error needs a non-empty message")
    return resolve_step(run_id, step_id, mode=mode, value=value)


def _check_step_id(step_id: str) -> None:
    # No step can have an id longer than the column, or one no database stores: say so
    # rather than echo a pasted megabyte back in "no step …".
    storable_text(step_id, "the step id")
    longest = Step._meta.get_field("step_id").max_length or 0
    if len(step_id) > longest:
        raise EverystepError(
            f"the step id is {len(step_id)} characters; step ids have {longest} at most"
        )


def resolve_step(run_id: str, step_id: str, *, mode: str, value: Any = None) -> Workflow:
    """Settle the ``started`` step of a ``blocked`` run and requeue the run.

    ``mode`` is ``result`` (the effect happened; ``value`` is its encoded result),
    ``error`` (it failed; ``value`` is the message) or ``discard`` (it did not happen:
    the step runs again on the next pass).
    """
    with transaction.atomic():
        # Write first: on SQLite this takes the write lock before anything is read.
        requeued = Workflow.objects.filter(id=run_id, status=Status.BLOCKED).requeue()
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
    error = encode_error(EverystepError(f"cancelled by {by}"))
    cancelled = (
        Workflow.objects.filter(id=run_id).unfinished().finish(Status.CANCELLED, error=error)
    )
    return _changed_run(run_id, cancelled, "only unfinished runs can be cancelled")


def requeue_one(run_id: str) -> Workflow:
    """Put one ``running`` run back to ``scheduled`` (its holder is gone or stuck); the
    holder's late writes are refused by the fence."""
    requeued = Workflow.objects.filter(id=run_id, status=Status.RUNNING).requeue()
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
