"""everystep's database (``EVERYSTEP_DATABASE``): its connection and its transactions.

Every raw statement and transaction of everystep goes through these, and every ORM query
through the models' managers (``everystep.models.OwnDatabaseManager``), so a project's
router never sends one elsewhere.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from everystep import conf


def connection() -> BaseDatabaseWrapper:
    """This thread's connection to everystep's alias."""
    return connections[conf.database()]


def atomic(*, savepoint: bool = True, durable: bool = False) -> transaction.Atomic:
    """``transaction.atomic`` on everystep's alias."""
    return transaction.atomic(using=conf.database(), savepoint=savepoint, durable=durable)


def set_rollback() -> None:
    """Mark the innermost ``atomic()`` on everystep's alias for rollback."""
    transaction.set_rollback(True, using=conf.database())


# The raw SQLite connection whose write-lock wait this thread last shortened.
_shortened = threading.local()


def keep_write_lock_waits_short(seconds: float) -> None:
    """SQLite: this thread's connection waits at most ``seconds`` for the database's write
    lock, for as long as the connection lasts (a new one starts with the project's
    ``timeout``). For the worker's own threads: a step's transaction holds that lock (an
    atomic step, for the whole step), and a claim waiting out a 30 s timeout keeps the
    worker from handling SIGTERM, since Python runs signal handlers only once the waiting
    statement returns. A wait given up fails the statement (``is_write_lock_busy``), and
    the loop tries again. Nothing to do elsewhere: claims skip locked rows there."""
    conn = connection()
    if conn.vendor != "sqlite":
        return
    conn.ensure_connection()
    if getattr(_shortened, "raw", None) is conn.connection:
        return
    with conn.cursor() as cursor:
        cursor.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    # Kept referenced, so a later connection cannot reuse its identity.
    _shortened.raw = conn.connection


def is_write_lock_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's ``database is locked``: another connection held the
    write lock for longer than this one would wait. Nothing was written."""
    return isinstance(exc, OperationalError) and "database is locked" in str(exc)


@contextmanager
def lock_waits_at_most(seconds: int) -> Iterator[None]:
    """Statements on everystep's connection inside the block wait at most ``seconds`` for
    a row lock, then fail with a database error. For the worker's shutdown: a run whose
    atomic step is still executing is locked by that step's transaction, and waiting for
    it would overrun the drain deadline by the rest of the step (PostgreSQL), by
    ``innodb_lock_wait_timeout``, 50 s by default (MariaDB), or by the connection's
    ``timeout`` for SQLite's write lock (30 s in the recommended settings)."""
    conn = connection()
    if conn.vendor == "postgresql":
        # Local to a transaction, so nothing outlives it on a pooled server connection.
        with atomic(), conn.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{seconds}s"])
            yield
    elif conn.vendor == "mysql":
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = %s", [seconds])
        try:
            yield
        finally:
            with contextlib.suppress(DatabaseError, InterfaceError), conn.cursor() as cursor:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    else:  # SQLite: the wait for the write lock, for this connection
        with conn.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            before = int(cursor.fetchone()[0])
            cursor.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
        try:
            yield
        finally:
            with contextlib.suppress(DatabaseError, InterfaceError), conn.cursor() as cursor:
                cursor.execute(f"PRAGMA busy_timeout = {before}")
