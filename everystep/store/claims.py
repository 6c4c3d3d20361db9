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
inserts nothing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from everystep.models import Status, Step, Workflow, fence
from everystep.values import Claim

_TABLE, _STEPS = Workflow._meta.db_table, Step._meta.db_table
_SET = """status = %s, claimed_by = %s, claim_token = %s, updated_at = %s,
       started_at = COALESCE(started_at, %s)"""
_RETURNING = f"""RETURNING {_TABLE}.id, {_TABLE}.name, {_TABLE}.args,
       EXISTS (SELECT 1 FROM {_STEPS} s WHERE s.workflow_id = {_TABLE}.id)"""
# PostgreSQL: the locking subquery must run exactly once. Inside `id IN (…)` the planner
# may run it again for each candidate row, and with SKIP LOCKED every run returns other
# rows — the UPDATE would then take far more than LIMIT runs. A materialized CTE is
# evaluated once.
_CLAIM_SQL = {
    "postgresql": f"""
WITH due AS MATERIALIZED (
       SELECT id FROM {_TABLE} WHERE status = %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE {_TABLE} SET {_SET}
  FROM due WHERE {_TABLE}.id = due.id AND {_TABLE}.status = %s
{_RETURNING}""",
    # SQLite takes its write lock for the whole statement: the subquery runs once.
    "sqlite": f"""
UPDATE {_TABLE} SET {_SET}
 WHERE status = %s AND id IN (SELECT id FROM {_TABLE} WHERE status = %s ORDER BY id LIMIT %s)
{_RETURNING}""",
}


def claim_due(runner: str, limit: int) -> list[Claim]:
    """Claim up to ``limit`` scheduled runs for ``runner``, oldest first."""
    if limit <= 0:
        return []
    token = uuid.uuid4()
    if connection.vendor not in _CLAIM_SQL:
        return _claim_locking(runner, token, limit)
    now = _db(Workflow, "updated_at", timezone.now())
    marks = [Status.RUNNING, runner, _db(Workflow, "claim_token", token), now, now]
    if connection.vendor == "postgresql":
        params = [Status.SCHEDULED, limit, *marks, Status.SCHEDULED]
    else:
        params = [*marks, Status.SCHEDULED, Status.SCHEDULED, limit]
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL[connection.vendor], params)
        rows = cursor.fetchall()
    claims = [
        _claim(runner, token, run_id, name, args, recorded) for run_id, name, args, recorded in rows
    ]
    return sorted(claims, key=lambda held: held.run_id)


def _claim_locking(runner: str, token: uuid.UUID, limit: int) -> list[Claim]:
    skip = connection.features.has_select_for_update_skip_locked
    with transaction.atomic():
        due = _with_steps(Workflow.objects.filter(status=Status.SCHEDULED).order_by("id"))
        rows = list(due.select_for_update(skip_locked=skip)[:limit])
        if rows:
            Workflow.objects.filter(id__in=[row[0] for row in rows]).take(runner, token)
    return [_claim(runner, token, *row) for row in rows]


def reclaim_parked(runner: str) -> list[Claim]:
    """Startup catchup: take a fresh claim on every run left ``running`` under ``runner``
    by a previous process of the same name, so its late writes (if it is somehow still
    alive) are fenced out."""
    token = uuid.uuid4()
    Workflow.objects.filter(status=Status.RUNNING, claimed_by=runner).update(
        claim_token=token, updated_at=timezone.now()
    )
    held = Workflow.objects.filter(claimed_by=runner, status=Status.RUNNING, claim_token=token)
    return [_claim(runner, token, *row) for row in _with_steps(held.order_by("id"))]


def _with_steps(runs: Any) -> Any:
    recorded = Exists(Step.objects.filter(workflow_id=OuterRef("id")))
    return runs.annotate(recorded=recorded).values_list("id", "name", "args", "recorded")


def _claim(
    runner: str, token: uuid.UUID, run_id: Any, name: str, args: Any, recorded: Any
) -> Claim:
    # Raw rows carry the database's own forms: a hex string for a UUID outside
    # PostgreSQL, JSON text for the arguments.
    run_id = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(run_id)
    args = json.loads(args) if isinstance(args, str | bytes) else args
    return Claim(run_id, token, runner, workflow=name, args=args, fresh=not recorded)


# -- the fenced step record ------------------------------------------------------------

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
_SHARE = {"postgresql": "FOR SHARE", "mysql": "LOCK IN SHARE MODE", "sqlite": ""}


def _fence_where(claim: Claim) -> tuple[str, list[Any]]:
    rule = fence(claim)
    where = " AND ".join(f"w.{column} = %s" for column in rule)
    return where, [_db(Workflow, column, value) for column, value in rule.items()]


def insert_step_fenced(claim: Claim, values: dict[str, Any]) -> bool:
    """Insert a ``Step`` row for the claimed run in one statement, if the claim still
    holds the run; False if it does not (nothing was written)."""
    where, where_params = _fence_where(claim)
    columns = ", ".join(_STEP_COLUMNS)
    placeholders = ", ".join(_placeholder(column) for column in _STEP_COLUMNS)
    sql = (
        f"INSERT INTO {Step._meta.db_table} (workflow_id, {columns}) "
        f"SELECT w.id, {placeholders} FROM {Workflow._meta.db_table} w "
        f"WHERE {where} {_SHARE[connection.vendor]}"
    )
    params = [_db(Step, column, values.get(column)) for column in _STEP_COLUMNS]
    with connection.cursor() as cursor:
        cursor.execute(sql, params + where_params)
        return cursor.rowcount == 1


def settle_started_fenced(claim: Claim, step_id: str, values: dict[str, Any]) -> bool:
    """Give an unsafe step's ``started`` row its outcome in one statement, if the claim
    still holds the run; False if nothing was updated."""
    where, where_params = _fence_where(claim)
    changed = ("status", "result", "error", "finished_at")
    assignments = ", ".join(f"{column} = {_placeholder(column)}" for column in changed)
    sql = (
        f"UPDATE {Step._meta.db_table} SET {assignments} "
        f"WHERE workflow_id = %s AND step_id = %s AND status = %s AND EXISTS ("
        f"SELECT 1 FROM {Workflow._meta.db_table} w WHERE {where} {_SHARE[connection.vendor]})"
    )
    params = [_db(Step, column, values.get(column)) for column in changed]
    params += [_db(Workflow, "id", claim.run_id), step_id, "started", *where_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == 1


def _placeholder(column: str) -> str:
    # In a SELECT list PostgreSQL types a bare literal as text, which a jsonb column
    # refuses; elsewhere JSON is text anyway.
    json_column = column in ("args", "kwargs", "result", "error")
    return "%s::jsonb" if json_column and connection.vendor == "postgresql" else "%s"


def _db(model: Any, column: str, value: Any) -> Any:
    """``value`` as the database driver expects it for ``model.column``."""
    field = model._meta.get_field(column)
    if value is None:
        return None
    if column in ("args", "kwargs", "result", "error"):
        # Encoded here rather than by the field: the field's adapter differs per driver,
        # and the statement above casts the text where a cast is needed.
        return json.dumps(value)
    return field.get_db_prep_value(value, connection)
