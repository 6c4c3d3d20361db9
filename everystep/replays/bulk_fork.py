"""Bulk fork: fork every finished run a filter matches (the UI's bulk action, and
``everystep_fork`` with filter flags).

Each fork is its own replay check and its own transaction (``fork_run``, with its count
in the audit entry), so the runs are forked one by one, read a batch of ids at a time
(``store.bulk.for_each_batch``); a run ``fork_run`` refuses (its workflow is not
installed here, its fork would fail on replay) is counted and the others go on. Runs of
everystep's own workflows are not forked at all: left out of the matching runs, and
counted apart (``skipped``) so that the command and the page say so. One
``bulk_fork`` audit entry counts the forks, made before the first and counted up with
each one.

A bulk fork of more runs than a request should take runs in the background, batch by
batch (``everystep.builtins.bulk_action``, over ``fork_batch``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from everystep.errors import EverystepError
from everystep.models import AuditEntry
from everystep.store import audit, database
from everystep.store.audit import Actor
from everystep.store.bulk import (
    DEFAULT_BATCH_SIZE,
    RunFilter,
    builtin_matches,
    for_each_batch,
    open_entry,
)
from everystep.store.forks import already_forked, fork_key

logger = logging.getLogger("everystep.ops")

# A bulk fork's result keeps this many of its refusals' reasons.
REASONS_KEPT = 5


@dataclass
class BulkForked:
    """What a bulk fork did: runs forked, runs refused, the first refusals' reasons
    (``run <id>: why``), and the matching runs of everystep's own workflows it left out
    (never forked: ``replays.fork.builtin_refusal``)."""

    forked: int = 0
    refused: int = 0
    skipped: int = 0
    reasons: list[str] = field(default_factory=list)


def bulk_fork(
    run_filter: RunFilter,
    actor: Actor,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    from_step: str | None = None,
    entry: AuditEntry | None = None,
    confirmation: str | None = None,
) -> BulkForked:
    """Fork each finished run that matches (``fork_run``: from ``from_step``, by default
    the first step that failed or has no outcome), counting the forks and the runs it
    refused. ``entry``: the action's audit entry, if already made (``open_entry``);
    ``confirmation``: the UI form's, which makes each run's fork once however many times
    the form is sent (see ``fork_batch``)."""
    done = BulkForked(skipped=builtin_matches(run_filter))
    entry = entry or open_entry("fork", actor, run_filter)
    for batch in for_each_batch(run_filter, batch_size, action="fork"):
        fork_batch(batch, entry, done, from_step=from_step, key_base=confirmation)
    logger.info(
        "bulk fork by %s (filter %s): %d run(s) forked, %d refused, %d of everystep's own left out",
        actor.by,
        run_filter,
        done.forked,
        done.refused,
        done.skipped,
        extra={
            "event": "ops.bulk_fork",
            "forked": done.forked,
            "refused": done.refused,
            "skipped": done.skipped,
        },
    )
    return done


def fork_batch(
    run_ids: list[UUID],
    entry: AuditEntry,
    done: BulkForked,
    *,
    from_step: str | None = None,
    key_base: str | None = None,
) -> None:
    """Fork each of ``run_ids``, adding to ``done`` and counting each fork in ``entry``.
    With ``key_base`` each fork carries an idempotency key made of it (``fork_key``): a
    run already forked under it (the batch run again after a crash, the same form sent
    twice) is counted as forked and not forked again, and the entry, which counted it
    then, is left as it is."""
    made = already_forked(key_base, run_ids) if key_base is not None else set()
    for run_id in run_ids:
        if run_id in made:
            done.forked += 1
            continue
        key = fork_key(key_base, run_id) if key_base is not None else None
        # The fork and its count in the entry commit together: the entry never counts
        # a fork that is not there, nor misses one that is.
        with database.atomic():
            if _fork(run_id, from_step, key, done):
                audit.add_count(entry, 1, [run_id])


def _fork(run_id: UUID, from_step: str | None, key: str | None, done: BulkForked) -> bool:
    # Imported when used: the fork's replay check loads for a fork only, not for the
    # pages and commands that import this module to offer one.
    from everystep.replays.fork import fork_run

    try:
        # No actor: the bulk entry stands for every fork, not one entry per run.
        fork_run(run_id, from_step=from_step, idempotency_key=key)
    except EverystepError as exc:
        done.refused += 1
        if len(done.reasons) < REASONS_KEPT:
            done.reasons.append(f"run {run_id}: {exc}")
        return False
    done.forked += 1
    return True
