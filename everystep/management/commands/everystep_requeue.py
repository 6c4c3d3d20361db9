"""``manage.py everystep_requeue RUN_ID``: put one running run back to scheduled."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep import store
from everystep.errors import EverystepError
from everystep.management.commands._base import EverystepCommand
from everystep.management.options import checked_run_id
from everystep.store.audit import Actor


class Command(EverystepCommand):
    help = (
        "Requeue one running run (its runner is gone or stuck): any worker resumes it from "
        "its recorded steps; the old holder's late writes are refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run's id (a UUID)")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        try:
            run = store.requeue_one(run_id, actor=Actor.command("everystep_requeue"))
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"run {run.id} ({run.name}) requeued")
