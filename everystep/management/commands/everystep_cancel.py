"""``manage.py everystep_cancel RUN_ID``: cancel a run that has not finished; or, with the
runs list's filters instead of an id, every unfinished run they match."""

from __future__ import annotations

from typing import Any

from everystep.management.commands._base import RunActionCommand
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run


class Command(RunActionCommand):
    help = (
        "Cancel a scheduled, running or blocked run, and its unfinished children. A "
        "running run stops at its next step boundary: the step in flight may have had its "
        "effect, but its record is refused. With filter flags instead of a run id: every "
        "unfinished run they match, in batches (--dry-run prints how many)."
    )
    action, done = "cancel", "cancelled"

    def act_on_one(self, run_id: str, actor: Actor, reason: str) -> Any:
        return cancel_run(run_id, actor=actor, reason=reason)

    def act_on_many(self, run_filter: bulk.RunFilter, actor: Actor, reason: str, size: int) -> int:
        return bulk.bulk_cancel(run_filter, actor, batch_size=size, reason=reason)
