"""What every everystep command shares. (A leading underscore: Django does not take this
module for a command.)"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from everystep.errors import EverystepError
from everystep.management.arguments import (
    RUN_ID_HELP,
    add_filter_arguments,
    batch_size,
    checked_text,
    dry_run,
    run_or_filter,
    runs_text,
)
from everystep.safe_text import escape_controls
from everystep.store.audit import Actor
from everystep.store.bulk import RunFilter
from everystep.store.guard import UNREACHABLE
from everystep.store.runs import missing_tables


class WholeFlags:
    """A command whose flags must be written out whole: argparse would take ``--pol 8``
    for ``--poll 8`` when the user meant ``--pool 8``, and run with the wrong setting.
    An abbreviation is an unknown flag, and the error names it."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs["allow_abbrev"] = False
        parser: CommandParser = super().create_parser(  # type: ignore[misc]
            prog_name, subcommand, **kwargs
        )
        return parser


class EverystepCommand(WholeFlags, BaseCommand):
    """A command that, run against a database without everystep's tables, says to run
    ``migrate`` in one line (exit status ``tables_missing_status``) instead of printing
    the database error's traceback; and that prints stored text (names, messages,
    results) through ``say``, so none of it reaches the terminal as control characters."""

    tables_missing_status = 1

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except UNREACHABLE as exc:
            missing = missing_tables(exc)
            if missing is None:
                raise
            raise CommandError(str(missing), returncode=self.tables_missing_status) from exc
        except CommandError as exc:
            # A refusal may quote a stored name or message: one line, nothing a terminal obeys.
            said = escape_controls(str(exc))
            if said == str(exc):
                raise
            raise CommandError(said, returncode=exc.returncode) from exc

    def say(self, line: str) -> None:
        """Print ``line`` as one line of text: a newline, a carriage return, an ANSI
        escape in it (a stored name or message) is printed escaped (``\\x1b``)."""
        self.stdout.write(escape_controls(line))


class RunActionCommand(EverystepCommand, metaclass=ABCMeta):
    """A command that acts on one run by id, or with the runs list's filters instead on
    every run they match, in batches (``--dry-run`` counts them); ``--reason`` is kept in
    the audit entry. A subclass names its ``action`` and ``done`` (the past tense) and
    gives the two store calls."""

    action = ""
    done = ""

    @abstractmethod
    def act_on_one(self, run_id: str, actor: Actor, reason: str) -> Any:
        """Act on the run ``run_id``; the run, or an ``EverystepError`` saying why not."""

    @abstractmethod
    def act_on_many(self, run_filter: RunFilter, actor: Actor, reason: str, size: int) -> int:
        """Act on every run ``run_filter`` matches, ``size`` a batch; how many changed."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help=f"the run's id ({RUN_ID_HELP})")
        parser.add_argument("--reason", default="", metavar="TEXT", help="why, for the audit")
        add_filter_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        target = run_or_filter(options)
        reason = checked_text(options["reason"], "--reason")
        actor = Actor.command(f"everystep_{self.action}")
        if not isinstance(target, RunFilter):
            try:
                run = self.act_on_one(target, actor, reason)
            except EverystepError as exc:
                raise CommandError(str(exc)) from None
            self.say(f"run {run.id} ({run.name}) {self.done}")
            return
        counted = dry_run(options, target, self.action)
        if counted is not None:
            self.say(counted)
            return
        touched = self.act_on_many(target, actor, reason, batch_size(options))
        self.say(f"{self.done} {runs_text(touched)} (filter {target})")
