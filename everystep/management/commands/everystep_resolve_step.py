"""Settle the uncertain step of a ``blocked`` run, then requeue the run."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep.errors import EverystepError
from everystep.management.arguments import RUN_ID_HELP, checked_run_id, checked_text
from everystep.management.commands._base import EverystepCommand
from everystep.models import Workflow
from everystep.store.audit import Actor
from everystep.store.runs import resolve_step_from_text

logger = logging.getLogger("everystep.ops")


class Command(EverystepCommand):
    help = (
        "Settle the 'started' step of a blocked run and requeue it: --result JSON (the "
        "effect happened, with this result), --error MESSAGE (it failed), or --discard "
        "(it did not happen; the step runs again)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help=f"id of the blocked run ({RUN_ID_HELP})")
        parser.add_argument("step_id", help="id of its started step, e.g. 2 or fan.0.charge")
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--result", metavar="JSON", help="the step's result, as JSON")
        mode.add_argument("--error", metavar="MESSAGE", help="record the step as failed")
        mode.add_argument("--discard", action="store_true", help="forget the start; re-run")
        parser.add_argument("--reason", default="", help="why, kept in the audit entry")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        # An empty --result or --error is still that mode (and refused as such).
        mode = next((mode for mode in ("result", "error") if options[mode] is not None), "discard")
        text = options[mode] if mode != "discard" else ""
        actor = Actor.command("everystep_resolve_step")
        reason = checked_text(options["reason"], "--reason")
        try:
            run = resolve_step_from_text(
                run_id, options["step_id"], mode=mode, text=text, actor=actor, reason=reason
            )
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        _log(run, options["step_id"], mode, actor)
        self.say(
            f"step {options['step_id']} of run {run.id} settled ({mode}); "
            f"run requeued as {run.status}"
        )


def _log(run: Workflow, step_id: str, mode: str, actor: Actor) -> None:
    logger.info(
        "run %s: step %s settled (%s) by %s",
        run.id,
        step_id,
        mode,
        actor.by,
        extra={
            "event": "run.step_settled",
            "run_id": str(run.id),
            "workflow": run.name,
            "runner": run.claimed_by,
            "step_id": step_id,
            "mode": mode,
            "user": actor.name,
        },
    )
