"""What every everystep command shares. (A leading underscore: Django does not take this
module for a command.)"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from everystep import store
from everystep.store.runs import missing_tables


class EverystepCommand(BaseCommand):
    """A command that, run against a database without everystep's tables, says to run
    ``migrate`` in one line (exit status ``tables_missing_status``) instead of printing
    the database error's traceback."""

    tables_missing_status = 1

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except store.UNREACHABLE as exc:
            missing = missing_tables(exc)
            if missing is None:
                raise
            raise CommandError(str(missing), returncode=self.tables_missing_status) from exc
