"""Issue 22: upgrading a populated database never stops the fleet. ``manage.py migrate``
takes a database at 0004 holding a few hundred thousand runs to the newest schema while
the previous release's fleet keeps scheduling runs and recording steps (raw SQL on the
0004 columns, ``tests/upgrade_load.py``: a worker of this release needs the newest
columns, so during a rolling upgrade it is the old fleet that writes); then a worker of
this release runs what the old fleet scheduled. The database is a scratch one made by the
test, dropped after; the longest write wait is printed (``-s``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.acceptance.conftest import wait_until
from tests.upgrade_load import (
    SCHEDULED_WORKFLOW,
    Monitor,
    Writers,
    committed_during,
    connect,
    populate,
    summary,
)
from tests.workers import ROOT, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

# Enough that a plain CREATE INDEX blocks writes for a noticeable time (~0.3 s per index
# on PostgreSQL here), little enough for a test that takes well under a minute.
RUNS = 300_000

SETTINGS = """\
import os

from tests.settings import *  # noqa: F403

# One database, the scratch one, also in the suite's several-databases mode
# (EVERYSTEP_TEST_ALIAS): what is measured is the migration, not the routing.
DATABASE_ROUTERS = []
EVERYSTEP_DATABASE = "default"
# "direct": PostgreSQL itself when the suite runs through PgBouncer (tests/settings.py).
for _alias in ("default", "direct"):
    if _alias in DATABASES:  # noqa: F405
        DATABASES[_alias]["NAME"] = os.environ["EVERYSTEP_TEST_SCRATCH_DB"]  # noqa: F405
"""

# Every index the migrations after 0004 build on the runs table.
BUILT = {
    "everystep_wf_due",
    "everystep_wf_key",
    "everystep_wf_name_status_id",
    "everystep_wf_claimed_name",
    "everystep_wf_status_holder",
    "everystep_wf_completed",
    "everystep_workflow_parent_id_009dc798",
    "everystep_workflow_forked_from_id_a6d5cf2f",
}


@dataclass(frozen=True)
class Scratch:
    """A database of the test's own, and the environment of a ``manage.py`` using it."""

    vendor: str
    name: str
    env: dict[str, str]
    path: str

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr[-3000:]}"
        return done.stdout

    def connect(self) -> Any:
        if self.vendor == "sqlite":
            import sqlite3

            return sqlite3.connect(self.name, isolation_level=None)
        # Straight to the server, never through a pooler: the monitor matches the writers'
        # server process ids against pg_locks.
        server = settings.DATABASES.get("direct", settings.DATABASES["default"])
        return connect(self.vendor, server, self.name)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Scratch]:
    vendor = connection.vendor
    name = f"everystep_upgrade_{uuid.uuid4().hex[:10]}"
    if vendor == "sqlite":
        name = str(tmp_path / f"{name}.sqlite3")
    else:
        charset = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if vendor == "mysql" else ""
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}{charset}")
    (tmp_path / "scratch_settings.py").write_text(SETTINGS)
    env = worker_env(str(tmp_path))
    env.update({"DJANGO_SETTINGS_MODULE": "scratch_settings", "EVERYSTEP_TEST_SCRATCH_DB": name})
    try:
        yield Scratch(vendor, name, env, str(tmp_path))
    finally:
        if vendor != "sqlite":
            force = " WITH (FORCE)" if vendor == "postgresql" else ""
            with connection.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {name}{force}")


def _at_0004(scratch: Scratch) -> None:
    # Every app at its newest, then everystep back to 0004: reversing runs too.
    scratch.manage("migrate", "--verbosity", "0")
    scratch.manage("migrate", "everystep", "0004_recoveries", "--verbosity", "0")


@pytest.mark.backends("postgres", "mariadb")
def test_migrating_a_populated_database_never_blocks_the_fleets_writes(
    scratch: Scratch, workers: Any
):
    """While migrate builds each index, the old fleet's writes commit; none waits for a
    lock during a build (PostgreSQL), none waits long (PostgreSQL: a second; MariaDB: its
    metadata-lock moments, under 5 s); the runs it scheduled are then run by a worker of
    this release."""
    _at_0004(scratch)
    conn = scratch.connect()
    populate(conn, scratch.vendor, RUNS)
    writers = Writers(scratch.vendor, scratch.connect)
    writers.start()
    monitor = Monitor(scratch.vendor, scratch.connect(), writers.pids)
    monitor.start()
    time.sleep(0.3)
    started = time.monotonic()
    scratch.manage("migrate", "everystep", "--verbosity", "0")
    migrate_seconds = time.monotonic() - started
    time.sleep(0.3)
    writers.stop()
    monitor.stop()

    figures = summary(writers.writes, monitor, migrate_seconds)
    print(f"\nonline upgrade ({scratch.vendor}, {RUNS} runs): {json.dumps(figures)}")
    print("builds seen:", sorted(monitor.builds))
    print("lock waits (at, pid, lock, during a build on a written table):", monitor.waits)
    assert [w.error for w in writers.writes if w.error] == []
    if scratch.vendor == "postgresql":
        # "command table index": every build on the runs table is concurrent (new, empty
        # tables get their indexes with them).
        runs_table = [w.rsplit(" ", 2) for w in monitor.builds if " everystep_workflow " in w]
        assert {command for command, _, _ in runs_table} == {"CREATE INDEX CONCURRENTLY"}
        assert {index for *_, index in runs_table} >= BUILT, monitor.builds
    long_builds = [b for b in monitor.builds.values() if b.last - b.first >= 0.1]
    assert long_builds, monitor.builds
    for build in long_builds:
        assert committed_during(writers.writes, build), build
    if scratch.vendor == "postgresql":
        # No writer waits for a lock while an index is built on its table.
        assert [wait for wait in monitor.waits if wait[-1]] == []
    # MariaDB's online DDL takes an exclusive metadata lock for a moment at its start and
    # end: writers wait that moment (the monitor sees them), never the build (a build that
    # blocks writes fails above: the monitor sees a copying ALTER as a build). How long the
    # moment lasts is the machine's more than the migration's: here 0.05-0.12 s on a quiet
    # machine, 0.31 s beside two CPU burners, 1.01 s in a loaded CI run (its monitor's
    # 10 ms poll took 0.4 s a round).
    longest = 1.0 if scratch.vendor == "postgresql" else 5.0
    assert figures["longest_write_seconds"] < longest, figures

    pending = (
        "SELECT COUNT(*) FROM everystep_workflow"
        f" WHERE name = '{SCHEDULED_WORKFLOW}' AND status <> 'completed'"
    )

    def all_run() -> bool:
        with conn.cursor() as cursor:
            cursor.execute(pending)
            return cursor.fetchone()[0] == 0

    workers(
        "upgraded",
        "--pool",
        "8",
        "--poll",
        "0.05",
        extra_path=scratch.path,
        env={k: scratch.env[k] for k in ("DJANGO_SETTINGS_MODULE", "EVERYSTEP_TEST_SCRATCH_DB")},
    )
    wait_until(all_run, 120, f"the {len(writers.scheduled)} runs the old fleet scheduled")
    conn.close()


def _plant(scratch: Scratch, cursor: Any) -> None:
    """What an interrupted 0007 leaves: PostgreSQL an INVALID index of that name (a
    concurrent build that failed), the others the index built but 0007 not recorded."""
    if scratch.vendor == "postgresql":
        cursor.execute(
            "INSERT INTO everystep_workflow (id, name, args, status, created_at, updated_at,"
            " recoveries) SELECT gen_random_uuid(), 'x', '[]', 'scheduled', now(), now(), 0"
            " FROM generate_series(1, 2)"
        )
        with pytest.raises(Exception, match="could not create unique index"):
            cursor.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY everystep_wf_name_status_id"
                " ON everystep_workflow (status)"
            )
    else:
        cursor.execute(
            "CREATE INDEX everystep_wf_name_status_id ON everystep_workflow (name, status, id)"
        )


def _index(scratch: Scratch, cursor: Any, name: str) -> tuple[bool, str]:
    """(valid, the columns) of the index ``name``."""
    if scratch.vendor == "postgresql":
        cursor.execute(
            "SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index"
            " WHERE indexrelid = to_regclass(%s)",
            [name],
        )
        valid, definition = cursor.fetchone()
        return valid, definition.split(" (", 1)[1].rstrip(")")
    if scratch.vendor == "mysql":
        cursor.execute(
            "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ', ') FROM"
            " information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()"
            " AND INDEX_NAME = %s",
            [name],
        )
        return True, cursor.fetchone()[0]
    cursor.execute(f"SELECT name FROM pragma_index_info('{name}') ORDER BY seqno")
    return True, ", ".join(row[0] for row in cursor.fetchall())


def test_an_interrupted_index_migration_runs_again_to_the_end(scratch: Scratch):
    """A re-run of a migration interrupted during an index build succeeds, and the index
    is the model's, valid; reversing and re-applying the online migrations works too."""
    scratch.manage("migrate", "--verbosity", "0")
    scratch.manage("migrate", "everystep", "0006_ui_search", "--verbosity", "0")
    conn = scratch.connect()
    cursor = conn.cursor()
    _plant(scratch, cursor)
    scratch.manage("migrate", "everystep", "--verbosity", "0")
    assert _index(scratch, cursor, "everystep_wf_name_status_id") == (True, "name, status, id")
    scratch.manage("migrate", "everystep", "0004_recoveries", "--verbosity", "0")
    scratch.manage("migrate", "everystep", "--verbosity", "0")
    for name in ("everystep_wf_due", "everystep_wf_status_holder"):
        assert _index(scratch, cursor, name)[0] is True
    cursor.close()
    conn.close()
