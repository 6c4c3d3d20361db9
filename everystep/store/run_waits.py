"""Runs that wait for other runs to end: ``result()`` and ``gather()`` in a body, and a
blocking ``result()`` outside one.

A body that waits (``hold``, in the transaction that releases it) marks each awaited run
``awaited`` and leaves a ``RunWait`` row for each one that has not ended. The awaited
runs' rows are locked first, so an outcome written meanwhile either commits before
(``hold`` then reads the run as ended and leaves no row for it) or after (and its own
statement then reads the mark). An outcome that finds its run ``awaited`` calls
``ended``: in one transaction that first locks the waiters' rows, it deletes the run's
rows and wakes each waiter left with none, so of two awaited runs ending together the
second waits for the first and sees its rows gone: the waiter is woken once, when the
last one ends, however many it awaits. A waiter releasing itself locks the awaited rows
and then its own; an outcome locks its own row, commits, and only then the waiters'.

A worker that dies between an outcome and that wake leaves the rows behind, and its
waiters asleep; ``sweep`` (run by every worker's heartbeat thread) finds such rows and
wakes them. A blocking ``result()`` outside a body marks the run ``awaited`` too, so its
end also sends a NOTIFY (PostgreSQL).

For a claimed run, ``hold``, ``ended`` and ``release`` are called only from its fenced
writes (``everystep.store.outcome``, ``everystep.store.step_records``); operators'
cancels call ``ended`` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from typing import Any

from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from everystep.models import FINAL_STATUSES, RunWait, Status, Workflow
from everystep.store import database
from everystep.store.guard import guarded
from everystep.store.wake import notify_due, notify_ended


def hold(waiter: uuid.UUID, runs: Collection[uuid.UUID]) -> list[uuid.UUID]:
    """Inside the waiter's releasing transaction: mark ``runs`` awaited, replace the
    waiter's ``RunWait`` rows by one per run not ended yet, and return those runs."""
    ids = sorted(set(runs))
    Workflow.objects.filter(id__in=ids).update(awaited=True)  # locks them first
    statuses = dict(
        Workflow.objects.select_for_update().filter(id__in=ids).values_list("id", "status")
    )
    pending = [run for run in ids if statuses.get(run, Status.COMPLETED) not in FINAL_STATUSES]
    RunWait.objects.filter(waiter_id=waiter).delete()
    RunWait.objects.bulk_create([RunWait(waiter_id=waiter, awaited_run_id=run) for run in pending])
    return pending


def ended(runs: Iterable[uuid.UUID]) -> None:
    """``runs`` have ended: wake the runs that waited for them and have nothing left to
    wait for, and tell blocking ``result()`` callers (PostgreSQL)."""
    ids = list(runs)
    waiters = sorted(
        set(RunWait.objects.filter(awaited_run_id__in=ids).values_list("waiter_id", flat=True))
    )
    if waiters:
        now = timezone.now()
        nothing_left = ~Exists(RunWait.objects.filter(waiter_id=OuterRef("id")))
        asleep = Q(due_at__isnull=True) | Q(due_at__gt=now)
        with database.atomic():
            # The waiters' rows first (a no-op update: on SQLite it takes the write lock
            # at once): two runs ending together for one waiter take turns, and the
            # second sees the first's rows gone. One transaction: a crash leaves the rows,
            # which ``sweep`` finds.
            Workflow.objects.filter(id__in=waiters).update(due_at=F("due_at"))
            RunWait.objects.filter(awaited_run_id__in=ids).delete()
            woken = Workflow.objects.filter(
                asleep, nothing_left, id__in=waiters, status=Status.SCHEDULED
            ).update(due_at=now)
            if woken:
                notify_due()
    notify_ended()


def release(waiter: uuid.UUID) -> None:
    """The waiter stopped waiting (its wait's record was concluded, by
    ``step_records.conclude_started``, the one caller): its rows go, so a later end of a
    run it no longer awaits does not wake it for nothing."""
    RunWait.objects.filter(waiter_id=waiter).delete()


@guarded
def outcomes(runs: Collection[uuid.UUID]) -> dict[uuid.UUID, tuple[str, Any, Any, str]]:
    """``run id → (status, result, error, name)`` of the runs that exist."""
    rows = Workflow.objects.filter(id__in=list(runs)).values_list(
        "id", "status", "result", "error", "name"
    )
    return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}


def mark_awaited(runs: Collection[uuid.UUID]) -> None:
    """A blocking ``result()`` waits for ``runs``: their ends will send a NOTIFY."""
    Workflow.objects.filter(id__in=list(runs), awaited=False).update(awaited=True)


def sweep(limit: int = 1000) -> int:
    """Wake the waiters of runs that ended without waking them (their worker died after
    the outcome, before the wake). Returns how many ended runs were found."""
    stale = RunWait.objects.filter(awaited_run__status__in=FINAL_STATUSES)
    ids = set(stale.values_list("awaited_run_id", flat=True)[:limit])
    if ids:
        ended(ids)
    return len(ids)
