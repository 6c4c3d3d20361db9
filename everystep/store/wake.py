"""Waking idle workers: PostgreSQL NOTIFY when a run becomes due, LISTEN in workers.

Scheduling and requeueing ``NOTIFY`` (delivered at commit, so a rolled-back schedule wakes
nobody) and idle workers ``LISTEN`` on a connection of their own; elsewhere workers poll,
and polling stays the correctness path everywhere.

A transaction-mode pooler (PgBouncer) hands each transaction whichever server connection
is free, so a LISTEN made through it is left behind on a connection the listener no longer
has. NOTIFY is fine (it is part of the scheduling transaction); LISTEN goes over the alias
``EVERYSTEP_LISTEN_DATABASE`` names, which connects directly. The worker's listener checks
that notifications reach it (a probe of its own) and polls, having said so, if not.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any

from django.db import connections

from everystep import conf
from everystep.store import database, prepared

CHANNEL = "everystep_due"
# Where a run that someone awaits announces its end (``everystep.store.run_waits``).
ENDED_CHANNEL = "everystep_ended"
# Where runs' published values announce a change (``everystep.engine.operations.progress``), batched
# per process; watchers listen.
PUBLISHED_CHANNEL = "everystep_published"
# How long the listener waits for its own probe before deciding LISTEN does not work.
PROBE_TIMEOUT = 5.0
logger = logging.getLogger("everystep.worker")


def _notify(channel: str) -> None:
    conn = database.connection()
    if conn.vendor == "postgresql" and conf.notify():
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [channel])


def notify_due() -> None:
    """Tell listening workers that a run became due (PostgreSQL, when enabled)."""
    _notify(CHANNEL)


def notify_ended() -> None:
    """Tell blocking ``result()`` callers that an awaited run ended (PostgreSQL)."""
    _notify(ENDED_CHANNEL)


def notify_published() -> None:
    """Tell watchers that runs published values (PostgreSQL)."""
    _notify(PUBLISHED_CHANNEL)


def can_listen() -> bool:
    """Whether everystep's database sends NOTIFY and a PostgreSQL alias can LISTEN."""
    listen = conf.listen_database()
    return (
        database.connection().vendor == "postgresql"
        and listen is not None
        and connections[listen].vendor == "postgresql"
    )


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


def _params(alias: str) -> dict[str, Any]:
    """Alias ``alias``'s connection parameters, for a psycopg connection of our own."""
    params: dict[str, Any] = connections[alias].get_connection_params()
    return {k: v for k, v in params.items() if k not in _DJANGO_ONLY}


def _listen_params() -> dict[str, Any]:
    listen = conf.listen_database()
    assert listen is not None, "can_listen() is checked first"
    return _params(listen)


class EndedListener:
    """For a blocking ``result()``: LISTEN for awaited runs' ends on a connection of its
    own (PostgreSQL, when enabled), and on ``also``'s channels too (a watcher's
    ``PUBLISHED_CHANNEL``). ``wait`` returns at a notification or after its pause;
    without a LISTEN (another database, or it failed) it only pauses."""

    def __init__(self, *also: str) -> None:
        self.conn: Any = None
        self.channels = [ENDED_CHANNEL, *also]

    @property
    def listening(self) -> bool:
        return self.conn is not None

    def __enter__(self) -> EndedListener:
        if can_listen() and conf.notify():
            import psycopg

            try:
                self.conn = psycopg.connect(**_listen_params(), autocommit=True)
                for channel in self.channels:
                    self.conn.execute(f"LISTEN {channel}")
            except psycopg.Error:
                self.__exit__()  # polling it is
        return self

    def also(self, channel: str) -> None:
        """LISTEN on ``channel`` too, from now on (a no-op while polling)."""
        if channel in self.channels:
            return
        self.channels.append(channel)
        if self.conn is not None:
            import psycopg

            try:
                self.conn.execute(f"LISTEN {channel}")
            except psycopg.Error:
                self.__exit__()

    def wait(self, seconds: float) -> bool:
        """Whether a notification came within ``seconds``."""
        if self.conn is None:
            time.sleep(seconds)
            return False
        import psycopg

        try:
            return any(True for _ in self.conn.notifies(timeout=seconds, stop_after=1))
        except psycopg.Error:
            self.__exit__()
            return False

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
        self.alias = conf.listen_database()
        self.params = _listen_params()
        self.notify_params = _params(conf.database())

    def run(self) -> None:
        import psycopg

        backoff = 0.5
        lost = False
        while not self.stop_event.is_set():
            try:
                with psycopg.connect(**self.params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if not self._probe(conn):
                        return
                    prepared.confirm_session(self.alias)
                    backoff = 0.5
                    self.listening.set()
                    if lost:
                        lost = False
                        logger.info("LISTEN connection back", extra={"event": "worker.listen_back"})
                    # A notification may have been missed while (re)connecting.
                    self.wake.set()
                    while not self.stop_event.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake.set()
            except psycopg.Error as exc:
                self.listening.clear()
                lost = True
                logger.warning(
                    "LISTEN connection lost (%s); polling until it is back",
                    exc,
                    extra={"event": "worker.listen_lost"},
                )
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _probe(self, conn: Any) -> bool:
        """Whether a NOTIFY sent the way scheduling sends it reaches this LISTEN. Through
        a transaction-mode pooler it does not: say so once, and leave waking to the poll."""
        import psycopg

        token = secrets.token_hex(8)
        with psycopg.connect(**self.notify_params, autocommit=True) as sender:
            sender.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])
        deadline = time.monotonic() + PROBE_TIMEOUT
        while (left := deadline - time.monotonic()) > 0 and not self.stop_event.is_set():
            for note in conn.notifies(timeout=min(left, 0.5)):
                if note.payload == token:
                    return True
                self.wake.set()
        if not self.stop_event.is_set():
            logger.warning(
                "notifications do not reach this worker's LISTEN on database alias %r "
                "(a transaction-mode pooler such as PgBouncer cannot hold one): set "
                "EVERYSTEP_LISTEN_DATABASE to an alias that connects to PostgreSQL "
                "directly; until then idle workers find new runs by polling",
                self.alias,
                extra={"event": "worker.listen_unavailable"},
            )
        return False
