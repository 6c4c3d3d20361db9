"""The worker's database connections between runs.

A worker is a long-running process, not a request: each pool thread keeps its
connection from one run to the next whatever the project's ``CONN_MAX_AGE`` (whose
default, 0, would open a new connection for every run). A connection is still replaced
when it is broken: after an error, one that no longer answers is closed, and the next
query opens a new one.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

from everystep.store import database


def keep_connections() -> None:
    """Between two runs on this thread: keep healthy connections, close broken ones."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            # A step body left a transaction open: start the next run clean.
            conn.close()
        elif conn.errors_occurred:
            # Checked only after an error (a database restart, say), so a healthy
            # connection costs no round trip between runs.
            database.mend_after_error(conn)


def close_thread_connections(executor: ThreadPoolExecutor) -> None:
    """Make every thread ``executor`` started close its connections (before a shutdown
    that waits for them)."""
    # Connections are per thread: one job per started thread, held at a barrier until
    # all have started, so that no thread takes two and every thread closes its own.
    # Only the threads the pool started: submitting more would start them to no end.
    size = len(getattr(executor, "_threads", ()))
    if not size:
        return
    barrier = threading.Barrier(size)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=10)
        connections.close_all()

    for _ in range(size):
        executor.submit(close)
