"""The audit trail: one ``AuditEntry`` per write action an operator takes, from the UI
or a management command (cancel, requeue, resolve, send, fork, prune, a runner's runs,
and every bulk action), listed newest first.

An entry is written in the transaction of the action it describes where the action is
one transaction, so neither is ever stored without the other. A bulk action commits
batch by batch: its entry is written with the first batch and counts up with each one,
so it always says how many runs were really touched.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import IntegrityError
from django.db.models import F, QuerySet

from everystep.models import AuditEntry
from everystep.safe_text import printable
from everystep.store import database

# An entry naming several runs keeps this many of their ids (and the count of all).
RUN_IDS_KEPT = 100
REASON_MAX_LENGTH = 2000

ACTIONS = (
    "cancel",
    "requeue",
    "resolve",
    "send",
    "fork",
    "prune",
    "requeue_runner",
    "bulk_cancel",
    "bulk_requeue",
    "bulk_fork",
)


@dataclass(frozen=True)
class Actor:
    """Who acts: a Django user through the UI, or whoever runs a management command."""

    name: str
    via: str  # "ui", or the command's name

    @classmethod
    def user(cls, user: Any) -> Actor:
        return cls(user.get_username(), "ui")

    @classmethod
    def command(cls, command: str) -> Actor:
        try:
            who = getpass.getuser()
        except (KeyError, OSError):  # a container user with no passwd entry
            who = "unknown"
        return cls(f"command ({who})", command)

    @property
    def by(self) -> str:
        """How a run's error or a log line names this actor: "alice (UI)",
        "command (root) (everystep_cancel)"."""
        return f"{self.name} ({'UI' if self.via == 'ui' else self.via})"


def record(
    action: str,
    actor: Actor,
    *,
    run: UUID | str | None = None,
    run_ids: Iterable[UUID | str] = (),
    filter: dict[str, Any] | None = None,
    count: int | None = None,
    reason: str = "",
    detail: dict[str, Any] | None = None,
    confirmation: str | None = None,
) -> AuditEntry:
    """Store one entry. ``run``: the one run acted on (the entry is pruned with it);
    ``run_ids``: several runs (the first ``RUN_IDS_KEPT`` are kept, ``count`` says how
    many); ``filter``: what a bulk action matched runs by; ``confirmation``: the UI
    confirmation the action was taken under (unique: see ``record_once``)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    ids = [str(run_id) for run_id in run_ids]
    if count is None:
        count = len(ids) or (1 if run is not None else 0)
    return AuditEntry.objects.create(
        action=action,
        actor=printable(actor.name)[:255],
        via=actor.via[:64],
        run_id=run,
        run_ids=ids[:RUN_IDS_KEPT],
        filter=filter,
        count=count,
        reason=printable(reason)[:REASON_MAX_LENGTH],
        detail=detail or {},
        confirmation=confirmation,
    )


def record_once(
    confirmation: str, action: str, actor: Actor, **fields: Any
) -> tuple[AuditEntry, bool]:
    """``record`` for an action its confirmation allows once: the entry made now and
    True, or the entry an earlier request of the same confirmation made and False."""
    try:
        # A savepoint: a refused insert leaves the caller's transaction usable. Two
        # requests at once: the unique key lets one insert in; the other waits for that
        # transaction to commit (PostgreSQL, MariaDB; SQLite's write lock) and is refused.
        with database.atomic():
            return record(action, actor, confirmation=confirmation, **fields), True
    except IntegrityError:
        return AuditEntry.objects.get(confirmation=confirmation), False


def confirmed(confirmation: str) -> AuditEntry | None:
    """The entry made under ``confirmation``, if its action was taken already."""
    return AuditEntry.objects.filter(confirmation=confirmation).first()


def add_count(entry: AuditEntry, more: int, run_ids: Iterable[UUID | str] = ()) -> None:
    """A bulk action's entry after one more batch: ``more`` runs touched, and the ids of
    the batch while the entry keeps fewer than ``RUN_IDS_KEPT``."""
    entry.count += more
    room = RUN_IDS_KEPT - len(entry.run_ids)
    if room > 0:
        entry.run_ids = entry.run_ids + [str(run_id) for run_id in run_ids][:room]
    AuditEntry.objects.filter(id=entry.id).update(count=F("count") + more, run_ids=entry.run_ids)


def recent(*, before: int | None = None, limit: int = 50) -> list[AuditEntry]:
    """Entries newest first; ``before``: only those with a smaller id (paging)."""
    entries = AuditEntry.objects.order_by("-id")
    if before is not None:
        entries = entries.filter(id__lt=before)
    return list(entries[:limit])


def _old(cutoff: Any) -> QuerySet[AuditEntry]:
    # An entry naming one run goes with that run; the rest (several runs, a filter, a
    # runner, a prune) go by age.
    return AuditEntry.objects.filter(run__isnull=True, at__lt=cutoff)


def prunable(cutoff: Any) -> int:
    """How many entries ``prune`` would delete."""
    return _old(cutoff).count()


def prune(cutoff: Any, *, keep: AuditEntry | None = None) -> int:
    """Delete the entries older than ``cutoff`` that name no single run (``keep``: the
    running prune's own entry). Returns how many were deleted."""
    old = _old(cutoff)
    if keep is not None:
        old = old.exclude(id=keep.id)
    deleted, _ = old.delete()
    return deleted
