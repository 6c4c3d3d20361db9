"""The worker's database connections between runs.

A worker is a long-running process, not a request: each pool thread keeps its
connection from one run to the next whatever the project's ``CONN_MAX_AGE`` (whose
default, 0, would open a new connection for every run). A connection is still replaced
when it is broken: after an error, one that no longer answers is closed, and the next
query opens a new one.
"""

from __future__ import annotations

from django.db import connections


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
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
