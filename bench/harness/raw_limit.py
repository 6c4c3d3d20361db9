"""The raw-SQL limit: everystep's work issued directly with the driver, no engine.

Per run, on ``threads`` threads with one connection each (the pool of one worker):

- claim ``batch`` due runs, in the order they became due, in one transaction:
  PostgreSQL ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n) RETURNING``;
  MariaDB ``BEGIN; SELECT … FOR UPDATE SKIP LOCKED; UPDATE; COMMIT``;
  SQLite ``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING``;
- one ``INSERT`` into ``everystep_step`` per step, each committed on its own (autocommit);
- one ``UPDATE`` to finish the run; on PostgreSQL, as everystep does there, it carries
  the last step's ``INSERT`` in the same statement (``WITH f AS (UPDATE …) INSERT …``).

It writes the same rows as ``everystep_bench.workflows.bench_three`` (3 steps: add,
double, inc) in the real ``everystep_workflow`` / ``everystep_step`` tables, with psycopg 3,
MySQLdb (mysqlclient) or sqlite3 at their defaults, and stops when nothing is left to claim.

Use it once Django is set up on a benchmark database and runs are scheduled
(``harness.runs.schedule_runs(bench_three, 500)``): ``run_raw_limit(threads=8)`` returns a
``RawLimitResult``. ``compare.py`` measures it in the same invocation as everystep
(``phases.raw_phase``) and reports the ratio; ``instructions.py`` counts its client.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

STEPS: tuple[tuple[str, Callable[..., int]], ...] = (
    ("everystep_bench.workflows.bench_add", lambda a, b: a + b),
    ("everystep_bench.workflows.bench_double", lambda x: 2 * x),
    ("everystep_bench.workflows.bench_inc", lambda x: x + 1),
)
RUNNER = "raw-limit"

STEP_COLUMNS = (
    "everystep_step (workflow_id, step_id, name, args, kwargs, status, result, error, "
    "started_at, finished_at)"
)
# The values of a step row after its run's id.
STEP_VALUES = "{p}, {p}, {j}, {j}, 'done', {j}, NULL, {p}, {p}"
INSERT_STEP = f"INSERT INTO {STEP_COLUMNS} VALUES ({{p}}, {STEP_VALUES})"
FINISH = (
    "UPDATE everystep_workflow SET status = 'completed', result = {j}, claim_token = NULL, "
    "updated_at = {p}, completed_at = {p} WHERE id = {p} AND claim_token = {p} "
    "AND status = 'running'"
)
TAKE = (
    "UPDATE everystep_workflow SET status = 'running', claimed_by = {p}, claim_token = {p}, "
    "started_at = COALESCE(started_at, {p}), updated_at = {p} "
)
# Due runs in the order they became due, as everystep's claim takes them (runs sleeping or
# waiting have a later due_at and are never walked).
DUE = (
    "SELECT id FROM everystep_workflow WHERE status = 'scheduled' AND due_at <= {p} "
    "ORDER BY due_at, id LIMIT {p}"
)


@dataclass(frozen=True)
class RawLimitResult:
    runs: int
    steps: int
    threads: int
    batch: int
    wall_s: float  # first claim to last finish, measured in this process
    claims: int  # claim transactions, the last empty one of each thread included
    cpu_s: float  # this process's CPU over the phase (driver and Python)

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.wall_s if self.wall_s else 0.0


class _Driver:
    """One thread's connection and the statements of one vendor."""

    vendor = ""
    p = "%s"
    j = "%s"

    def __init__(self, settings: dict[str, Any]) -> None:
        self.conn: Any = None
        self.insert = INSERT_STEP.format(p=self.p, j=self.j)
        self.finish_sql = FINISH.format(p=self.p, j=self.j)

    def now(self) -> Any:
        return datetime.now(UTC)

    def token(self) -> Any:
        return uuid.uuid4()

    def claim(self, batch: int) -> list[tuple[Any, Any, Any]]:
        raise NotImplementedError

    def record(self, run_id: Any, step_id: str, name: str, args: Any, result: Any) -> None:
        now = self.now()
        params = (run_id, step_id, name, json.dumps(args), "{}", json.dumps(result), now, now)
        self.conn.execute(self.insert, params)

    def finish(self, run_id: Any, token: Any, result: Any, last: tuple[str, str, Any]) -> None:
        """Finish the run, and record its last step (``last``: id, name, arguments,
        whose result is the run's)."""
        self.record(run_id, *last, result)
        now = self.now()
        self.conn.execute(self.finish_sql, (json.dumps(result), now, now, run_id, token))

    def close(self) -> None:
        self.conn.close()


class _Postgres(_Driver):
    vendor = "postgresql"
    j = "%s::jsonb"

    def __init__(self, settings: dict[str, Any]) -> None:
        import psycopg

        super().__init__(settings)
        self.conn = psycopg.connect(
            host=settings["HOST"] or None,
            port=settings["PORT"] or None,
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname=settings["NAME"],
            autocommit=True,
        )
        due = f"{DUE.format(p=self.p)} FOR UPDATE SKIP LOCKED"
        self.claim_sql = TAKE.format(p=self.p) + f"WHERE id IN ({due}) RETURNING id, name, args"
        values = STEP_VALUES.format(p=self.p, j=self.j)
        self.finish_step_sql = (
            f"WITH f AS ({self.finish_sql} RETURNING id) "
            f"INSERT INTO {STEP_COLUMNS} SELECT f.id, {values} FROM f"
        )

    def finish(self, run_id: Any, token: Any, result: Any, last: tuple[str, str, Any]) -> None:
        step_id, name, args = last
        now, value = self.now(), json.dumps(result)
        params = (value, now, now, run_id, token, step_id, name, json.dumps(args), "{}", value)
        self.conn.execute(self.finish_step_sql, (*params, now, now))

    def claim(self, batch: int) -> list[tuple[Any, Any, Any]]:
        token, now = self.token(), self.now()
        rows = self.conn.execute(self.claim_sql, (RUNNER, token, now, now, now, batch)).fetchall()
        return [(row[0], token, row[2]) for row in rows]


class _MariaDB(_Driver):
    vendor = "mysql"

    def __init__(self, settings: dict[str, Any]) -> None:
        import MySQLdb

        super().__init__(settings)
        kwargs: dict[str, Any] = {
            "user": settings["USER"],
            "passwd": settings["PASSWORD"],
            "db": settings["NAME"],
            "charset": "utf8mb4",
            "autocommit": True,
        }
        if settings["HOST"]:
            kwargs["host"] = settings["HOST"]
        if settings["PORT"]:
            kwargs["port"] = int(settings["PORT"])
        self.db = MySQLdb.connect(**kwargs)
        self.conn = self.db.cursor()
        # Django's default for MySQL/MariaDB, so both sides lock the same way.
        self.conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.select_sql = DUE.format(p=self.p).replace("SELECT id", "SELECT id, name, args")
        self.select_sql += " FOR UPDATE SKIP LOCKED"

    def now(self) -> Any:
        return datetime.now(UTC).replace(tzinfo=None)  # Django stores naive UTC here

    def token(self) -> Any:
        return str(uuid.uuid4())

    def claim(self, batch: int) -> list[tuple[Any, Any, Any]]:
        token, now = self.token(), self.now()
        self.db.begin()
        try:
            self.conn.execute(self.select_sql, (now, batch))
            rows = self.conn.fetchall()
            if rows:
                marks = ", ".join(["%s"] * len(rows))
                self.conn.execute(
                    TAKE.format(p=self.p) + f"WHERE id IN ({marks})",
                    (RUNNER, token, now, now, *(row[0] for row in rows)),
                )
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        return [(row[0], token, json.loads(row[2])) for row in rows]

    def close(self) -> None:
        self.db.close()


class _SQLite(_Driver):
    vendor = "sqlite"
    p = "?"
    j = "?"

    def __init__(self, settings: dict[str, Any]) -> None:
        import sqlite3

        super().__init__(settings)
        timeout = float(settings.get("OPTIONS", {}).get("timeout", 30))
        self.conn = sqlite3.connect(
            settings["NAME"], timeout=timeout, isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.claim_sql = (
            TAKE.format(p=self.p)
            + f"WHERE id IN ({DUE.format(p=self.p)}) AND status = 'scheduled' "
            "RETURNING id, name, args"
        )

    def now(self) -> Any:
        return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")  # Django's text format

    def token(self) -> Any:
        return uuid.uuid4().hex  # Django stores UUIDs as 32 hex digits here

    def claim(self, batch: int) -> list[tuple[Any, Any, Any]]:
        token, now = self.token(), self.now()
        rows = self.conn.execute(self.claim_sql, (RUNNER, token, now, now, now, batch)).fetchall()
        return [(row[0], token, json.loads(row[2])) for row in rows]


DRIVERS: dict[str, type[_Driver]] = {"postgresql": _Postgres, "mysql": _MariaDB, "sqlite": _SQLite}


def _execute_run(driver: _Driver, run_id: Any, token: Any, args: Any) -> None:
    values = list(args)
    for number, (name, fn) in enumerate(STEPS, start=1):
        result = fn(*values)
        if number == len(STEPS):
            driver.finish(run_id, token, result, (str(number), name, values))
        else:
            driver.record(run_id, str(number), name, values, result)
            values = [result]


def run_raw_limit(
    threads: int = 8, batch: int = 1, *, settings: dict[str, Any] | None = None, vendor: str = ""
) -> RawLimitResult:
    """Claim and execute every scheduled run with ``threads`` driver connections.

    ``settings`` and ``vendor`` default to Django's ``default`` connection (its
    ``settings_dict`` after ``create_test_db`` names the benchmark database).
    """
    if settings is None or not vendor:
        from django.db import connection

        settings, vendor = dict(connection.settings_dict), connection.vendor
    factory: Callable[[dict[str, Any]], _Driver] = DRIVERS[vendor]
    drivers = [factory(settings) for _ in range(threads)]
    ready = threading.Barrier(threads + 1)
    lock = threading.Lock()
    totals = {"runs": 0, "claims": 0, "last": 0.0}
    errors: list[BaseException] = []

    def work(driver: _Driver) -> None:
        runs = claims = 0
        try:
            ready.wait()
            while True:
                claimed = driver.claim(batch)
                claims += 1
                if not claimed:
                    break
                for run_id, token, args in claimed:
                    _execute_run(driver, run_id, token, args)
                    runs += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            with lock:
                totals["runs"] += runs
                totals["claims"] += claims
                totals["last"] = max(totals["last"], time.monotonic())

    pool = [
        threading.Thread(target=work, args=(d,), name=f"raw-{i}") for i, d in enumerate(drivers)
    ]
    for thread in pool:
        thread.start()
    cpu_before = time.process_time()
    ready.wait()
    began = time.monotonic()
    for thread in pool:
        thread.join()
    cpu = time.process_time() - cpu_before
    for driver in drivers:
        driver.close()
    if errors:
        raise errors[0]
    runs = int(totals["runs"])
    return RawLimitResult(
        runs=runs,
        steps=runs * len(STEPS),
        threads=threads,
        batch=batch,
        wall_s=round(totals["last"] - began, 3),
        claims=int(totals["claims"]),
        cpu_s=round(cpu, 3),
    )
