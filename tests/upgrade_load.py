"""An upgrade under load (issue 22), shared by ``tests/acceptance/test_online_upgrade.py``
and ``bench/upgrade.py``: a database at migration 0004 filled with runs and steps by raw
SQL, writers that do what the previous release's fleet does while ``migrate`` runs, and a
monitor that sees each index build and each writer that waits for a lock.

The writers are the *previous release*: they name only the columns that exist at 0004
(a worker of this release needs the newest columns, so it cannot run before the migration
ends; during a rolling upgrade it is the old fleet that keeps writing). They schedule runs
(an insert into the runs table) and record steps (a step insert from the run's row and
an update of the run's row, each in autocommit, as ``store/fenced.py`` writes them), each
thread on its own connection, and time every write from the statement to the commit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A workflow of tests/testapp that takes no arguments: the runs the writers schedule are
# run by a worker of the new release once the migration is over.
SCHEDULED_WORKFLOW = "named-flow"
HISTORY_WORKFLOW = "upgrade.history"


def connect(vendor: str, settings: dict[str, Any], name: str) -> Any:
    """A DB-API connection in autocommit to the database ``name`` on the server of
    ``settings`` (a Django DATABASES entry)."""
    if vendor == "postgresql":
        import psycopg

        return psycopg.connect(
            host=settings["HOST"],
            port=settings["PORT"],
            user=settings["USER"],
            password=settings.get("PASSWORD") or None,
            dbname=name,
            autocommit=True,
        )
    import MySQLdb

    conn = MySQLdb.connect(
        host=settings["HOST"],
        port=int(settings["PORT"]),
        user=settings["USER"],
        password=settings.get("PASSWORD") or "",
        database=name,
        charset="utf8mb4",
    )
    conn.autocommit(True)
    return conn


def populate(conn: Any, vendor: str, runs: int) -> None:
    """``runs`` finished runs and one step each, as the 0004 schema has them."""
    if vendor == "postgresql":
        new_id, series, g, text = (
            "gen_random_uuid()",
            f"generate_series(1, {runs}) g",
            "g",
            "g::text",
        )
    else:
        new_id, series, g, text = "UUID()", f"seq_1_to_{runs} s", "s.seq", "s.seq"
    with conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO everystep_workflow (id, name, args, idempotency_key, status,"
            " claimed_by, result, created_at, started_at, completed_at, updated_at,"
            f" recoveries) SELECT {new_id}, '{HISTORY_WORKFLOW}', '[]',"
            f" CONCAT('key-', {text}), CASE WHEN MOD({g}, 10) = 0 THEN 'failed'"
            f" ELSE 'completed' END, CONCAT('runner-', MOD({g}, 8)), '1', CURRENT_TIMESTAMP,"
            f" CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0 FROM {series}"
        )
        cursor.execute(
            "INSERT INTO everystep_step (step_id, name, args, kwargs, status, result,"
            " started_at, finished_at, workflow_id) SELECT 'add', 'add', '[]', '{}', 'done',"
            " '3', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, id FROM everystep_workflow"
        )
        cursor.execute(
            "ANALYZE everystep_workflow, everystep_step"
            if vendor == "postgresql"
            else "ANALYZE TABLE everystep_workflow, everystep_step"
        )
        if vendor != "postgresql":
            cursor.fetchall()


@dataclass(frozen=True)
class Write:
    """One write of the previous release's fleet: what, when it started and committed
    (``time.monotonic``), and the error if it failed."""

    kind: str
    start: float
    end: float
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Writers:
    """Threads that schedule runs and record steps until ``stop()``; ``pids`` are their
    connections' server ids (for the monitor)."""

    vendor: str
    connect: Callable[[], Any]
    threads_per_kind: int = 2
    pause: float = 0.01
    writes: list[Write] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    scheduled: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        conn = self.connect()
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM everystep_workflow WHERE name = '{HISTORY_WORKFLOW}' LIMIT 200"
            )
            history = [row[0] for row in cursor.fetchall()]
        conn.close()
        for n in range(self.threads_per_kind):
            for target, args in ((self._schedule, ()), (self._record, (history[n::2],))):
                conn = self.connect()
                with conn.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_backend_pid()"
                        if self.vendor == "postgresql"
                        else "SELECT CONNECTION_ID()"
                    )
                    self.pids.append(int(cursor.fetchone()[0]))
                thread = threading.Thread(target=target, args=(conn, *args), daemon=True)
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _timed(self, kind: str, conn: Any, statements: list[tuple[str, list[Any]]]) -> None:
        start = time.monotonic()
        error = ""
        try:
            with conn.cursor() as cursor:
                if len(statements) > 1:
                    cursor.execute("BEGIN" if self.vendor == "postgresql" else "START TRANSACTION")
                for sql, params in statements:
                    cursor.execute(sql, params)
                if len(statements) > 1:
                    cursor.execute("COMMIT")
        except Exception as exc:  # recorded: the test asserts there is none
            error = f"{type(exc).__name__}: {exc}"
            with conn.cursor() as cursor:
                cursor.execute("ROLLBACK")
        with self._lock:
            self.writes.append(Write(kind, start, time.monotonic(), error))

    def _schedule(self, conn: Any) -> None:
        # What the previous release's schedule() inserts: the 0004 columns.
        while not self._stop.is_set():
            value = str(uuid.uuid4())
            self._timed(
                "schedule",
                conn,
                [
                    (
                        "INSERT INTO everystep_workflow (id, name, args, status, created_at,"
                        " updated_at, recoveries) VALUES (%s, %s, '[]', 'scheduled',"
                        " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0)",
                        [value, SCHEDULED_WORKFLOW],
                    )
                ],
            )
            self.scheduled.append(value)
            time.sleep(self.pause)

    def _record(self, conn: Any, runs: list[Any]) -> None:
        # What a worker writes per step, as store/step_records.py does: the record, one
        # INSERT … SELECT from the run's row in autocommit, and an update of the run's row.
        n = 0
        while not self._stop.is_set():
            run = runs[n % len(runs)]
            n += 1
            step = (
                "INSERT INTO everystep_step (step_id, name, args, kwargs, status, result,"
                " started_at, finished_at, workflow_id) SELECT %s, 'add', '[]', '{}', 'done',"
                " '3', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, id FROM everystep_workflow"
                " WHERE id = %s"
            )
            self._timed("step", conn, [(step, [f"upgrade-{uuid.uuid4().hex}", run])])
            update = "UPDATE everystep_workflow SET updated_at = CURRENT_TIMESTAMP WHERE id = %s"
            self._timed("run", conn, [(update, [run])])
            time.sleep(self.pause)


@dataclass
class Build:
    """An index build (or an ALTER TABLE on MariaDB) the monitor saw, first to last."""

    what: str
    first: float
    last: float


@dataclass
class Monitor:
    """Polls the server every ``interval`` seconds: the index builds in progress
    (``pg_stat_progress_create_index``; MariaDB: the ALTER/CREATE INDEX statements of the
    process list while they work through the rows) and the writers waiting for a lock
    (``pg_locks``; MariaDB: a writer in a "Waiting for …lock" state), each wait noted with
    whether a build on a table the writers write was in progress (the indexes of new,
    empty tables are built inside their migration's transaction: a writer waiting then
    waits for that transaction's brief lock, not for a build on its table)."""

    vendor: str
    conn: Any
    writer_pids: list[int]
    interval: float = 0.01
    builds: dict[str, Build] = field(default_factory=dict)
    waits: list[tuple[float, int, str, bool]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    def _poll(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            building = self._building()
            for what in building:
                build = self.builds.setdefault(what, Build(what, now, now))
                build.last = now
            on_written = any(_table(what) in WRITTEN for what in building)
            for pid, lock in self._waiting():
                self.waits.append((now, pid, lock, on_written))
            time.sleep(self.interval)

    def _building(self) -> list[str]:
        with self.conn.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute(
                    "SELECT p.command, p.relid::regclass::text, COALESCE(c.relname, '?')"
                    " FROM pg_stat_progress_create_index p LEFT JOIN pg_class c"
                    " ON c.oid = p.index_relid WHERE p.datname = current_database()"
                )
                return [" ".join(row) for row in cursor.fetchall()]
            # Only the phases that work through the table's rows: "altering table"
            # (InnoDB's in-place build, which lets writes through), "copy to tmp table"
            # and "Enabling keys" (a copying ALTER, which blocks them: still a build, so
            # a migration that fell back to copying fails the test). Before and after
            # those the statement waits for, or holds, the table's exclusive metadata
            # lock ("Waiting for table metadata lock", "After create", "Committing alter
            # table…"): the moment writers wait, which the longest write bounds. An
            # instant change (ALTER COLUMN … SET DEFAULT) is nothing but that moment;
            # seen for 0.14 s on a loaded machine (in CI), it was once taken for a build
            # that blocked writes.
            cursor.execute(
                "SELECT INFO FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
                " AND (INFO LIKE 'CREATE INDEX%' OR INFO LIKE 'ALTER TABLE%')"
                " AND STATE IN ('altering table', 'copy to tmp table', 'Enabling keys')"
            )
            return [" ".join(str(row[0]).split()[:8]) for row in cursor.fetchall()]

    def _waiting(self) -> list[tuple[int, str]]:
        with self.conn.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute(
                    "SELECT pid, mode FROM pg_locks WHERE NOT granted AND pid = ANY(%s)",
                    [self.writer_pids],
                )
            else:
                cursor.execute(
                    "SELECT ID, STATE FROM information_schema.PROCESSLIST WHERE ID IN"
                    f" ({','.join(str(pid) for pid in self.writer_pids)})"
                    " AND STATE LIKE 'Waiting for%lock%'"
                )
            return [(int(pid), str(lock)) for pid, lock in cursor.fetchall()]


WRITTEN = ("everystep_workflow", "everystep_step")


def _table(what: str) -> str:
    """The table of a build the monitor saw: PostgreSQL's "command table index", MariaDB's
    "CREATE INDEX … ON table …" or "ALTER TABLE table …"."""
    words = what.replace("`", "").split()
    if words[0] == "ALTER":
        return words[2]
    if "ON" in words:
        return words[words.index("ON") + 1]
    return words[-2]


def committed_during(writes: list[Write], build: Build) -> list[Write]:
    """The writes that started and committed while ``build`` was seen in progress."""
    return [w for w in writes if build.first <= w.start and w.end <= build.last and not w.error]


def summary(writes: list[Write], monitor: Monitor, migrate_seconds: float) -> dict[str, Any]:
    """The figures a run reports: writes, their longest wait, the builds and lock waits."""
    longest = max(writes, key=lambda w: w.seconds)
    return {
        "migrate_seconds": round(migrate_seconds, 2),
        "writes": len(writes),
        "failed_writes": sum(1 for w in writes if w.error),
        "longest_write_seconds": round(longest.seconds, 3),
        "longest_write_kind": longest.kind,
        "writes_over_1s": sum(1 for w in writes if w.seconds > 1),
        "builds_seen": len(monitor.builds),
        "writes_committed_during_builds": sum(
            len(committed_during(writes, b)) for b in monitor.builds.values()
        ),
        "lock_waits_during_builds": sum(1 for *_, building in monitor.waits if building),
        "lock_wait_samples": len(monitor.waits),
    }
