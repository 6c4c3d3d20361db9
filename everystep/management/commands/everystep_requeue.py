"""``manage.py everystep_requeue RUN_ID``: put one running run back to scheduled; or, with
the runs list's filters instead of an id, every running run they match."""

from __future__ import annotations

from typing import Any

from everystep.management.commands._base import RunActionCommand
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.runs import requeue_one


class Command(RunActionCommand):
    help = (
        "Requeue one running run (its runner is gone or stuck): any worker resumes it from "
        "its recorded steps; the old holder's late writes are refused. With filter flags "
        "instead of a run id: every running run they match, in batches (--dry-run prints "
        "how many)."
    )
    action, done = "requeue", "requeued"

    def act_on_one(self, run_id: str, actor: Actor, reason: str) -> Any:
        return requeue_one(run_id, actor=actor, reason=reason)

    def act_on_many(self, run_filter: bulk.RunFilter, actor: Actor, reason: str, size: int) -> int:
        return bulk.bulk_requeue(run_filter, actor, batch_size=size, reason=reason)
