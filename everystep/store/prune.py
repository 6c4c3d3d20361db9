"""Pruning: deleting finished runs older than a cutoff, with everything that belongs to
them, in short batches (``manage.py everystep_prune``).

A batch reads only run ids, deletes each dependent row once, and walks the runs table in
id order from where the previous batch stopped (``after``), so a run the prune keeps (a
status not asked for, completed since the cutoff) is read once per prune, not once per
batch. Still to do: the walk ends at the table's end, because no index serves
``completed_at``, so the call that finds nothing left reads the runs newer than the last
one deleted once.

``cutoff`` arguments are aware datetimes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.db import models

from everystep.models import FINAL_STATUSES, AuditEntry, Workflow
from everystep.store import audit, database


class Pruned(NamedTuple):
    """What one batch deleted; ``last`` is where the next batch starts (None: nothing)."""

    runs: int
    steps: int
    last: UUID | None


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
    """The first ``limit`` runs (oldest ids first) ``prune_batch`` would delete."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("id")
    return list(due.only("id", "name", "status", "completed_at")[:limit])


def prune_batch(
    cutoff: datetime,
    statuses: list[str],
    batch_size: int,
    *,
    after: UUID | None = None,
    entry: AuditEntry | None = None,
) -> Pruned:
    """Delete up to ``batch_size`` final runs completed before ``cutoff`` (oldest ids
    first, past ``after``) and everything that belongs to them, in one short transaction.
    ``Pruned(0, 0, None)`` once nothing is left. The runs' own audit entries go with
    them; ``entry``, the prune's own, counts up in the same transaction."""
    due = Workflow.objects.filter(**_prunable(cutoff, statuses)).order_by("id")
    if after is not None:
        due = due.filter(id__gt=after)
    with database.atomic():
        if database.connection().vendor == "sqlite":
            # Write first: the UPDATE takes SQLite's write lock before anything is read,
            # and holding it keeps the batch the same for the statements after it. A read
            # that later turns into a write fails at once if a worker wrote meanwhile.
            Workflow.objects.filter(id__in=due.values("id")[:batch_size]).update(
                awaited=models.F("awaited")
            )
            ids = list(due.values_list("id", flat=True)[:batch_size])
        else:
            # MariaDB cannot LIMIT inside IN (…), so lock the batch's ids and delete by list.
            ids = list(due.select_for_update().values_list("id", flat=True)[:batch_size])
        if not ids:
            return Pruned(0, 0, None)
        steps = _delete_dependents(ids)
        runs = Workflow.objects.filter(id__in=ids)._raw_delete(database.connection().alias)
        if entry is not None:
            audit.add_count(entry, runs)
    return Pruned(runs, steps, ids[-1])


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
