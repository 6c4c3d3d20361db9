"""``manage.py everystep_requeue RUN_ID``: put one running run back to scheduled; or, with
the runs list's filters instead of an id, every running run they match."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep import store
from everystep.errors import EverystepError
from everystep.management.commands._base import EverystepCommand
from everystep.management.options import (
    add_filter_arguments,
    batch_size,
    checked_text,
    dry_run,
    run_or_filter,
    runs_text,
)
from everystep.store import bulk
from everystep.store.audit import Actor


class Command(EverystepCommand):
    help = (
        "Requeue one running run (its runner is gone or stuck): any worker resumes it from "
        "its recorded steps; the old holder's late writes are refused. With filter flags "
        "instead of a run id: every running run they match, in batches (--dry-run prints "
        "how many)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help="the run's id (a UUID)")
        parser.add_argument("--reason", default="", metavar="TEXT", help="why, for the audit")
        add_filter_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        target = run_or_filter(options)
        reason = checked_text(options["reason"], "--reason")
        actor = Actor.command("everystep_requeue")
        if isinstance(target, bulk.RunFilter):
            self._bulk(target, actor, reason, options)
            return
        try:
            run = store.requeue_one(target, actor=actor, reason=reason)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self.say(f"run {run.id} ({run.name}) requeued")

    def _bulk(
        self, run_filter: bulk.RunFilter, actor: Actor, reason: str, options: dict[str, Any]
    ) -> None:
        size = batch_size(options)
        counted = dry_run(options, run_filter, "requeue")
        if counted is not None:
            self.say(counted)
            return
        done = bulk.bulk_requeue(run_filter, actor, batch_size=size, reason=reason)
        self.say(f"requeued {runs_text(done)} (filter {run_filter})")
