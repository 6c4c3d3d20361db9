"""Bulk actions too large for one request, taken by a run of everystep itself: the
built-in workflow ``everystep.bulk_action`` (registered when the app loads, so every
worker runs it with no project code). Registered through the registry, not through the
edges' decorators; its step names are fixed here, so moving this code cannot break the
replay of a run in flight.

- **Batched**: each batch is one recorded step, given the last run id the batch before
  it reached (keyset paging, as ``store.bulk`` walks runs), so a crash resumes after
  the last recorded batch and a replay reads no run again.
- **Audited once**: ``hand_over`` makes the action's one audit entry (count 0) in the
  transaction that schedules the run; each batch counts its runs up in that entry, in
  the batch's own transaction, so the entry says how far the action got at any moment.
- **Cancellable**: cancelling the run stops it at the next batch. A cancel or requeue
  batch is an atomic step, fenced by the run's claim: its change, its count and its
  record commit together, or not at all once the run is cancelled. A fork batch (forks
  that commit one by one, each after a replay check) is a plain step: it finishes the
  batch it is in.
- **Visible**: it is a run like any other, on the runs list under its name; its result
  is the totals.
- **Once per confirmation**: the UI form's confirmation is the run's idempotency key,
  and its audit entry's unique ``confirmation``: two requests of one confirmation at
  once schedule one run and make one entry.
- **Never forked** (``replays.fork.builtin_refusal``): its arguments carry the action,
  the filter and the operator, so a fork would take that operator's action again for
  whoever may fork. A requeue (its runner died) resumes the same action, with the same
  entry: the action the operator confirmed, carried on, not a new one.

Runs created after the action began are left alone: the bound (a run id made before
the run was scheduled) is one of its arguments.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from everystep import serde
from everystep.context import current
from everystep.engine.steps import call_step
from everystep.models import AuditEntry, Workflow, uuid7
from everystep.registry import StepDef, WorkflowDef, register
from everystep.replays.bulk_fork import BulkForked, fork_batch
from everystep.store import database
from everystep.store.audit import Actor
from everystep.store.bulk import (
    DEFAULT_BATCH_SIZE,
    RunFilter,
    change_batch,
    entry_by_id,
    front_of_queue,
    next_batch,
    note_run,
    open_confirmed_entry,
    open_entry,
)
from everystep.store.forks import BULK_ACTION
from everystep.store.runs import create_run, get_run

NAME = BULK_ACTION
# A fork batch is forks committed one by one, each after a replay check, in a plain
# step that a cancel does not cut short: a smaller batch stops sooner.
FORK_BATCH_SIZE = 100
# The run's result keeps this many reasons for refused forks.
REASONS_KEPT = 5


class _Repeat(Exception):
    """The confirmation's action was already taken: undo this request's writes."""

    def __init__(self, run: Workflow | None) -> None:
        self.run = run


def hand_over(
    action: str,
    run_filter: RunFilter,
    actor: Actor,
    *,
    reason: str = "",
    confirmation: str | None = None,
    batch_size: int | None = None,
) -> Workflow | None:
    """Schedule the background run of a bulk ``action`` (cancel, requeue, fork) over the
    runs ``run_filter`` matches now, with its audit entry (``reason`` is the entry's).
    ``confirmation``, a key of at most 255 characters made for one confirmation (the UI
    form's), is the run's idempotency key: given again, it returns the run already
    scheduled for it, and makes no second entry; None if a request took that
    confirmation's action itself (``store.bulk.confirmed_entry`` says what it did)."""
    bound = uuid7()  # before the run's own id: a bulk action never acts on itself
    size = batch_size or (FORK_BATCH_SIZE if action == "fork" else DEFAULT_BATCH_SIZE)
    arguments = [action, run_filter.as_json(), [actor.name, actor.via], str(bound), size]
    try:
        with database.atomic():
            entry = _entry(action, actor, run_filter, reason, confirmation)
            stored = serde.encode([*arguments, entry.id], f"arguments of workflow {NAME}")
            # Due with the longest-due run: a cancel is not queued behind the backlog
            # it may be there to end.
            run = create_run(NAME, stored, confirmation, due_at=front_of_queue())
            if run.args[-1] != entry.id:  # another request of this confirmation won
                raise _Repeat(run)
            note_run(entry, run.id)
    except _Repeat as repeat:
        return repeat.run
    return run


def _entry(
    action: str, actor: Actor, run_filter: RunFilter, reason: str, confirmation: str | None
) -> AuditEntry:
    """The action's new entry; ``_Repeat`` if its confirmation has one already."""
    if confirmation is None:
        return open_entry(action, actor, run_filter, reason=reason)
    entry, made = open_confirmed_entry(action, actor, run_filter, confirmation, reason=reason)
    if not made:
        run = entry.detail.get("run") if isinstance(entry.detail, dict) else None
        raise _Repeat(get_run(UUID(run)) if run else None)
    return entry


def bulk_action(
    action: str,
    filter_json: dict[str, str],
    actor: list[str],
    bound: str,
    batch_size: int,
    entry_id: int,
) -> dict[str, Any]:
    """Take ``action`` on the runs ``filter_json`` matches below ``bound``, batch by
    batch, counting them in the audit entry ``entry_id``; the totals."""
    totals: dict[str, Any] = {"action": action, "count": 0, "refused": 0, "reasons": []}
    # The forks' idempotency keys are made of this run's id: a fork batch run again
    # after a crash forks no run twice.
    context = current()
    key_base = str(context.workflow_id) if context is not None else None
    last: str | None = None
    while True:
        if action == "fork":
            batch = fork_runs(filter_json, bound, last, batch_size, entry_id, key_base)
        else:
            batch = change_runs(action, filter_json, actor, bound, last, batch_size, entry_id)
        _add(totals, batch)
        if batch["seen"] < batch_size:
            return totals
        last = batch["last"]


def _add(totals: dict[str, Any], batch: dict[str, Any]) -> None:
    totals["count"] += batch["count"]
    totals["refused"] += batch.get("refused", 0)
    room = REASONS_KEPT - len(totals["reasons"])
    totals["reasons"] += batch.get("reasons", [])[:room]


def _change_runs(
    action: str,
    filter_json: dict[str, str],
    actor: list[str],
    bound: str,
    after: str | None,
    size: int,
    entry_id: int,
) -> dict[str, Any]:
    """One batch of a bulk cancel or requeue (``store.bulk.change_batch``), in the
    step's transaction."""
    ids = change_batch(
        action,
        RunFilter.from_json(filter_json),
        Actor(*actor),
        entry_by_id(entry_id),
        after=_id(after),
        size=size,
        bound=UUID(bound),
    )
    return {"seen": len(ids), "last": _last(ids), "count": len(ids)}


def _fork_runs(
    filter_json: dict[str, str],
    bound: str,
    after: str | None,
    size: int,
    entry_id: int,
    key_base: str | None,
) -> dict[str, Any]:
    """One batch of a bulk fork (``replays.bulk_fork.fork_batch``)."""
    run_filter = RunFilter.from_json(filter_json)
    ids = next_batch(run_filter, "fork", after=_id(after), size=size, bound=UUID(bound))
    done = BulkForked()
    fork_batch(ids, entry_by_id(entry_id), done, key_base=key_base)
    return {
        "seen": len(ids),
        "last": _last(ids),
        "count": done.forked,
        "refused": done.refused,
        "reasons": done.reasons,
    }


# A cancel or requeue batch commits with its record, fenced by the run's claim.
_CHANGE = StepDef(f"{NAME}.change_runs", _change_runs, atomic=True)
_FORK = StepDef(f"{NAME}.fork_runs", _fork_runs)


def change_runs(*args: Any) -> dict[str, Any]:
    """A cancel or requeue batch as the body calls it: recorded, served on replay."""
    result: dict[str, Any] = call_step(_CHANGE, args, {}, None)
    return result


def fork_runs(*args: Any) -> dict[str, Any]:
    """A fork batch as the body calls it: recorded, served on replay."""
    result: dict[str, Any] = call_step(_FORK, args, {}, None)
    return result


register(WorkflowDef(NAME, bulk_action))


def _id(text: str | None) -> UUID | None:
    return None if text is None else UUID(text)


def _last(ids: list[UUID]) -> str | None:
    return str(ids[-1]) if ids else None
