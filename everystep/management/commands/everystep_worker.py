"""``manage.py everystep_worker``: parse and validate the flags, then run a ``Worker``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from everystep.errors import EverystepError
from everystep.management.commands._base import WholeFlags
from everystep.options import OPTIONS
from everystep.store.guard import DATABASE_ERRORS
from everystep.worker import Worker, reload

logger = logging.getLogger("everystep.worker")


class Command(WholeFlags, BaseCommand):
    help = "Claim due everystep runs and execute them until SIGTERM/SIGINT, then drain."
    # The system checks run in handle() instead, once the database answers: some connect
    # (Django 6's JSONField check asks SQLite and MySQL what they support), and a worker
    # started during an outage must wait for the database, not die with a traceback.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # Every flag comes from the one declaration of the worker options; a flag not
        # given stays None, so Worker falls back to the Django setting, then the default.
        for option in OPTIONS:
            if option.kind is bool:
                kind: dict[str, Any] = {"action": argparse.BooleanOptionalAction}
            else:
                parse = option.parse if option.auto else option.kind
                kind = {"type": parse, "metavar": option.key.upper()}
            source = f"{option.setting}, else " if option.setting else ""
            parser.add_argument(
                option.flag,
                dest=option.name,
                default=None,
                help=f"{option.help} (default: {source}{option.shown_default})",
                **kind,
            )

    def handle(self, *args: Any, **options: Any) -> None:
        given = {option.name: options[option.name] for option in OPTIONS}
        try:
            worker = Worker(**given)
        except ValueError as exc:
            raise CommandError(f"invalid option: {exc}") from None
        if worker.options.reload and not reload.in_child():
            sys.exit(reload.supervise())  # the parent: it never touches the database
        if not options.get("skip_checks"):
            self._check_once_the_database_answers(worker.options.name)
        try:
            clean, code = reload.run_watched(worker) if worker.options.reload else (worker.run(), 0)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        if not clean or code:
            # Steps still executing past the drain deadline were requeued; exiting
            # normally would wait for their threads, so leave now.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _check_once_the_database_answers(self, runner: str) -> None:
        delay = 0.0
        while True:
            try:
                self.check()
            except DATABASE_ERRORS as exc:
                delay = min(max(delay * 2, 0.2), 5.0)
                logger.warning(
                    "database unavailable (%s); system checks retry in %.1fs",
                    exc,
                    delay,
                    extra={"event": "worker.database_unavailable", "runner": runner},
                )
                connections.close_all()
                time.sleep(delay)
                continue
            if delay:
                logger.info(
                    "database reachable again",
                    extra={"event": "worker.database_back", "runner": runner},
                )
            return
