"""``manage.py everystep_send RUN_ID NAME [--payload JSON]``: send an event to a run."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep.errors import EverystepError
from everystep.management.arguments import (
    RUN_ID_HELP,
    checked_event_name,
    checked_json,
    checked_run_id,
    checked_text,
)
from everystep.management.commands._base import EverystepCommand
from everystep.store.audit import Actor
from everystep.store.events import send_event
from everystep.store.runs import get_run

logger = logging.getLogger("everystep.ops")


class Command(EverystepCommand):
    help = (
        "Send the event NAME to an unfinished run, as everystep.send() does: a run waiting "
        "for it becomes due at once; one that reaches wait_for(NAME) later gets it then. "
        "A name already sent keeps its first payload."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help=f"the run's id ({RUN_ID_HELP})")
        parser.add_argument("name", help="the event's name, as the workflow's wait_for() names it")
        parser.add_argument("--payload", metavar="JSON", help="the event's payload (default null)")
        parser.add_argument("--reason", default="", help="why, kept in the audit entry")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        name = checked_event_name(options["name"])
        text = options["payload"]
        payload = None if text is None else checked_json(text, "--payload")
        actor = Actor.command("everystep_send")
        reason = checked_text(options["reason"], "--reason")
        try:
            sent = send_event(run_id, name, payload, actor=actor, reason=reason)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self._log(run_id, name, sent, actor)
        if sent:
            self.say(f"sent {name} to run {run_id}")
        else:
            self.say(f"event {name} was already sent to run {run_id}; the first payload stays")

    def _log(self, run_id: str, name: str, sent: bool, actor: Actor) -> None:
        run = get_run(run_id)
        logger.info(
            "run %s: event %s %s by %s",
            run_id,
            name,
            "sent" if sent else "already sent, ignored",
            actor.by,
            extra={
                "event": "run.event_sent",
                "run_id": run_id,
                "workflow": run.name if run else None,
                "runner": run.claimed_by if run else None,
                "event_name": name,
                "sent": sent,
                "user": actor.name,
            },
        )
