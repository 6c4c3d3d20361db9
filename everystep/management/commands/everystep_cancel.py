"""``manage.py everystep_cancel RUN_ID``: cancel a run that has not finished."""

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
        "Cancel a scheduled, running or blocked run. A running run stops at its next step "
        "boundary: the step in flight may have had its effect, but its record is refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run's id (a UUID)")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        try:
            run = store.cancel_run(run_id, actor=Actor.command("everystep_cancel"))
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"run {run.id} ({run.name}) cancelled")
