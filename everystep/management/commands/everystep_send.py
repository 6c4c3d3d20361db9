"""``manage.py everystep_send RUN_ID NAME [--payload JSON]``: send an event to a run."""

from __future__ import annotations

import getpass
import logging
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep import send, store
from everystep.errors import EverystepError
from everystep.management.commands._base import EverystepCommand
from everystep.management.options import checked_event_name, checked_json, checked_run_id

logger = logging.getLogger("everystep.ops")


class Command(EverystepCommand):
    help = (
        "Send the event NAME to an unfinished run, as everystep.send() does: a run waiting "
        "for it becomes due at once; one that reaches wait_for(NAME) later gets it then. "
        "A name already sent keeps its first payload."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run's id (a UUID)")
        parser.add_argument("name", help="the event's name, as the workflow's wait_for() names it")
        parser.add_argument("--payload", metavar="JSON", help="the event's payload (default null)")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        name = checked_event_name(options["name"])
        text = options["payload"]
        payload = None if text is None else checked_json(text, "--payload")
        user = getpass.getuser()
        try:
            sent = send(run_id, name, payload)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        self._log(run_id, name, sent, user)
        if sent:
            self.stdout.write(f"sent {name} to run {run_id}")
        else:
            self.stdout.write(
                f"event {name} was already sent to run {run_id}; the first payload stays"
            )

    def _log(self, run_id: str, name: str, sent: bool, user: str) -> None:
        run = store.get_run(run_id)
        logger.info(
            "run %s: event %s %s by %s (everystep_send)",
            run_id,
            name,
            "sent" if sent else "already sent, ignored",
            user,
            extra={
                "event": "run.event_sent",
                "run_id": run_id,
                "workflow": run.name if run else None,
                "runner": run.claimed_by if run else None,
                "event_name": name,
                "sent": sent,
                "user": user,
            },
        )
