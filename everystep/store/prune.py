"""Pruning: deleting finished runs older than a cutoff, with everything that belongs to
them, in short batches (``manage.py everystep_prune``).

A batch walks the finished runs by completion time (the index ``everystep_wf_completed``:
``completed_at, id``) from where the previous batch stopped (``after``), reads only their
ids, and deletes each dependent row once. So a batch reads the runs it deletes and those
of the statuses not asked for, each once per prune, and the call that finds nothing left
reads no run completed after the cutoff.

``cutoff`` arguments are aware datetimes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.db import models

from everystep.models import FINAL_STATUSES, AuditEntry, Workflow
from everystep.store import audit, database

# Where a walk stopped: the last run's completion time and id.
Place = tuple[datetime, UUID]


class Pruned(NamedTuple):
    """What one batch deleted; ``last`` is where the next batch starts (None: nothing)."""

    runs: int
    steps: int
    last: Place | None


def _prunable(cutoff: datetime, statuses: list[str]) -> dict[str, Any]:
    # Final statuses only, whatever the caller asks: a scheduled, running or blocked run
    # still has work (or a human decision) ahead of it.
    final = [status for status in statuses if status in FINAL_STATUSES]
    return {"status__in": final, "completed_at__lt": cutoff}


def prunable_counts(cutoff: datetime, statuses: list[str]) -> dict[str, int]:
    """How many runs ``prune_batch`` would delete, per status."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses))
    return {status: due.filter(status=status).count() for status in statuses}


def prunable_sample(cutoff: datetime, statuses: list[str], limit: int = 20) -> list[Workflow]:
    """The first ``limit`` runs (completed first, first) ``prune_batch`` would delete."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("completed_at", "id")
    return list(due.only("id", "name", "status", "completed_at")[:limit])


def prune_batch(
    cutoff: datetime,
    statuses: list[str],
    batch_size: int,
    *,
    after: Place | None = None,
    entry: AuditEntry | None = None,
) -> Pruned:
    """Delete up to ``batch_size`` final runs completed before ``cutoff`` (completed first,
    first; past ``after``) and everything that belongs to them, in one short transaction.
    ``Pruned(0, 0, None)`` once nothing is left. The runs' own audit entries go with
    them; ``entry``, the prune's own, counts up in the same transaction."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("completed_at", "id")
    if after is not None:
        done_at, run_id = after
        due = due.filter(
            models.Q(completed_at__gt=done_at) | models.Q(completed_at=done_at, id__gt=run_id)
        )
    with database.atomic():
        if database.connection().vendor == "sqlite":
            # Write first: the UPDATE takes SQLite's write lock before anything is read,
            # and holding it keeps the batch the same for the statements after it. A read
            # that later turns into a write fails at once if a worker wrote meanwhile.
            Workflow.objects.filter(id__in=due.values("id")[:batch_size]).update(
                awaited=models.F("awaited")
            )
            batch = list(due.values_list("completed_at", "id")[:batch_size])
        else:
            # MariaDB cannot LIMIT inside IN (…), so lock the batch's ids and delete by list.
            batch = list(due.select_for_update().values_list("completed_at", "id")[:batch_size])
        if not batch:
            return Pruned(0, 0, None)
        ids = [run_id for _, run_id in batch]
        steps = _delete_dependents(ids)
        runs = Workflow.objects.filter(id__in=ids)._raw_delete(database.connection().alias)
        if entry is not None:
            audit.add_count(entry, runs)
    return Pruned(runs, steps, batch[-1])


def _delete_dependents(ids: list[UUID]) -> int:
    """Delete (or unlink) every row that references the runs ``ids``, each with one
    statement per table; the number of steps deleted.

    Read from the model's relations, so a table added later is not forgotten. Django's
    own cascade would read every run row whole and then delete the steps once more."""
    steps = 0
    for relation in Workflow._meta.related_objects:
        field = relation.field
        rows = relation.related_model._base_manager.filter(**{f"{field.name}__in": ids})
        if relation.on_delete is models.SET_NULL:
            # A child or a fork of a pruned run stays, without its link.
            rows.update(**{field.name: None})
            continue
        deleted = rows._raw_delete(database.connection().alias)
        if relation.related_model._meta.model_name == "step":
            steps += deleted
    return steps
