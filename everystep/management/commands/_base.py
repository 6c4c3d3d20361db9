"""What every everystep command shares. (A leading underscore: Django does not take this
module for a command.)"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from everystep import store
from everystep.serde import escape_controls
from everystep.store.runs import missing_tables


class EverystepCommand(BaseCommand):
    """A command that, run against a database without everystep's tables, says to run
    ``migrate`` in one line (exit status ``tables_missing_status``) instead of printing
    the database error's traceback; and that prints stored text (names, messages,
    results) through ``say``, so none of it reaches the terminal as control characters."""

    tables_missing_status = 1

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except store.UNREACHABLE as exc:
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
