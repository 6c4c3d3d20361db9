"""Settle the uncertain step of a ``blocked`` run, then requeue the run."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from everystep import serde, store
from everystep.errors import EverystepError
from everystep.management.options import checked_run_id


class Command(BaseCommand):
    help = (
        "Settle the 'started' step of a blocked run and requeue it: --result JSON (the "
        "effect happened, with this result), --error MESSAGE (it failed), or --discard "
        "(it did not happen; the step runs again)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="id of the blocked run")
        parser.add_argument("step_id", help="id of its started step, e.g. 2 or fan.0.charge")
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--result", metavar="JSON", help="the step's result, as JSON")
        mode.add_argument("--error", metavar="MESSAGE", help="record the step as failed")
        mode.add_argument("--discard", action="store_true", help="forget the start; re-run")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        if options["discard"]:
            mode, value = "discard", None
        elif options["error"] is not None:
            if not options["error"].strip():
                raise CommandError("--error needs a non-empty message")
            mode, value = "error", options["error"]
        else:
            try:
                value = serde.encode(json.loads(options["result"]))
            except json.JSONDecodeError as exc:
                raise CommandError(f"--result is not valid JSON: {exc}") from None
            mode = "result"
        try:
            run = store.resolve_step(run_id, options["step_id"], mode=mode, value=value)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"step {options['step_id']} of run {run.id} settled ({mode}); "
            f"run requeued as {run.status}"
        )
