"""Scheduling runs, the engine's reads of one run, and operators' writes to runs
(resolving a blocked step, cancelling, requeueing). The writes made for a claimed run are
in ``everystep.store.step_records`` (its records) and ``everystep.store.outcome`` (its
outcome, its release, its requeue).
"""

from __future__ import annotations

import json
import logging
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from django.apps import apps
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
)
from django.utils import timezone

from everystep import code_version, signals
from everystep.errors import (
    EverystepError,
    StepFailure,
    TablesMissing,
)
from everystep.models import Status, Step, StepStatus, Workflow
from everystep.safe_text import storable_text
from everystep.serde import encode, parse_json
from everystep.store import audit, database, run_waits
from everystep.store.audit import Actor
from everystep.store.guard import guarded, too_large
from everystep.store.wake import notify_due
from everystep.stored_errors import encode_error
from everystep.values import RecordedStep

logger = logging.getLogger("everystep.schedule")

P = ParamSpec("P")
R = TypeVar("R")


def create_run(
    name: str,
    args: list[Any],
    idempotency_key: str | None,
    *,
    due_at: Any = None,
    parent: UUID | None = None,
    queue: str | None = None,
    task_options: dict[str, Any] | None = None,
) -> Workflow:
    """Insert a ``scheduled`` run in the caller's transaction, due at ``due_at`` (now by
    default), or return the run that already holds ``(name, idempotency_key)``.
    ``parent``: the run whose body starts this one (``everystep.start``); ``queue`` and
    ``task_options``: a Django ``@task``'s run's queue and what ``Task.using()`` set
    (``everystep.tasks``)."""
    columns = {
        "name": name,
        "args": args,
        "due_at": due_at or timezone.now(),
        "parent_id": parent,
        "queue": queue,
        "task_options": task_options,
        "code_version": code_version.current(),
    }
    try:
        return _insert_run(columns, idempotency_key)
    except OperationalError as exc:
        refused = too_large(exc)
        if refused is None:
            raise (missing_tables(exc) or exc) from exc
        raise EverystepError(f"cannot schedule {name}: {refused}") from exc
    except ProgrammingError as exc:
        raise (missing_tables(exc) or exc) from exc


def _insert_run(columns: dict[str, Any], idempotency_key: str | None) -> Workflow:
    if idempotency_key is None:
        run = Workflow.objects.create(**columns)
        notify_due()
        return run
    try:
        # Insert first, read only on conflict: a read before the write would make SQLite
        # upgrade a shared lock, which fails at once under concurrent writers instead of
        # waiting. The savepoint keeps the caller's transaction usable when the unique
        # index refuses the insert.
        with database.atomic():
            run = Workflow.objects.create(**columns, idempotency_key=idempotency_key)
            notify_due()
            return run
    except IntegrityError:
        name, args = columns["name"], columns["args"]
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
        present = set(database.connection().introspection.table_names())
    except DatabaseError:  # unreachable after all: an outage, not missing tables
        return None
    missing = [table for table in tables if table not in present]
    if not missing:
        return None
    conn = database.connection()
    name = str(conn.settings_dict.get("NAME"))
    lacks = "none of them" if len(missing) == len(tables) else f"no {', '.join(missing)}"
    # On an alias of its own, a plain `migrate` would create the tables in "default".
    also = "" if conn.alias == DEFAULT_DB_ALIAS else f" --database {conn.alias}"
    return TablesMissing(
        f"everystep's tables are missing: run `python manage.py migrate{also}` (the "
        f"{conn.vendor} database {name!r} has {lacks})"
    )


@guarded
def get_run(run_id: UUID | str) -> Workflow | None:
    """The run row, or None if it does not exist."""
    return Workflow.objects.filter(id=run_id).first()


@guarded
def load_steps(run_id: UUID, *, calls: bool = False) -> dict[str, RecordedStep]:
    """Every recorded step of a run, by step id; with ``calls``, each with its stored
    arguments too."""
    fields = ["step_id", "name", "status", "result", "error", "code_version"]
    if not calls:
        rows = Step.objects.filter(workflow_id=run_id).values_list(*fields)
        return {
            step_id: RecordedStep(step_id, name, status, result, error, code_version=version)
            for step_id, name, status, result, error, version in rows
        }
    rows = Step.objects.filter(workflow_id=run_id).values_list(*fields, "args", "kwargs")
    return {
        step_id: RecordedStep(
            step_id, name, status, result, error, call=[args, kwargs], code_version=version
        )
        for step_id, name, status, result, error, version, args, kwargs in rows
    }


RESOLVE_MODES = ("result", "error", "discard")


def resolve_step_from_text(
    run_id: str, step_id: str, *, mode: str, text: str = "", actor: Actor, reason: str = ""
) -> Workflow:
    """Resolve the uncertain step of a blocked run from an operator's input (the
    ``everystep_resolve_step`` command and the UI): ``text`` is the step's result as
    JSON for ``result``, the failure message for ``error``, ignored for ``discard``.
    Bad input is an ``EverystepError`` saying what was expected; nothing is written."""
    if mode not in RESOLVE_MODES:
        raise EverystepError(f"the mode must be one of {', '.join(RESOLVE_MODES)}, got {mode!r}")
    _check_step_id(step_id)
    value: Any = None
    if mode == "result":
        value = encode(parse_json(text, "the result"), "the result")
    elif mode == "error":
        value = text.strip()
        if not value:
            raise EverystepError("an error needs a non-empty message")
    return resolve_step(run_id, step_id, mode=mode, value=value, actor=actor, reason=reason)


def _check_step_id(step_id: str) -> None:
    # No step can have an id longer than the column, or one no database stores: say so
    # rather than echo a pasted megabyte back in "no step …".
    storable_text(step_id, "the step id")
    longest = Step._meta.get_field("step_id").max_length or 0
    if len(step_id) > longest:
        raise EverystepError(
            f"the step id is {len(step_id)} characters; step ids have {longest} at most"
        )


def resolve_step(
    run_id: str, step_id: str, *, mode: str, value: Any = None, actor: Actor, reason: str = ""
) -> Workflow:
    """Resolve the ``started`` step of a ``blocked`` run and requeue the run, with the
    audit entry in the same transaction.

    ``mode`` is ``result`` (the effect happened; ``value`` is its encoded result),
    ``error`` (it failed; ``value`` is the message) or ``discard`` (it did not happen:
    the step runs again on the next pass: its row goes, so the entry keeps the step id).
    """
    with database.atomic():
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
            _write_resolution(step, mode, value, actor)
        detail = {"step_id": step_id, "mode": mode}
        audit.record("resolve", actor, run=run_id, reason=reason, detail=detail)
        notify_due()
    run = get_run(run_id)
    assert run is not None
    return run


def _write_resolution(step: Step, mode: str, value: Any, actor: Actor) -> None:
    # ``settled_by`` is the column's documented name for who resolved the step.
    step.finished_at = timezone.now()
    step.settled_by = actor.by[: Step._meta.get_field("settled_by").max_length]
    if mode == "result":
        step.status, step.result = StepStatus.DONE, value
    else:
        step.status = StepStatus.FAILED
        step.error = encode_error(StepFailure(value, "everystep_resolve_step"))
    step.save(update_fields=["status", "result", "error", "finished_at", "settled_by"])


def cancel_run(run_id: str, *, actor: Actor, reason: str = "") -> Workflow:
    """Cancel a run that has not reached a final status, and its unfinished children
    (and theirs); the audit entry commits with the run's own cancellation.

    A scheduled or blocked run ends at once. A running run ends too: its worker's next
    write (the step in flight's record, a child's start, the outcome) is refused by the
    fence, so that step's effect may have happened but nothing more runs. Once the run
    is cancelled it can start no more children, so the walk down its children ends.
    """
    error = encode_error(EverystepError(f"cancelled by {actor.by}"))
    with database.atomic():
        runs = Workflow.objects.filter(id=run_id).unfinished()
        cancelled = runs.finish(Status.CANCELLED, error=error)
        run = _changed_run(run_id, cancelled, "only unfinished runs can be cancelled")
        audit.record("cancel", actor, run=run.id, reason=reason)
    after_cancel([run.id], actor)
    return run


def after_cancel(ids: list[UUID], actor: Actor) -> None:
    """Once the cancellation of runs ``ids`` has committed: cancel their unfinished
    children (and theirs), wake whatever waited for any of them, and announce them all
    (``signals.runs_cancelled``)."""
    ended = [*ids, *cancel_children(ids, actor)]
    run_waits.ended(ended)
    signals.runs_cancelled.emit(sender=Workflow, run_ids=ended, by=actor.by)


def cancel_children(parents: list[UUID], actor: Actor) -> list[UUID]:
    """Cancel the unfinished children of ``parents`` (runs just cancelled), and theirs;
    the ids cancelled. Call it after the parents' transaction has committed."""
    ended: list[UUID] = []
    child_error = encode_error(EverystepError(f"cancelled by {actor.by}: its parent was cancelled"))
    while parents:
        # One generation at a time; each statement on its own, so no lock on a parent is
        # held while its children's rows are locked (see ``run_waits``).
        children = list(
            Workflow.objects.filter(parent_id__in=parents).unfinished().values_list("id", flat=True)
        )
        if children:
            Workflow.objects.filter(id__in=children).unfinished().finish(
                Status.CANCELLED, error=child_error
            )
        ended += children
        parents = children
    return ended


def requeue_one(run_id: str, *, actor: Actor, reason: str = "") -> Workflow:
    """Put one ``running`` run back to ``scheduled`` (its holder is gone or stuck); the
    holder's late writes are refused by the fence."""
    with database.atomic():
        requeued = Workflow.objects.filter(id=run_id, status=Status.RUNNING).requeue()
        run = _changed_run(run_id, requeued, "only running runs can be requeued")
        audit.record("requeue", actor, run=run.id, reason=reason)
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
