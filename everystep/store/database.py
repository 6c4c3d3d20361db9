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
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from everystep import conf

# This thread's connection wrapper for everystep's alias, once looked up: (alias, wrapper).
_kept = threading.local()


def connection() -> BaseDatabaseWrapper:
    """This thread's connection to everystep's alias.

    Kept per thread: Django's lookup goes through asgiref's ``Local``, which at ten
    lookups per run was about 6 % of a worker's client instructions. A thread's wrapper
    for an alias stays the same object (closing and reconnecting happen inside it);
    Django puts another in its place only in a test server's request thread, before that
    thread's first query.
    """
    alias = conf.database()
    kept = getattr(_kept, "pair", None)
    if kept is not None and kept[0] == alias:
        return kept[1]
    conn = connections[alias]
    _kept.pair = (alias, conn)
    return conn


def atomic(*, savepoint: bool = True, durable: bool = False) -> transaction.Atomic:
    """``transaction.atomic`` on everystep's alias."""
    return transaction.atomic(using=conf.database(), savepoint=savepoint, durable=durable)


def set_rollback() -> None:
    """Mark the innermost ``atomic()`` on everystep's alias for rollback."""
    transaction.set_rollback(True, using=conf.database())


# The raw connection whose lock waits this thread last shortened.
_shortened = threading.local()


def keep_lock_waits_short(seconds: int) -> None:
    """This thread's connection waits at most ``seconds`` for a lock, for as long as the
    connection lasts: SQLite's write lock (a new connection starts with the project's
    ``timeout``) and MariaDB/MySQL's row locks (``innodb_lock_wait_timeout``, 50 s by
    default). For the worker's own threads: a statement waiting for a lock held by a step's
    transaction (an atomic step holds its run's row, on SQLite the whole database, for the
    step) or by a frozen process kept the worker from handling SIGTERM, since Python runs
    a signal handler only once the statement returns. A wait given up fails the statement
    (``is_lock_busy``), and the loop tries again. Not on PostgreSQL: a session setting
    would outlive the transaction on a pooled server connection."""
    conn = connection()
    if conn.vendor not in ("sqlite", "mysql"):
        return
    conn.ensure_connection()
    if getattr(_shortened, "raw", None) is conn.connection:
        return
    with conn.cursor() as cursor:
        _set_lock_wait(cursor, conn.vendor, seconds)
    # Kept referenced, so a later connection cannot reuse its identity.
    _shortened.raw = conn.connection


def is_lock_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says a lock stayed held for longer than the statement would wait:
    SQLite's ``database is locked``, MariaDB/MySQL's error 1205, PostgreSQL's
    ``lock_timeout`` (SQLSTATE 55P03). Nothing was written."""
    if not isinstance(exc, OperationalError):
        return False
    return (
        exc.args[:1] == (1205,)
        or getattr(exc.__cause__, "sqlstate", None) == "55P03"
        or "database is locked" in str(exc)
    )


@contextmanager
def lock_waits_at_most(seconds: int) -> Iterator[None]:
    """Statements on everystep's connection inside the block wait at most ``seconds`` for
    a lock, then fail with a database error. For the worker's shutdown: a run whose
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
        return
    with conn.cursor() as cursor:
        cursor.execute(
            "PRAGMA busy_timeout"
            if conn.vendor == "sqlite"
            else "SELECT @@SESSION.innodb_lock_wait_timeout"
        )
        before = int(cursor.fetchone()[0]) / (1000 if conn.vendor == "sqlite" else 1)
    if before <= seconds:  # already as short: the worker's threads (keep_lock_waits_short)
        yield
        return
    with conn.cursor() as cursor:
        _set_lock_wait(cursor, conn.vendor, seconds)
    try:
        yield
    finally:
        with contextlib.suppress(DatabaseError, InterfaceError), conn.cursor() as cursor:
            _set_lock_wait(cursor, conn.vendor, before)


def _set_lock_wait(cursor: Any, vendor: str, seconds: float) -> None:
    if vendor == "sqlite":
        cursor.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    else:  # MariaDB / MySQL: whole seconds
        cursor.execute("SET SESSION innodb_lock_wait_timeout = %s", [max(int(seconds), 1)])


def retire() -> None:
    """Close this thread's connection to everystep's alias now, or, inside a transaction,
    once the transaction is over (``take_retired``): it answers, but from a server that can no
    longer take writes (``guard.is_read_only``), so the next attempt must connect again,
    perhaps to the new primary behind the same address."""
    conn = connection()
    if conn.in_atomic_block:
        conn.everystep_retired = True  # type: ignore[attr-defined]
    else:
        conn.close()


def take_retired(conn: BaseDatabaseWrapper) -> bool:
    """Whether ``retire`` marked ``conn`` to be closed once out of its transaction (the
    mark is cleared: the caller closes it)."""
    if not getattr(conn, "everystep_retired", False):
        return False
    conn.everystep_retired = False  # type: ignore[attr-defined]
    return True


def close_broken() -> None:
    """Close this thread's connections that an error left unusable, so that its next
    query opens a new one. Django does that at a request's boundaries only; a thread
    that is no request's (asgiref's one thread for sync code, which Django's async ORM
    uses in a worker's async steps) would otherwise fail every query after a database
    restart."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred and not conn.in_atomic_block:
            mend_after_error(conn)


def mend_after_error(conn: BaseDatabaseWrapper) -> None:
    """``conn`` saw an error outside a transaction: close it if it was retired or no
    longer answers, else clear the error and keep it."""
    if take_retired(conn) or not conn.is_usable():
        conn.close()
    else:
        conn.errors_occurred = False


def close_idle() -> None:
    """Close this thread's connections that hold no transaction (closing one that does
    would lose its work: it stays); the next ORM call opens one again."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.autocommit and not conn.in_atomic_block:
            conn.close()
