"""Waking idle workers: PostgreSQL NOTIFY when a run becomes due, LISTEN in workers.

Scheduling and requeueing ``NOTIFY`` (delivered at commit, so a rolled-back schedule wakes
nobody) and idle workers ``LISTEN`` on a connection of their own; elsewhere workers poll,
and polling stays the correctness path everywhere.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import connection

from everystep import conf

CHANNEL = "everystep_due"
# Where a run that someone awaits announces its end (``everystep.store.awaits``).
ENDED_CHANNEL = "everystep_ended"
logger = logging.getLogger("everystep.worker")


def notify_due() -> None:
    """Tell listening workers that a run became due (PostgreSQL, when enabled)."""
    if connection.vendor == "postgresql" and conf.notify():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


def notify_ended() -> None:
    """Tell blocking ``result()`` callers that an awaited run ended (PostgreSQL)."""
    if connection.vendor == "postgresql" and conf.notify():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [ENDED_CHANNEL])


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


def _listen_params() -> dict[str, Any]:
    """The default connection's parameters, for a connection of our own to LISTEN on."""
    params: dict[str, Any] = connection.get_connection_params()
    return {k: v for k, v in params.items() if k not in _DJANGO_ONLY}


class EndedListener:
    """For a blocking ``result()``: LISTEN for awaited runs' ends on a connection of its
    own (PostgreSQL, when enabled). ``wait`` returns at a notification or after its
    pause; without a LISTEN (another database, or it failed) it only pauses."""

    def __init__(self) -> None:
        self.conn: Any = None

    @property
    def listening(self) -> bool:
        return self.conn is not None

    def __enter__(self) -> EndedListener:
        if can_listen() and conf.notify():
            import psycopg

            try:
                self.conn = psycopg.connect(**_listen_params(), autocommit=True)
                self.conn.execute(f"LISTEN {ENDED_CHANNEL}")
            except psycopg.Error:
                self.__exit__()  # polling it is
        return self

    def wait(self, seconds: float) -> None:
        if self.conn is None:
            time.sleep(seconds)
            return
        import psycopg

        try:
            for _ in self.conn.notifies(timeout=seconds, stop_after=1):
                pass
        except psycopg.Error:
            self.__exit__()

    def __exit__(self, *_: object) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


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
        self.params = _listen_params()

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
