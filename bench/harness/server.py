"""A shared database server: other sessions on the machine may restart it in the middle
of a phase. The phase is then measured again (``attempts``), up to ``ATTEMPTS`` times;
a long job retries each statement (``retrying``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

ATTEMPTS = 3


class ServerRestarted(Exception):
    """The database server's start time changed while a phase was measured."""


def server_started() -> float | None:
    """When the database server started (seconds since the epoch); None for SQLite."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT extract(epoch FROM pg_postmaster_start_time())")
            return float(cursor.fetchone()[0])
        if connection.vendor == "mysql":
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
            return round(time.time() - int(cursor.fetchone()[1]), -1)  # to within 10 s
    return None


def reconnect(timeout: float = 180.0, then: Callable[[], None] = lambda: None) -> None:
    """Wait until this process's connection works again, then call ``then``."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + timeout
    while True:
        connection.close()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            then()
            return
        except DatabaseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def attempts(
    label: str,
    measure: Callable[[], dict[str, Any]],
    cleanup: Callable[[], None],
    after_reconnect: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """``measure()``, again (after ``cleanup()``) if the server restarted meanwhile or
    the phase failed on a database error; the result records its attempt number."""
    from django.db import DatabaseError

    for attempt in range(1, ATTEMPTS + 1):
        try:
            started = server_started()
            result = measure()
            if server_started() != started:
                raise ServerRestarted("the database server restarted during the phase")
            result["attempt"] = attempt
            return result
        except (DatabaseError, ServerRestarted, RuntimeError, TimeoutError) as exc:
            if attempt == ATTEMPTS:
                raise
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            print(f"  {label}: {first_line}; measuring it again", flush=True)
            cleanup()
            reconnect(then=after_reconnect)
    raise AssertionError("unreachable")


def retrying(action: Callable[[], Any], attempts: int = 20) -> Any:
    """``action()``, again after a dropped connection (for long jobs, such as filling a
    database, that resume rather than measure again)."""
    from django.db import DatabaseError, InterfaceError, connection

    for attempt in range(attempts):
        try:
            return action()
        except (DatabaseError, InterfaceError) as exc:
            if attempt == attempts - 1:
                raise
            print(f"  database error ({exc.__class__.__name__}: {exc}); retrying", flush=True)
            connection.close()
            time.sleep(3)
    return None
