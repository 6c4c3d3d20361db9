"""Waking idle workers: PostgreSQL NOTIFY when a run becomes due, LISTEN in workers.

Scheduling and requeueing ``NOTIFY`` (delivered at commit, so a rolled-back schedule wakes
nobody) and idle workers ``LISTEN`` on a connection of their own; elsewhere workers poll,
and polling stays the correctness path everywhere.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connection

from everystep import conf

CHANNEL = "everystep_due"
logger = logging.getLogger("everystep.worker")


def notify_due() -> None:
    """Tell listening workers that a run became due (PostgreSQL, when enabled)."""
    if connection.vendor == "postgresql" and conf.notify():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


def can_listen() -> bool:
    return connection.vendor == "postgresql"


# Connection parameters Django adds for its own cursors that libpq does not know.
_DJANGO_ONLY = {
    "context",
    "cursor_factory",
    "prepare_threshold",
    "server_side_binding",
    "pool",
    "isolation_level",
    "assume_role",
}


class Listener(threading.Thread):
    """LISTEN on a dedicated PostgreSQL connection and set ``wake`` on every
    notification, until ``stop`` is set. ``listening`` is set while the LISTEN holds.
    Reconnects with backoff if the database goes away; the claim loop keeps polling
    meanwhile."""

    def __init__(self, wake: threading.Event, stop: threading.Event) -> None:
        super().__init__(name="everystep-listener", daemon=True)
        self.wake = wake
        self.stop_event = stop
        self.listening = threading.Event()
        params: dict[str, Any] = connection.get_connection_params()
        self.params = {k: v for k, v in params.items() if k not in _DJANGO_ONLY}

    def run(self) -> None:
        import psycopg

        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with psycopg.connect(**self.params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    backoff = 0.5
                    self.listening.set()
                    # A notification may have been missed while (re)connecting.
                    self.wake.set()
                    while not self.stop_event.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake.set()
            except psycopg.Error as exc:
                self.listening.clear()
                logger.warning(
                    "LISTEN connection lost (%s); polling until it is back",
                    exc,
                    extra={"event": "worker.listen_lost"},
                )
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
