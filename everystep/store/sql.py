"""The hot-path statements' machinery: each database's parameter forms, and running a
statement on the driver's own cursor.

The statements that run once per step or per run (the claim, the fenced step record, the
run's outcome) are written for the database rather than through the ORM, whose query
building costs more CPU than the round trip itself. Each is built once per database
vendor (``Vendor.statement``), by the module that owns it (``claims``,
``step_records``, ``outcome``), and given parameters in the driver's own forms.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings

from everystep.models import Status, Step, Workflow, fence, take_fields
from everystep.store import database, prepared
from everystep.values import Claim

RUNS, STEPS = Workflow._meta.db_table, Step._meta.db_table
JSON_COLUMNS = frozenset({"args", "kwargs", "result", "error"})
_FENCE = fence(Claim(uuid.UUID(int=0), uuid.UUID(int=0), ""))
# The fencing columns given as parameters (a status is written into the SQL: ``condition``).
_FENCE_PARAMS = tuple(column for column, value in _FENCE.items() if not isinstance(value, Status))


def condition(column: str, value: Any, alias: str = "") -> str:
    """``column = %s``, or with a status, ``column = 'running'``: statuses are constants
    of the code, and written into the SQL the planner sees them even in a prepared
    statement's generic plan (with ``status = $1`` PostgreSQL plans for any status and
    scans the whole table for the claim)."""
    if isinstance(value, Status):
        return f"{alias}{column} = '{value.value}'"
    return f"{alias}{column} = %s"


SCHEDULED = condition("status", Status.SCHEDULED)


def fenced(alias: str = "") -> str:
    """The fencing rule (``everystep.models.fence``) as SQL, on the runs table as
    ``alias``; its parameters: ``Vendor.fence_params``."""
    return " AND ".join(condition(column, value, alias) for column, value in _FENCE.items())


class Statement(NamedTuple):
    """A hot-path statement in Django's ``%s`` style and in the driver's own."""

    sql: str
    native: str


class Vendor:
    """One database's parameter forms and hot-path statements."""

    def __init__(self, conn: Any) -> None:
        self.vendor = vendor = conn.vendor
        native_uuid = conn.features.has_native_uuid_field
        uuid_form: Callable[[Any], Any] = _same if native_uuid else operator.attrgetter("hex")
        # How each column's value is handed to the driver (None is always NULL).
        self.forms: dict[str, Callable[[Any], Any]] = {
            **dict.fromkeys(JSON_COLUMNS, json.dumps),
            **dict.fromkeys(("id", "claim_token", "parent_id"), uuid_form),
            **dict.fromkeys(
                ("started_at", "finished_at", "created_at", "updated_at", "completed_at", "due_at"),
                _datetime_form(conn),
            ),
        }
        # The lock a fenced record takes on its run row: a share lock, so records of one
        # run's fork branches do not queue behind each other (SQLite's write lock does it).
        self.share = {"postgresql": "FOR SHARE", "mysql": "LOCK IN SHARE MODE"}.get(vendor, "")
        # UPDATE … RETURNING: PostgreSQL and SQLite; not MariaDB or MySQL.
        self.returning = vendor in ("postgresql", "sqlite")
        # A data-modifying CTE: the run's outcome can carry a step record in its own
        # statement (``outcome.finish_run``). PostgreSQL only.
        self.carries_records = vendor == "postgresql"
        self._statements: dict[str, Statement] = {}
        self._forms: dict[tuple[str, ...], tuple[tuple[str, Callable[[Any], Any]], ...]] = {}

    def statement(self, key: str, build: Callable[[Vendor], str]) -> Statement:
        """The statement ``key``, built by ``build`` on first use."""
        made = self._statements.get(key)
        if made is None:
            made = self._statements[key] = self.native(build(self))
        return made

    def native(self, sql: str) -> Statement:
        """``sql`` (Django's ``%s`` style) with its form for the driver's own cursor."""
        return Statement(sql, sql.replace("%s", "?") if self.vendor == "sqlite" else sql)

    def placeholder(self, column: str) -> str:
        # In a SELECT list PostgreSQL types an untyped parameter as text, which jsonb and
        # timestamptz columns refuse; elsewhere the database converts.
        if self.vendor != "postgresql":
            return "%s"
        if column in JSON_COLUMNS:
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
        prepare = self.vendor == "postgresql" and prepared.enabled()
        kept: _Kept | None = conn.__dict__.get("_everystep_cursor")
        if kept is None or kept.raw is not raw or (kept.plans is not None) is not prepare:
            kept = conn.__dict__["_everystep_cursor"] = _Kept(conn, raw, self.vendor, prepare)
        if kept.plans is None:
            kept.cursor.execute(statement.native, params)
        else:
            kept.cursor.execute(kept.plans.text(statement.native), params)
        return kept.cursor

    def param(self, column: str, value: Any) -> Any:
        """``value`` as the driver takes it for ``column``."""
        return None if value is None else self.forms.get(column, _same)(value)

    def params(self, columns: tuple[str, ...], values: dict[str, Any]) -> list[Any]:
        """The values of ``columns`` in ``values`` (NULL where missing), as the driver
        takes them: ``param`` for a whole statement, with each column's form looked up
        once per database rather than once per value (a dozen values per step record)."""
        forms = self._forms.get(columns)
        if forms is None:
            forms = self._forms[columns] = tuple((c, self.forms.get(c, _same)) for c in columns)
        return [None if (value := values.get(c)) is None else form(value) for c, form in forms]

    def mark_params(self, runner: str, token: uuid.UUID, now: datetime) -> list[Any]:
        """The parameters of a claim's marks (``claims``): what a claim writes."""
        marks = [self.param(c, v) for c, v in take_fields(runner, token, now).items()]
        return [*marks, self.param("started_at", now)]

    def fence_params(self, claim: Claim) -> list[Any]:
        """The parameters of ``fenced()``."""
        return self.params(_FENCE_PARAMS, fence(claim))


class _Kept:
    """The driver's cursor kept with one connection, in Django's wrapper, and, where
    statements are prepared on it, their re-planning (``prepared.Plans``)."""

    __slots__ = ("cursor", "plans", "raw")

    def __init__(self, conn: Any, raw: Any, vendor: str, prepare: bool) -> None:
        self.raw = raw
        self.plans = prepared.Plans() if prepare else None
        if vendor != "postgresql":
            driver_cursor = raw.cursor()
        elif prepare:
            driver_cursor = prepared.preparing_cursor(raw)
        else:
            import psycopg

            driver_cursor = psycopg.Cursor(raw)
        self.cursor = conn.make_cursor(driver_cursor)


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


_vendors: dict[str, Vendor] = {}


def current() -> tuple[Vendor, Any]:
    """The ``Vendor`` of everystep's connection (``EVERYSTEP_DATABASE``), and the
    connection. Looked up once per call: every ``connection.x`` goes through a
    thread-local proxy, which adds up on a path taken once per step."""
    conn = database.connection()
    return vendor_of(conn), conn


def vendor_of(conn: Any) -> Vendor:
    """The ``Vendor`` of the connection ``conn``."""
    db = _vendors.get(conn.vendor)
    if db is None:
        db = _vendors[conn.vendor] = Vendor(conn)
    return db
