"""Writing a fork (``everystep.fork``): the new run and the copies of the original's
records it starts with, in one transaction, with the operator's audit entry."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from uuid import UUID

from django.db import IntegrityError

from everystep.errors import EverystepError
from everystep.models import Step, Workflow
from everystep.store import audit, database
from everystep.store.wake import notify_due

# Copied step rows per INSERT: well under every database's limit on parameters.
COPY_BATCH = 500
# The name of everystep's own background bulk action (``builtins.bulk_action``).
BULK_ACTION = "everystep.bulk_action"
# Every workflow everystep itself registers. Their runs are never forked: a fork replays
# the original's arguments, and a bulk action's carry its action, filter and operator, so
# anyone allowed to fork would take that operator's action again in their name (issue 50).
BUILTIN_WORKFLOWS = frozenset({BULK_ACTION})


def create_fork(
    original: Workflow,
    *,
    new_id: UUID,
    args: Any,
    from_step: str | None,
    copied: Collection[str],
    actor: audit.Actor | None,
    idempotency_key: str | None = None,
) -> Workflow:
    """Insert the fork of ``original`` as a ``scheduled`` run with id ``new_id`` and
    ``args`` (stored form), starting with copies of the records at the step ids
    ``copied``; ``from_step``: where it executes from (None: after every copied record).
    The original is only read. With ``idempotency_key``, a fork already made under that
    key (the same confirmation sent twice) is returned instead, and nothing is written."""
    try:
        with database.atomic():
            run = Workflow.objects.create(
                id=new_id,
                name=original.name,
                args=args,
                queue=original.queue,
                forked_from_id=original.id,
                forked_from_step=from_step,
                idempotency_key=idempotency_key,
            )
            _copy_steps(original.id, new_id, copied)
            if actor is not None:
                audit.record(
                    "fork",
                    actor,
                    run=original.id,
                    detail={"fork": str(new_id), "from_step": from_step},
                )
            notify_due()
    except IntegrityError as exc:
        made = existing_fork(original, idempotency_key)
        if made is not None:  # the other request of a double submit won the insert
            return made
        # The only row the fork refers to is the original: pruned since it was read.
        if not Workflow.objects.filter(id=original.id).exists():
            raise EverystepError(f"no run with id {original.id}") from exc
        raise
    return run


def fork_key(base: str, run_id: UUID) -> str:
    """The idempotency key of the fork of ``run_id`` made by the bulk fork ``base`` (a
    confirmation, or a background run's id): one fork per run, whoever asks again."""
    return f"everystep.bulk_fork:{base}:{run_id}"


def already_forked(base: str, run_ids: list[UUID]) -> set[UUID]:
    """Which of ``run_ids`` the bulk fork ``base`` has forked already."""
    keys = [fork_key(base, run_id) for run_id in run_ids]
    made = Workflow.objects.filter(idempotency_key__in=keys, forked_from__isnull=False)
    return set(made.values_list("forked_from_id", flat=True))


def existing_fork(original: Workflow, idempotency_key: str | None) -> Workflow | None:
    """The fork of ``original`` made under ``idempotency_key``, if there is one."""
    if idempotency_key is None:
        return None
    return Workflow.objects.filter(
        name=original.name, idempotency_key=idempotency_key, forked_from_id=original.id
    ).first()


def _copy_steps(original: UUID, fork: UUID, copied: Collection[str]) -> None:
    wanted = set(copied)
    if not wanted:
        return
    rows = Step.objects.filter(workflow_id=original).order_by("id")
    copies = [
        Step(
            workflow_id=fork,
            step_id=row.step_id,
            name=row.name,
            args=row.args,
            kwargs=row.kwargs,
            status=row.status,
            result=row.result,
            error=row.error,
            started_at=row.started_at,
            finished_at=row.finished_at,
            settled_by=row.settled_by,
        )
        for row in rows
        if row.step_id in wanted
    ]
    Step.objects.bulk_create(copies, batch_size=COPY_BATCH)
