"""What a fleet of workers costs the database besides CPU: lock and pool waits while runs
execute, and the statements an idle fleet sends (``scaling.py``).

- **Waits, PostgreSQL**: a thread samples ``pg_stat_activity`` every ``INTERVAL`` seconds
  for backends of the benchmark database waiting on a lock (``wait_event_type =
  'Lock'``); waiters x interval, summed, estimates the backend time spent waiting (a
  wait shorter than the interval is mostly missed: a lower bound). Through PgBouncer it
  also samples ``SHOW POOLS``: clients waiting for a server connection (``cl_waiting``)
  and the longest wait (``maxwait``).
- **Waits, MariaDB**: the deltas of ``Innodb_row_lock_waits`` and ``Innodb_row_lock_time``
  (ms), exact but server-wide: anything else using the server is counted too.
- **Idle statements**: PostgreSQL ``xact_commit + xact_rollback`` of the benchmark
  database (the worker runs in autocommit: one transaction per statement; the statistics
  reach the view within a second or so, so the window is long and steady); MariaDB the
  server-wide ``Questions`` and ``Com_select`` deltas (``performance_schema`` is off on
  the machines these ran on).

``SKIP LOCKED`` claims never wait on each other, so these are waits on anything: the
step's share lock on its run row against a claim's or a finish's update, and the like.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from harness.cpu import process_cpu_seconds
from harness.workers import Workers

INTERVAL = 0.05
MARIADB_WAITS = ("Innodb_row_lock_waits", "Innodb_row_lock_time")
MARIADB_IDLE = ("Questions", "Com_select")


def _pg_connect(port: int | None = None, dbname: str | None = None) -> Any:
    import psycopg
    from django.db import connection

    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"],
        port=port or int(settings["PORT"]),
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname=dbname or settings["NAME"],
        autocommit=True,
        # PgBouncer's admin console speaks the simple query protocol only: no statement
        # may become a prepared one.
        prepare_threshold=None,
    )


def mariadb_status(names: tuple[str, ...]) -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS WHERE Variable_name IN %s", [names])
        return {name: int(value) for name, value in cursor.fetchall()}


def pgbouncer_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "pgbouncer":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def pgbouncer_config(port: int) -> dict[str, str]:
    """PgBouncer's version and pool size, from its admin console."""
    with _pg_connect(port, "pgbouncer") as admin:
        version = admin.execute("SHOW VERSION").fetchone()[0]
        config = {row[0]: row[1] for row in admin.execute("SHOW CONFIG").fetchall()}
    return {
        "version": version,
        "pool_mode": config["pool_mode"],
        "pool_size": config["default_pool_size"],
    }


class WaitSampler:
    """Waits while a phase runs: ``with WaitSampler(db, pgbouncer_port) as waits: …``,
    then ``waits.result``."""

    def __init__(self, db: str, pgbouncer_port: int | None) -> None:
        self.db = db
        self.pgbouncer_port = pgbouncer_port
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="wait-sampler", daemon=True)
        self.samples = self.lock_waiters = self.max_lock_waiters = 0
        self.pool_waiters = self.max_pool_waiters = self.max_pool_wait_us = 0
        self.result: dict[str, Any] = {}
        self.error = ""

    def __enter__(self) -> WaitSampler:
        self.began = time.monotonic()
        self.pgbouncer_cpu = sum(map(process_cpu_seconds, pgbouncer_pids()))
        if self.db == "mariadb":
            self.status = mariadb_status(MARIADB_WAITS)
        elif self.db == "postgres":
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        result: dict[str, Any] = {"wall_s": round(time.monotonic() - self.began, 2)}
        if self.error:
            result["sampler_error"] = self.error
        if self.db == "mariadb":
            now = mariadb_status(MARIADB_WAITS)
            result["row_lock_waits"] = now[MARIADB_WAITS[0]] - self.status[MARIADB_WAITS[0]]
            result["row_lock_ms"] = now[MARIADB_WAITS[1]] - self.status[MARIADB_WAITS[1]]
        elif self.db == "postgres":
            result.update(
                samples=self.samples,
                lock_wait_s=round(self.lock_waiters * INTERVAL, 3),
                max_lock_waiters=self.max_lock_waiters,
            )
        if self.pgbouncer_port:
            result.update(
                pool_wait_s=round(self.pool_waiters * INTERVAL, 3),
                max_pool_waiters=self.max_pool_waiters,
                max_pool_wait_ms=round(self.max_pool_wait_us / 1000, 1),
                pgbouncer_cpu_s=round(
                    sum(map(process_cpu_seconds, pgbouncer_pids())) - self.pgbouncer_cpu, 3
                ),
            )
        self.result = result

    def _sample(self) -> None:
        database = _pg_connect()
        admin = _pg_connect(self.pgbouncer_port, "pgbouncer") if self.pgbouncer_port else None
        name = database.info.dbname
        try:
            self._loop(database, admin, name)
        except Exception as exc:  # the server restarted under it: the phase is retried
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            database.close()
            if admin is not None:
                admin.close()

    def _loop(self, database: Any, admin: Any, name: str) -> None:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        while not self.stop.wait(INTERVAL):
            waiting = database.execute(query).fetchone()[0]
            self.samples += 1
            self.lock_waiters += waiting
            self.max_lock_waiters = max(self.max_lock_waiters, waiting)
            if admin is not None:
                self._sample_pool(admin, name)

    def _sample_pool(self, admin: Any, name: str) -> None:
        cursor = admin.execute("SHOW POOLS")
        columns = [column.name for column in cursor.description]
        for row in cursor.fetchall():
            pool = dict(zip(columns, row, strict=True))
            if pool["database"] == name:
                self.pool_waiters += pool["cl_waiting"]
                self.max_pool_waiters = max(self.max_pool_waiters, pool["cl_waiting"])
                wait_us = pool["maxwait"] * 1_000_000 + pool.get("maxwait_us", 0)
                self.max_pool_wait_us = max(self.max_pool_wait_us, wait_us)


def idle_counters(db: str) -> dict[str, int]:
    """The statement counters ``idle_load`` takes the difference of (none on SQLite,
    which counts nothing at the database)."""
    from django.db import connection

    if db == "sqlite":
        return {}
    if db == "mariadb":
        return mariadb_status(MARIADB_IDLE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return {"transactions": int(cursor.fetchone()[0])}


def idle_load(
    args: Any, workers: Workers, fleet_size: int, name: str, seconds: float
) -> dict[str, Any]:
    """``fleet_size`` workers (``--pool``, the default poll interval: what a production
    fleet idles with) started and left idle: statements per second at the database over
    ``seconds``, after they have settled."""
    fleet = workers.start_fleet(name, fleet_size, "--pool", str(args.pool))
    # Start-up (the LISTEN probe, the first orphan check) is not idle; and a PostgreSQL
    # backend that went idle reports its statistics up to 10 s later (PGSTAT_IDLE_INTERVAL):
    # PgBouncer's server connections, busy in the phase before, would otherwise add that
    # phase's transactions to this window.
    time.sleep(12.0 if args.db == "postgres" else 2.0)
    before, began = idle_counters(args.db), time.monotonic()
    time.sleep(seconds)
    after, wall = idle_counters(args.db), time.monotonic() - began
    exit_codes = [worker.terminate() for worker in fleet]
    # Each read of the counters is itself one statement (MariaDB) or transaction.
    rates = {key: round((after[key] - before[key] - 1) / wall, 2) for key in after}
    return {
        "workers": fleet_size,
        "wall_s": round(wall, 2),
        "per_s": rates,
        "exit_codes": exit_codes,
    }
