"""How the worker waits for its database: the backoff between attempts, and what it logs
while the database is unreachable or lacks everystep's tables."""

from __future__ import annotations

import logging

from django.db import connections

from everystep.store import database
from everystep.store.guard import DATABASE_ERRORS
from everystep.store.reports import unapplied_migrations
from everystep.store.runs import missing_tables

logger = logging.getLogger("everystep.worker")

MAX_BACKOFF = 5.0


class Outage:
    """The seconds to wait before the next attempt (0 while the database answers)."""

    def __init__(self, runner: str, poll: float) -> None:
        self.runner = runner
        self.poll = poll
        self.backoff = 0.0
        self._tables_missing = False
        self._busy = False

    def down(self, exc: BaseException | None) -> None:
        """An attempt failed with ``exc``: back off, say why (missing tables only once:
        they stay missing until someone runs migrate, which the worker then notices)."""
        if exc is not None and database.is_lock_busy(exc):
            self._lock_busy()
            return
        self.backoff = min(max(self.backoff * 2, self.poll, 0.2), MAX_BACKOFF)
        missing = missing_tables(exc) if exc is not None else None
        if missing is None:
            logger.warning(
                "database unavailable (%s); retrying in %.1fs",
                exc,
                self.backoff,
                extra={"event": "worker.database_unavailable", "runner": self.runner},
            )
        elif not self._tables_missing:
            logger.error(
                "%s; the worker waits for them and starts by itself once they exist",
                missing,
                extra={"event": "worker.tables_missing", "runner": self.runner},
            )
        else:
            logger.debug(
                "everystep's tables are still missing; retrying in %.1fs",
                self.backoff,
                extra={"event": "worker.tables_missing", "runner": self.runner},
            )
        self._tables_missing = missing is not None
        connections.close_all()

    def _lock_busy(self) -> None:
        # A lock is held elsewhere: a long transaction, an atomic step, a frozen process
        # (SQLite's one write lock, or a row). The database is there and the attempt
        # already waited its while: try again after a poll, on the same connection, and
        # say so once.
        self.backoff = self.poll
        if not self._busy:
            logger.info(
                "another transaction holds a lock the worker needs (a long transaction, an "
                "atomic step or a frozen process?); the worker keeps trying",
                extra={"event": "worker.lock_busy", "runner": self.runner},
            )
        self._busy = True

    def migrating(self) -> bool:
        """After missing tables: whether everystep's migrations are still being applied.

        Tables appear one migration at a time while ``migrate`` runs. A worker that used
        them at once would hold row locks that a later migration's ``ALTER TABLE`` waits
        for on PostgreSQL, and the two deadlock: the migrate fails. So the worker waits
        until the last of everystep's migrations is in."""
        if not self._tables_missing:
            return False
        try:
            pending = [m for m in unapplied_migrations() if m.startswith("everystep.")]
        except DATABASE_ERRORS:
            pending = ["(the migration history could not be read)"]
        if not pending:
            return False
        self.backoff = min(max(self.backoff * 2, self.poll, 0.2), MAX_BACKOFF)
        logger.debug(
            "everystep's tables are still missing or being migrated (pending: %s); "
            "retrying in %.1fs",
            ", ".join(pending),
            self.backoff,
            extra={"event": "worker.tables_missing", "runner": self.runner},
        )
        connections.close_all()
        return True

    def up(self) -> None:
        """An attempt succeeded."""
        if self._tables_missing:
            logger.info(
                "everystep's tables are there now",
                extra={"event": "worker.tables_found", "runner": self.runner},
            )
        elif self.backoff:
            logger.info(
                "database reachable again",
                extra={"event": "worker.database_back", "runner": self.runner},
            )
        self.backoff = 0.0
        self._tables_missing = False
        self._busy = False
