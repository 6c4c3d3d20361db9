"""``everystep_bench.settings`` with the workers reaching PostgreSQL through PgBouncer in
transaction mode (``.ci/pgbouncer start``; port ``EVERYSTEP_TEST_PGBOUNCER_PORT``, 6432),
as a fleet of runners behind a pooler would (``bench/scaling.py --pgbouncer``).

Only the worker subprocesses (``EVERYSTEP_TEST_SUBPROCESS``) go through the pooler: the
benchmark process creates the database, schedules the runs and reads the counters
directly. A pooled connection cannot hold a LISTEN, so the worker listens over the
direct alias ``listen`` (``EVERYSTEP_LISTEN_DATABASE``); server-side cursors do not
survive a transaction-mode pooler either.
"""

from __future__ import annotations

import os

from everystep_bench.settings import *  # noqa: F403
from everystep_bench.settings import DATABASES

if os.environ.get("EVERYSTEP_TEST_SUBPROCESS"):
    DATABASES["listen"] = dict(DATABASES["default"])
    DATABASES["default"].update(
        PORT=os.environ.get("EVERYSTEP_TEST_PGBOUNCER_PORT", "6432"),
        DISABLE_SERVER_SIDE_CURSORS=True,
    )
    EVERYSTEP_LISTEN_DATABASE = "listen"
