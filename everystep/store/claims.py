"""Claiming due runs, and the fenced step record: the one place that knows how each
database does them.

A claim is one short transaction that marks the runs ``running`` under a fresh token
and returns what the pass needs (name, arguments, whether any step is recorded):

- PostgreSQL: one ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING``,
  so concurrent workers never wait on each other's batches;
- MariaDB ≥ 10.6 / MySQL ≥ 8: ``SELECT … FOR UPDATE SKIP LOCKED`` then ``UPDATE`` in one
  transaction (no ``UPDATE … RETURNING``); older servers lock with plain ``FOR UPDATE``:
  claims stay exclusive but serialise;
- SQLite: no row locks at all; one ``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING``
  runs under the database write lock, which makes it exclusive across processes.

A step's outcome is recorded with one ``INSERT … SELECT … FROM`` the run row ``WHERE``
the claim still holds it (``everystep.models.fence``), taking a share lock on that row
(PostgreSQL ``FOR SHARE``, MariaDB ``LOCK IN SHARE MODE``; SQLite's write lock does it),
so a cancel, requeue or takeover serialises with the record, and a stale worker's record
inserts nothing. The outcome of the run is one fenced ``UPDATE``.

These statements run once per step: they are written for the database rather than
through the ORM (whose query building costs more CPU than the round trip itself), built
once per database vendor, and given parameters in the driver's own forms.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from everystep.models import (
    Status,
    Step,
    Workflow,
    fence,
    finish_fields,
    take_fields,
)
from everystep.times import from_row
from everystep.values import Claim

_RUNS, _STEPS = Workflow._meta.db_table, Step._meta.db_table
_JSON_COLUMNS = frozenset({"args", "kwargs", "result", "error"})
_STEP_COLUMNS = (
    "step_id",
    "name",
    "args",
    "kwargs",
    "status",
    "result",
    "error",
    "started_at",
    "finished_at",
)
_FENCE = fence(Claim(uuid.UUID(int=0), uuid.UUID(int=0), ""))


def _condition(column: str, value: Any, alias: str = "") -> str:
    """``column = %s``, or with a status, ``column = 'running'``: statuses are constants
    of the code, and written into the SQL the planner sees them even in a prepared
    statement's generic plan (with ``status = $1`` PostgreSQL plans for any status and
    scans the whole table for the claim)."""
    if isinstance(value, Status):
        return f"{alias}{column} = '{value.value}'"
    return f"{alias}{column} = %s"


_SCHEDULED = _condition("status", Status.SCHEDULED)
_TAKE_COLUMNS = tuple(take_fields("", uuid.UUID(int=0), None))  # values: all parameters
_FINISH_COLUMNS = tuple(finish_fields(Status.FAILED, None, None, None))


class Statement(NamedTuple):
    """A hot-path statement in Django's ``%s`` style and in the driver's own."""

    sql: str
    native: str


class _Vendor:
    """The hot-path statements of one database, and its parameter forms."""

    def __init__(self, conn: Any) -> None:
        self.vendor = vendor = conn.vendor
        native_uuid = conn.features.has_native_uuid_field
        uuid_form: Callable[[Any], Any] = _same if native_uuid else operator.attrgetter("hex")
        # How each column's value is handed to the driver (None is always NULL).
        self.forms: dict[str, Callable[[Any], Any]] = {
            **dict.fromkeys(_JSON_COLUMNS, json.dumps),
            **dict.fromkeys(("id", "claim_token"), uuid_form),
            **dict.fromkeys(
                ("started_at", "finished_at", "updated_at", "completed_at", "due_at"),
                _datetime_form(conn),
            ),
        }
        share = {"postgresql": "FOR SHARE", "mysql": "LOCK IN SHARE MODE"}.get(vendor, "")
        held = " AND ".join(_condition(column, value) for column, value in _FENCE.items())
        fenced = " AND ".join(_condition(c, value, "w.") for c, value in _FENCE.items())
        self.insert_step = self.native(
            f"INSERT INTO {_STEPS} (workflow_id, {', '.join(_STEP_COLUMNS)}) "
            f"SELECT w.id, {', '.join(self.placeholder(c) for c in _STEP_COLUMNS)} "
            f"FROM {_RUNS} w WHERE {fenced} {share}"
        )
        settled = ("status", "result", "error", "finished_at")
        self.settle_step = self.native(
            f"UPDATE {_STEPS} SET {', '.join(f'{c} = {self.placeholder(c)}' for c in settled)} "
            f"WHERE workflow_id = %s AND step_id = %s AND status = 'started' AND EXISTS ("
            f"SELECT 1 FROM {_RUNS} w WHERE {fenced} {share})"
        )
        outcome = ", ".join(f"{c} = {self.placeholder(c)}" for c in _FINISH_COLUMNS)
        self.finish = self.native(f"UPDATE {_RUNS} SET {outcome} WHERE {held}")
        self.next_due = self.native(f"SELECT MIN(due_at) FROM {_RUNS} WHERE {_SCHEDULED}")
        claim = _claim_statement(vendor)
        self.claim = None if claim is None else self.native(claim)

    def native(self, sql: str) -> Statement:
        """``sql`` (Django's ``%s`` style) with its form for the driver's own cursor."""
        return Statement(sql, sql.replace("%s", "?") if self.vendor == "sqlite" else sql)

    def placeholder(self, column: str) -> str:
        # In a SELECT list PostgreSQL types an untyped parameter as text, which jsonb and
        # timestamptz columns refuse; elsewhere the database converts.
        if self.vendor != "postgresql":
            return "%s"
        if column in _JSON_COLUMNS:
            return "%s::jsonb"
        return "%s::timestamptz" if column in ("started_at", "finished_at") else "%s"

    def execute(self, conn: Any, statement: Statement, params: list[Any] | None = None) -> Any:
        """Run ``statement`` on ``conn``; the cursor, for its rows or row count.

        Normally on the driver's own cursor in Django's wrapper (which still translates
        errors and runs ``execute_wrapper``s), kept with the connection: Django's
        PostgreSQL cursor quotes every parameter into the SQL text and its SQLite cursor
        rewrites the placeholders of every statement, which together cost more CPU than
        the rest of a step record. While Django logs queries (``DEBUG``,
        ``CaptureQueriesContext``, a debug toolbar) it goes through Django's own cursor
        instead, so the query is logged, formatted, like every other.
        """
        if conn.queries_logged or self.vendor == "mysql":  # mysqlclient's is Django's anyway
            cursor = conn.cursor()
            cursor.execute(statement.sql, params)
            return cursor
        conn.ensure_connection()
        raw = conn.connection
        kept = conn.__dict__.get("_everystep_cursor")
        if kept is None or kept[0] is not raw:
            if self.vendor == "postgresql":
                import psycopg

                driver_cursor = psycopg.Cursor(raw)
            else:
                driver_cursor = raw.cursor()
            kept = (raw, conn.make_cursor(driver_cursor))
            conn.__dict__["_everystep_cursor"] = kept
        kept[1].execute(statement.native, params)
        return kept[1]

    def param(self, column: str, value: Any) -> Any:
        """``value`` as the driver takes it for ``column``."""
        return None if value is None else self.forms.get(column, _same)(value)

    def mark_params(self, runner: str, token: uuid.UUID, now: datetime) -> list[Any]:
        """The parameters of ``_marks()``: what a claim writes."""
        marks = [self.param(c, v) for c, v in take_fields(runner, token, now).items()]
        return [*marks, self.param("started_at", now)]

    def fence_params(self, claim: Claim) -> list[Any]:
        return [
            self.param(column, value)
            for column, value in fence(claim).items()
            if not isinstance(value, Status)
        ]


def _same(value: Any) -> Any:
    return value


def _datetime_form(conn: Any) -> Callable[[Any], Any]:
    """How a datetime reaches the driver. Outside PostgreSQL Django sends text in the
    connection's time zone; for the UTC times everystep writes, when that zone is UTC,
    the text is made directly rather than through Django's general conversion."""
    adapt: Callable[[Any], Any] = conn.ops.adapt_datetimefield_value
    if conn.vendor == "postgresql" or not (settings.USE_TZ and conn.timezone_name == "UTC"):
        return adapt

    def utc_text(value: datetime) -> Any:
        if value.tzinfo is UTC:
            return value.replace(tzinfo=None).isoformat(" ")
        return adapt(value)

    return utc_text


_vendors: dict[str, _Vendor] = {}


def _current() -> tuple[_Vendor, Any]:
    # The default connection, looked up once: every `connection.x` goes through a
    # thread-local proxy, which adds up on a path taken once per step.
    conn = connections[DEFAULT_DB_ALIAS]
    db = _vendors.get(conn.vendor)
    if db is None:
        db = _vendors[conn.vendor] = _Vendor(conn)
    return db, conn


_RETURNING = f"""RETURNING {_RUNS}.id, {_RUNS}.name, {_RUNS}.args,
       EXISTS (SELECT 1 FROM {_STEPS} s WHERE s.workflow_id = {_RUNS}.id), {_RUNS}.recoveries,
       {_RUNS}.due_at"""
# Due runs, in the order they became due: the (status, due_at, id) index walks them and
# stops before the first run still sleeping or waiting.
_DUE = f"{_SCHEDULED} AND due_at <= %s ORDER BY due_at, id"


def _marks() -> str:
    """The SET of a claim: ``take_fields``, and ``started_at`` on the first claim only."""
    taken = ", ".join(f"{column} = %s" for column in _TAKE_COLUMNS)
    return f"{taken}, started_at = COALESCE(started_at, %s)"


def _claim_statement(vendor: str) -> str | None:
    marks = _marks()
    if vendor == "postgresql":
        # The locking subquery must run exactly once. Inside `id IN (…)` the planner may
        # run it again for each candidate row, and with SKIP LOCKED every run returns
        # other rows: the UPDATE would take far more than LIMIT runs. A materialized CTE
        # is evaluated once. The UPDATE joins it by primary key alone: the CTE's rows are
        # locked and were re-checked as scheduled under the lock, and a second status
        # condition made the planner walk every scheduled run for each claim.
        return f"""
WITH due AS MATERIALIZED (
       SELECT id FROM {_RUNS} WHERE {_DUE} LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE {_RUNS} SET {marks} FROM due WHERE {_RUNS}.id = due.id
{_RETURNING}"""
    if vendor == "sqlite":
        # SQLite holds its write lock for the whole statement: the subquery runs once.
        return f"""
UPDATE {_RUNS} SET {marks}
 WHERE {_SCHEDULED} AND id IN (SELECT id FROM {_RUNS} WHERE {_DUE} LIMIT %s)
{_RETURNING}"""
    return None  # MariaDB/MySQL: no UPDATE … RETURNING


def claim_due(runner: str, limit: int) -> list[Claim]:
    """Claim up to ``limit`` due runs for ``runner``, in the order they became due (for
    runs scheduled to start at once: oldest first)."""
    if limit <= 0:
        return []
    token = uuid.uuid4()
    db, conn = _current()
    if db.claim is None:
        return _claim_locking(runner, token, limit)
    now = timezone.now()
    marks = db.mark_params(runner, token, now)
    due = db.param("due_at", now)
    # PostgreSQL's statement names the due time and limit (in its CTE) before the marks.
    params = [due, limit, *marks] if db.vendor == "postgresql" else [*marks, due, limit]
    rows = db.execute(conn, db.claim, params).fetchall()
    claims = [_claim(runner, token, *row) for row in rows]
    return sorted(claims, key=lambda held: held.run_id)


def next_due() -> datetime | None:
    """When the next scheduled run is due (possibly already), or None if none will be
    without an event: an idle worker's one statement per poll, which also tells it how
    long it may wait."""
    db, conn = _current()
    rows = db.execute(conn, db.next_due).fetchall()
    value = rows[0][0] if rows else None
    return None if value is None else from_row(value)


def _claim_locking(runner: str, token: uuid.UUID, limit: int) -> list[Claim]:
    db, conn = _current()
    skip = " SKIP LOCKED" if conn.features.has_select_for_update_skip_locked else ""
    select = (
        f"SELECT w.id, w.name, w.args, EXISTS ("
        f"SELECT 1 FROM {_STEPS} s WHERE s.workflow_id = w.id), w.recoveries, w.due_at "
        f"FROM {_RUNS} w WHERE w.{_DUE} LIMIT %s FOR UPDATE{skip}"
    )
    now = timezone.now()
    with transaction.atomic(), conn.cursor() as cursor:
        cursor.execute(select, [db.param("due_at", now), limit])
        rows = cursor.fetchall()
        if rows:
            marks = db.mark_params(runner, token, now)
            ids = ", ".join(["%s"] * len(rows))
            cursor.execute(
                f"UPDATE {_RUNS} SET {_marks()} WHERE id IN ({ids})", marks + [r[0] for r in rows]
            )
    return [_claim(runner, token, *row) for row in rows]


def reclaim_parked(runner: str) -> list[Claim]:
    """Startup catchup: take a fresh claim on every run left ``running`` under ``runner``
    by a previous process of the same name, so its late writes (if it is somehow still
    alive) are fenced out. Each counts as a recovery."""
    parked = Workflow.objects.filter(status=Status.RUNNING, claimed_by=runner)
    return _take_back(runner, parked, recoveries=F("recoveries") + 1)


def reclaim_strays(runner: str, held: Collection[uuid.UUID]) -> list[Claim]:
    """A fresh claim on every run ``running`` under ``runner`` that is not in ``held``
    (what this process knows it holds): the runs of a claim that committed although its
    reply was lost with the connection. Without this they would stay with a live runner,
    whose heartbeat keeps orphan recovery away, forever. Not a recovery: the run was
    never interrupted."""
    strays = Workflow.objects.filter(status=Status.RUNNING, claimed_by=runner)
    return _take_back(runner, strays.exclude(id__in=list(held)))


def _take_back(runner: str, runs: Any, **also: Any) -> list[Claim]:
    token = uuid.uuid4()
    runs.update(claim_token=token, updated_at=timezone.now(), **also)
    taken = Workflow.objects.filter(claimed_by=runner, status=Status.RUNNING, claim_token=token)
    return [_claim(runner, token, *row) for row in _with_steps(taken.order_by("id"))]


def _with_steps(runs: Any) -> Any:
    recorded = Exists(Step.objects.filter(workflow_id=OuterRef("id")))
    columns = ("id", "name", "args", "recorded", "recoveries", "due_at")
    return runs.annotate(recorded=recorded).values_list(*columns)


def _claim(
    runner: str,
    token: uuid.UUID,
    run_id: Any,
    name: str,
    args: Any,
    recorded: Any,
    recoveries: int,
    due_at: Any,
) -> Claim:
    # Raw rows carry the database's own forms: a hex string for a UUID outside
    # PostgreSQL, JSON text for the arguments, text or naive datetimes for times.
    run_id = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(run_id)
    args = json.loads(args) if isinstance(args, str | bytes) else args
    return Claim(
        run_id,
        token,
        runner,
        workflow=name,
        args=args,
        fresh=not recorded,
        recoveries=recoveries,
        due_at=None if due_at is None else from_row(due_at),
    )


# -- fenced writes for a claimed run -----------------------------------------------------


def insert_step_fenced(claim: Claim, values: dict[str, Any]) -> bool:
    """Insert a ``Step`` row for the claimed run in one statement, if the claim still
    holds the run; False if it does not (nothing was written)."""
    db, conn = _current()
    params = [db.param(column, values.get(column)) for column in _STEP_COLUMNS]
    cursor = db.execute(conn, db.insert_step, params + db.fence_params(claim))
    return bool(cursor.rowcount == 1)


def settle_started_fenced(claim: Claim, step_id: str, values: dict[str, Any]) -> bool:
    """Give an unsafe step's ``started`` row its outcome in one statement, if the claim
    still holds the run; False if nothing was updated."""
    db, conn = _current()
    params = [db.param(c, values.get(c)) for c in ("status", "result", "error", "finished_at")]
    params += [db.param("id", claim.run_id), step_id, *db.fence_params(claim)]
    cursor = db.execute(conn, db.settle_step, params)
    return bool(cursor.rowcount == 1)


def finish_fenced(claim: Claim, status: str, result: Any, error: Any) -> bool:
    """Give the claimed run its outcome in one statement; False if the claim no longer
    holds it (nothing was written)."""
    db, conn = _current()
    fields = finish_fields(status, result, error, timezone.now())
    params = [db.param(column, value) for column, value in fields.items()]
    cursor = db.execute(conn, db.finish, params + db.fence_params(claim))
    return bool(cursor.rowcount == 1)
