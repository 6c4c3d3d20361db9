"""Acting on every run a filter matches: bulk cancel and bulk requeue here, bulk fork in
``everystep.replays.bulk_fork`` (over ``for_each_batch``).

However many runs match, none of this is one transaction or one list in memory: the runs
are walked in id order by keyset paging (the next batch starts after the last id of the
one before, never at an OFFSET), and each batch is changed in a short transaction of its
own, so workers go on writing meanwhile and a crash keeps the batches already done. The
filter is the runs page's (``store.list_runs``): the same columns, the same time window
as an id range.

Runs created after the action began are left alone: a bulk fork would otherwise meet its
own forks further up the ids, and a cancel would chase runs scheduled while it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from everystep import conf
from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, AuditEntry, Status, Workflow, WorkflowQuerySet, uuid7
from everystep.store import audit, database
from everystep.store.audit import Actor
from everystep.store.forks import BUILTIN_WORKFLOWS
from everystep.store.reports import filtered_runs, id_bounds
from everystep.store.runners import live_runner_names
from everystep.store.runs import after_cancel
from everystep.store.wake import notify_due
from everystep.stored_errors import encode_error

DEFAULT_BATCH_SIZE = 1000
# Far above what a short transaction should lock, and below every database's limit on
# the parameters of one statement (the ids of a batch are parameters of its UPDATE).
MAX_BATCH_SIZE = 10_000
# No run has this id (uuid7 ids carry a time): the SQLite write lock's statement.
_NO_RUN = UUID(int=0)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a bulk action touches: the runs list's filters, all of them that are
    given. ``created_after`` is inclusive and ``created_before`` exclusive, as on the runs
    page. At least one is required, so that "every run" is never what a forgotten flag
    means: name a status to act on every run in it."""

    workflow: str | None = None
    status: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    runner: str | None = None
    parent: UUID | None = None
    queue: str | None = None

    def __post_init__(self) -> None:
        if all(getattr(self, given.name) is None for given in fields(self)):
            raise EverystepError(
                "a bulk action needs a filter (workflow, status, created after or before, "
                "runner, parent, queue); to act on every run in a status, name that status"
            )
        if self.status is not None and self.status not in Status.values:
            raise EverystepError(
                f"unknown status {self.status!r}; valid: {', '.join(Status.values)}"
            )

    def runs(self) -> WorkflowQuerySet:
        """The matching runs, as a queryset (nothing is read yet)."""
        runs = filtered_runs(
            status=self.status,
            name=self.workflow,
            runner=self.runner,
            parent=self.parent,
            queue=self.queue,
        )
        return runs.filter(**id_bounds(self.created_after, self.created_before))

    def as_json(self) -> dict[str, str]:
        """The filters given, as JSON-ready text (an audit entry's ``filter``)."""
        return {
            given.name: _text(getattr(self, given.name))
            for given in fields(self)
            if getattr(self, given.name) is not None
        }

    @classmethod
    def from_json(cls, given: dict[str, str]) -> RunFilter:
        """The filter ``as_json`` gave (a background run's argument)."""
        values: dict[str, Any] = dict(given)
        for name in ("created_after", "created_before"):
            if name in values:
                values[name] = datetime.fromisoformat(values[name])
        if "parent" in values:
            values["parent"] = UUID(values["parent"])
        return cls(**values)

    def __str__(self) -> str:
        """The filters given, as ``workflow=… status=…``: how messages name them."""
        return " ".join(f"{name}={value}" for name, value in self.as_json().items())


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _running(runs: WorkflowQuerySet) -> WorkflowQuerySet:
    # A runner still beating would carry on with runs handed to other workers meanwhile:
    # their runs are left to it, as the runners page and everystep_requeue_runner leave
    # them (a run requeued by its id is the operator's own call on that one run).
    return runs.filter(status=Status.RUNNING).exclude(claimed_by__in=live_runner_names())


def _finished(runs: WorkflowQuerySet) -> WorkflowQuerySet:
    # everystep's own runs are never forked (``store.forks.BUILTIN_WORKFLOWS``).
    return runs.filter(status__in=FINAL_STATUSES).exclude(name__in=BUILTIN_WORKFLOWS)


def builtin_matches(run_filter: RunFilter) -> int:
    """How many finished runs of everystep's own workflows match: what a bulk fork
    leaves out, and says it left out."""
    finished = run_filter.runs().filter(status__in=FINAL_STATUSES)
    return finished.filter(name__in=BUILTIN_WORKFLOWS).order_by().count()


Rule = Callable[[WorkflowQuerySet], WorkflowQuerySet]
# The matching runs each action can change: a cancel ends unfinished runs, a requeue
# takes back running ones, a fork copies finished ones.
RULES: dict[str, Rule] = {
    "cancel": WorkflowQuerySet.unfinished,
    "requeue": _running,
    "fork": _finished,
}


def _targets(run_filter: RunFilter, action: str | None) -> WorkflowQuerySet:
    runs = run_filter.runs()
    return runs if action is None else RULES[action](runs)


def count(run_filter: RunFilter, action: str | None = None, *, cap: int | None = None) -> int:
    """How many runs match, and with ``action`` (a key of ``RULES``), how many of them it
    would change; with ``cap``, counting stops at ``cap + 1`` (a value above ``cap``
    means "more than ``cap``")."""
    runs = _targets(run_filter, action).order_by()
    return runs.count() if cap is None else runs.values("id")[: cap + 1].count()


def for_each_batch(
    run_filter: RunFilter,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    action: str | None = None,
    bound: UUID | None = None,
) -> Iterator[list[UUID]]:
    """The ids of the matching runs (with ``action``: those it would change), in id
    order, ``batch_size`` at a time. Each batch is read when the one before has been
    used, starting after its last id: runs that stop or start matching meanwhile shift
    nothing. ``bound``: only runs with a smaller id (by default, made before the call)."""
    _check_batch_size(batch_size)
    bound = bound or uuid7()
    last: UUID | None = None
    while True:
        ids = next_batch(run_filter, action, after=last, size=batch_size, bound=bound)
        if ids:
            yield ids
        if len(ids) < batch_size:
            return
        last = ids[-1]


def next_batch(
    run_filter: RunFilter, action: str | None, *, after: UUID | None, size: int, bound: UUID
) -> list[UUID]:
    """The ids of the next ``size`` runs ``for_each_batch`` walks: after ``after``, below
    ``bound``."""
    return _page(_targets(run_filter, action).filter(id__lt=bound), after, size)


def bulk_cancel(
    run_filter: RunFilter,
    actor: Actor,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    reason: str = "",
    entry: AuditEntry | None = None,
) -> int:
    """Cancel every unfinished run that matches, and their unfinished children (as
    ``store.cancel_run`` does); the number of matching runs cancelled (children that
    do not match are not counted). One ``bulk_cancel`` audit entry counts them:
    ``entry`` if given (see ``open_entry``), else a new one."""
    return _act("cancel", run_filter, actor, batch_size, reason, entry)


def bulk_requeue(
    run_filter: RunFilter,
    actor: Actor,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    reason: str = "",
    entry: AuditEntry | None = None,
) -> int:
    """Put every ``running`` run that matches back to ``scheduled`` (as
    ``store.requeue_one`` does: its holder's late writes are refused by the fence), but
    not the runs of a runner that may be alive; the number requeued. One
    ``bulk_requeue`` audit entry counts them: ``entry`` if given, else a new one."""
    return _act("requeue", run_filter, actor, batch_size, reason, entry)


@dataclass(frozen=True)
class _Change:
    """What a bulk cancel or requeue does to a batch: the change (on a batch's locked
    ids, in its transaction), and what follows the batch's commit."""

    change: Callable[[list[UUID]], None]
    after: Callable[[list[UUID]], None] | None


def _cancelling(actor: Actor) -> _Change:
    error = encode_error(EverystepError(f"cancelled by {actor.by}"))

    def cancel(ids: list[UUID]) -> None:
        Workflow.objects.filter(id__in=ids).finish(Status.CANCELLED, error=error)

    # After the batch's commit, as cancel_run does: no lock on a parent is held while its
    # children's rows are locked (see ``run_waits``).
    return _Change(cancel, partial(after_cancel, actor=actor))


def _requeueing(actor: Actor) -> _Change:
    def requeue(ids: list[UUID]) -> None:
        Workflow.objects.filter(id__in=ids).requeue()
        notify_due()

    return _Change(requeue, None)


CHANGES: dict[str, Callable[[Actor], _Change]] = {
    "cancel": _cancelling,
    "requeue": _requeueing,
}


def _act(
    action: str,
    run_filter: RunFilter,
    actor: Actor,
    batch_size: int,
    reason: str,
    entry: AuditEntry | None,
) -> int:
    _check_batch_size(batch_size)
    bound = uuid7()
    # Made before the first batch: a bulk action is on record from its start, also when
    # nothing matches (a count of 0) or a batch fails.
    entry = entry or open_entry(action, actor, run_filter, reason=reason)
    touched = 0
    last: UUID | None = None
    while True:
        ids = change_batch(
            action, run_filter, actor, entry, after=last, size=batch_size, bound=bound
        )
        touched += len(ids)
        if len(ids) < batch_size:
            return touched
        last = ids[-1]


def change_batch(
    action: str,
    run_filter: RunFilter,
    actor: Actor,
    entry: AuditEntry,
    *,
    after: UUID | None,
    size: int,
    bound: UUID,
) -> list[UUID]:
    """One batch of a bulk cancel or requeue: the next ``size`` matching runs after
    ``after`` and below ``bound`` that ``action`` changes, locked, changed and counted in
    ``entry`` in one transaction (a savepoint of the caller's, if it has one: the
    background run's step). Their ids. What follows a change (a cancel's children) runs
    once the outermost transaction has committed."""
    change = CHANGES[action](actor)
    runs = _targets(run_filter, action).filter(id__lt=bound)
    with database.atomic():
        # The batch is read again under lock with the filter and the rule: a run that
        # changed status since it was counted is skipped, not an error, and the UPDATE
        # changes exactly the runs locked.
        ids = _page(runs, after, size, locked=True)
        if ids:
            change.change(ids)
            audit.add_count(entry, len(ids), ids)
            if change.after is not None:
                transaction.on_commit(partial(change.after, ids), using=conf.database())
    return ids


def open_entry(
    action: str,
    actor: Actor,
    run_filter: RunFilter,
    *,
    reason: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """The one audit entry of a bulk ``action`` (a key of ``RULES``), with a count of 0:
    each batch counts up its runs in its own transaction, so the entry always says how
    many were really touched."""
    return audit.record(
        f"bulk_{action}",
        actor,
        filter=run_filter.as_json(),
        count=0,
        reason=reason,
        detail=detail,
    )


def open_confirmed_entry(
    action: str, actor: Actor, run_filter: RunFilter, confirmation: str, *, reason: str = ""
) -> tuple[AuditEntry, bool]:
    """``open_entry`` for a UI confirmation: the entry made now and True, or the entry an
    earlier request of that confirmation made (its action done or under way) and False;
    two requests at once make one entry (``audit.record_once``)."""
    return audit.record_once(
        confirmation,
        f"bulk_{action}",
        actor,
        filter=run_filter.as_json(),
        count=0,
        reason=reason,
        detail={"confirmation": confirmation},
    )


def entry_by_id(entry_id: int) -> AuditEntry:
    """A bulk action's entry, to count up (a background run's batch reads it afresh)."""
    return AuditEntry.objects.get(id=entry_id)


def note_run(entry: AuditEntry, run_id: UUID) -> None:
    """Name in ``entry`` the background run that takes its action."""
    entry.detail = {**entry.detail, "run": str(run_id)}
    AuditEntry.objects.filter(id=entry.id).update(detail=entry.detail)


def confirmed_entry(confirmation: str) -> AuditEntry | None:
    """The bulk action's entry made for a confirmation (the UI form's), if there is one:
    that form was sent before."""
    return audit.confirmed(confirmation)


def front_of_queue() -> datetime:
    """When a run must be due to be claimed next: with the longest-due run's time (and a
    larger id) a background bulk action comes right after it, not behind the backlog it
    may be there to cancel."""
    oldest = (
        Workflow.objects.filter(status=Status.SCHEDULED, due_at__lte=timezone.now())
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )
    return oldest or timezone.now()


def _page(
    runs: WorkflowQuerySet, after: UUID | None, size: int, *, locked: bool = False
) -> list[UUID]:
    """The next ``size`` ids of ``runs`` after ``after``; ``locked``: their rows locked
    for the caller's transaction."""
    if after is not None:
        runs = runs.filter(id__gt=after)
    if locked:
        _take_write_lock()
        runs = runs.select_for_update()
    return list(runs.order_by("id").values_list("id", flat=True)[:size])


def _take_write_lock() -> None:
    # SQLite has no row locks (select_for_update does nothing there), and a transaction
    # that reads and then writes fails at once ("database is locked") if another
    # connection wrote in between. A write first takes the database's write lock for the
    # whole transaction; an UPDATE that matches no row takes it just the same.
    if database.connection().vendor == "sqlite":
        Workflow.objects.filter(id=_NO_RUN).update(status=F("status"))


def _check_batch_size(batch_size: int) -> None:
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise EverystepError(f"the batch size must be from 1 to {MAX_BATCH_SIZE}, not {batch_size}")
