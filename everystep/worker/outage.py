"""How the worker waits for its database: the backoff between attempts, and what it logs
while the database is unreachable or lacks everystep's tables."""

from __future__ import annotations

import logging

from django.db import connections

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

    def down(self, exc: BaseException | None) -> None:
        """An attempt failed with ``exc``: back off, say why (missing tables only once:
        they stay missing until someone runs migrate, which the worker then notices)."""
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
