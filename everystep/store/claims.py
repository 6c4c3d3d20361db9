"""Claiming due runs: the one place that knows how each database does it.

A claim is one short transaction that marks the runs ``running`` under a fresh token
and returns what the pass needs (name, arguments, whether any step is recorded):

- PostgreSQL: one ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING``,
  so concurrent workers never wait on each other's batches;
- MariaDB ≥ 10.6 / MySQL ≥ 8: ``SELECT … FOR UPDATE SKIP LOCKED`` then ``UPDATE`` in one
  transaction (no ``UPDATE … RETURNING``); older servers lock with plain ``FOR UPDATE``:
  claims stay exclusive but serialise;
- SQLite: no row locks at all; one ``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING``
  runs under the database write lock, which makes it exclusive across processes.

The claim runs once per batch of runs: it is written for each database rather than built
through the ORM (``everystep.store.sql``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from everystep.models import Status, Step, Workflow, take_fields
from everystep.store import database
from everystep.store.sql import RUNS, SCHEDULED, STEPS, Vendor, current
from everystep.store.task_attempts import next_attempts
from everystep.times import from_row
from everystep.values import Carrying, Claim, TaskClaim

_TAKE_COLUMNS = tuple(take_fields("", uuid.UUID(int=0), None))  # values: all parameters


def _taken(run: str) -> str:
    """What a claim reads of each run it takes (``_claim``'s arguments), ``run`` naming
    the runs table. The due time only comes back for a run that has recorded steps: it
    says how late a resumed wait woke (``engine.operations.waits.woken``), and parsing it for every
    fresh run cost 4 % of a busy worker's CPU. A Django task's run also gives what its
    ``TaskResult`` holds (``TaskClaim``); other runs give NULLs there."""
    recorded = f"EXISTS (SELECT 1 FROM {STEPS} s WHERE s.workflow_id = {run}.id)"
    task = f"CASE WHEN {run}.queue IS NOT NULL THEN"
    return (
        f"{run}.id, {run}.name, {run}.args, {recorded}, {run}.recoveries, "
        f"CASE WHEN {recorded} THEN {run}.due_at END, "
        f"{run}.queue, {run}.task_options, {run}.attempts, {task} {run}.created_at END, "
        f"{task} {run}.started_at END, {run}.resumes"
    )


def _attempt_mark(db: Vendor) -> str:
    """The SET of a claim for a Django task's run: its attempt recorded in the claim's
    own statement (``store.task_attempts`` says what one is), so no pass begins with a
    read and a write of its own, and no reader sees it running without its attempt.
    A claim after a durable wait (``resumes``) continues the last attempt, which then
    names this claim; any other appends one. Parameters: ``_attempt_params``. Before
    ``resumes = NULL``: MariaDB's SET reads the columns already set."""
    if db.vendor == "postgresql":
        length = "jsonb_array_length(attempts)"
        last = f"jsonb_set(attempts, ARRAY[({length} - 1)::text, 'claim'], to_jsonb(%s::text))"
        one = "jsonb_build_object('worker', %s::text, 'at', %s::text, 'claim', %s::text)"
        added = f"COALESCE(attempts, '[]'::jsonb) || jsonb_build_array({one})"
    elif db.vendor == "sqlite":
        length = "json_array_length(attempts)"
        last = "json_set(attempts, '$[#-1].claim', %s)"
        added = (
            "json_insert(COALESCE(attempts, '[]'), '$[#]', "
            "json_object('worker', %s, 'at', %s, 'claim', %s))"
        )
    else:
        length = "JSON_LENGTH(attempts)"
        last = f"JSON_SET(attempts, CONCAT('$[', {length} - 1, '].claim'), %s)"
        added = (
            "JSON_ARRAY_APPEND(COALESCE(attempts, JSON_ARRAY()), '$', "
            "JSON_OBJECT('worker', %s, 'at', %s, 'claim', %s))"
        )
    return (
        f"attempts = CASE WHEN queue IS NULL THEN attempts "
        f"WHEN resumes AND {length} > 0 THEN {last} ELSE {added} END, resumes = NULL"
    )


def _attempt_params(runner: str, token: uuid.UUID, at: str) -> list[Any]:
    return [str(token), runner, at, str(token)]


_RETURNING = f"RETURNING {_taken(RUNS)}"


def _due(db: Vendor, names: int | None) -> str:
    """Due runs, in the order they became due: the (status, due_at, id) index walks them
    and stops before the first run still sleeping or waiting. With ``names`` (how many
    the worker carries; None: no filter), only runs it can carry (``_carried``)."""
    carried = "" if names is None else f" AND {_carried(db, names)}"
    return f"{SCHEDULED} AND due_at <= %s{carried} ORDER BY due_at, id"


def _carried(db: Vendor, names: int) -> str:
    """The runs a worker can carry on: of a workflow or task it has (or scheduled by its
    own code version, or by code that did not say: it fails those once, as unknown), and
    not handed back by a worker on its version. Parameters:
    ``_carried_params``. Runs left so sit at the head of the index walk, each claim
    stepping over them: a cost only while they wait for the code."""
    if db.vendor == "postgresql":
        known = "name = ANY(%s)"
    else:
        known = f"name IN ({', '.join(['%s'] * names)})" if names else "1 = 0"
    return (
        f"({known} OR code_version IS NULL OR code_version = %s)"
        " AND (handed_back_by IS NULL OR handed_back_by <> %s)"
    )


def _carried_params(db: Vendor, carrying: Carrying | None) -> list[Any]:
    if carrying is None:
        return []
    names: list[Any] = [list(carrying.names)] if db.vendor == "postgresql" else [*carrying.names]
    return [*names, carrying.code_version, carrying.code_version]


def _statement_key(db: Vendor, what: str, carrying: Carrying | None) -> tuple[str, int | None]:
    """The cache key of statement ``what`` and the count of names it is written for."""
    if carrying is None:
        return what, None
    names = len(carrying.names)
    return f"{what}:{'any' if db.vendor == 'postgresql' else names}", names


def _marks(db: Vendor) -> str:
    """The SET of a claim: ``take_fields``, ``started_at`` on the first claim only, and
    a task run's attempt (``_attempt_mark``). Parameters: ``_mark_params``."""
    taken = ", ".join(f"{column} = %s" for column in _TAKE_COLUMNS)
    return f"{taken}, started_at = COALESCE(started_at, %s), {_attempt_mark(db)}"


def _mark_params(db: Vendor, runner: str, token: uuid.UUID, now: datetime) -> list[Any]:
    return [*db.mark_params(runner, token, now), *_attempt_params(runner, token, _at(now))]


def _at(now: datetime) -> str:
    """An attempt's ``at``, as ``store.task_attempts`` writes it."""
    return now.isoformat()


def _claim_statement(db: Vendor, names: int | None) -> str:
    marks = _marks(db)
    if db.vendor == "postgresql":
        # The locking subquery must run exactly once. Inside `id IN (…)` the planner may
        # run it again for each candidate row, and with SKIP LOCKED every run returns
        # other rows: the UPDATE would take far more than LIMIT runs. A materialized CTE
        # is evaluated once. The UPDATE joins it by primary key alone: the CTE's rows are
        # locked and were re-checked as scheduled under the lock, and a second status
        # condition made the planner walk every scheduled run for each claim.
        return f"""
WITH due AS MATERIALIZED (
       SELECT id FROM {RUNS} WHERE {_due(db, names)} LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE {RUNS} SET {marks} FROM due WHERE {RUNS}.id = due.id
{_RETURNING}"""
    # SQLite holds its write lock for the whole statement: the subquery runs once.
    return f"""
UPDATE {RUNS} SET {marks}
 WHERE {SCHEDULED} AND id IN (SELECT id FROM {RUNS} WHERE {_due(db, names)} LIMIT %s)
{_RETURNING}"""


def claim_due(runner: str, limit: int, carrying: Carrying | None = None) -> list[Claim]:
    """Claim up to ``limit`` due runs for ``runner``, in the order they became due (for
    runs scheduled to start at once: oldest first). With ``carrying``, only runs a worker
    on that code version, with those names, can carry on (``_carried``)."""
    if limit <= 0:
        return []
    token = uuid.uuid4()
    db, conn = current()
    if not db.returning:  # MariaDB/MySQL: no UPDATE … RETURNING
        return _claim_locking(runner, token, limit, carrying)
    key, names = _statement_key(db, "claim", carrying)
    statement = db.statement(key, lambda made: _claim_statement(made, names))
    now = timezone.now()
    marks = _mark_params(db, runner, token, now)
    due = [db.param("due_at", now), *_carried_params(db, carrying)]
    # PostgreSQL's statement names the due time and limit (in its CTE) before the marks.
    params = [*due, limit, *marks] if db.vendor == "postgresql" else [*marks, *due, limit]
    rows = db.execute(conn, statement, params).fetchall()
    at = _at(now)
    claims = [
        _claim(runner, token, *row[:6]).with_task(_written(token, at, *row[6:])) for row in rows
    ]
    return sorted(claims, key=lambda held: held.run_id)


def next_due(carrying: Carrying | None = None) -> datetime | None:
    """When the next scheduled run is due (possibly already), or None if none will be
    without an event: an idle worker's one statement per poll, which also tells it how
    long it may wait. With ``carrying``, of the runs it would claim only: runs waiting
    for other code do not keep it from idling."""
    db, conn = current()
    key, names = _statement_key(db, "next_due", carrying)
    statement = db.statement(key, lambda made: _next_due_statement(made, names))
    rows = db.execute(conn, statement, _carried_params(db, carrying)).fetchall()
    value = rows[0][0] if rows else None
    return None if value is None else from_row(value)


def _next_due_statement(db: Vendor, names: int | None) -> str:
    carried = "" if names is None else f" AND {_carried(db, names)}"
    return f"SELECT MIN(due_at) FROM {RUNS} WHERE {SCHEDULED}{carried}"


def _claim_locking(
    runner: str, token: uuid.UUID, limit: int, carrying: Carrying | None
) -> list[Claim]:
    db, conn = current()
    skip = " SKIP LOCKED" if conn.features.has_select_for_update_skip_locked else ""
    names = None if carrying is None else len(carrying.names)
    due = _due(db, names)
    select = f"SELECT {_taken('w')} FROM {RUNS} w WHERE {due} LIMIT %s FOR UPDATE{skip}"
    now = timezone.now()
    with database.atomic(), conn.cursor() as cursor:
        cursor.execute(select, [db.param("due_at", now), *_carried_params(db, carrying), limit])
        rows = cursor.fetchall()
        if rows:
            marks = _mark_params(db, runner, token, now)
            ids = ", ".join(["%s"] * len(rows))
            cursor.execute(
                f"UPDATE {RUNS} SET {_marks(db)} WHERE id IN ({ids})", marks + [r[0] for r in rows]
            )
    at = _at(now)
    return [
        _claim(runner, token, *row[:6]).with_task(_to_write(runner, token, now, at, *row[6:]))
        for row in rows
    ]


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


def _written(
    token: uuid.UUID,
    at: str,
    queue: str | None,
    options: Any,
    attempts: Any,
    created_at: Any,
    started_at: Any,
    resumes: Any,
) -> TaskClaim | None:
    """A task run's ``TaskClaim`` from the values the claim wrote (``RETURNING``)."""
    if queue is None:
        return None
    attempts = _json(attempts) or []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    new = last.get("at") == at and last.get("claim") == str(token)
    return TaskClaim(
        queue, _json(options), attempts, new, from_row(created_at), from_row(started_at)
    )


def _to_write(
    runner: str,
    token: uuid.UUID,
    now: datetime,
    at: str,
    queue: str | None,
    options: Any,
    attempts: Any,
    created_at: Any,
    started_at: Any,
    resumes: Any,
) -> TaskClaim | None:
    """A task run's ``TaskClaim`` from the values read before the claim's UPDATE wrote
    (MariaDB: no ``RETURNING``), as that UPDATE wrote them."""
    if queue is None:
        return None
    written, new = next_attempts(_json(attempts), bool(resumes), runner, str(token), at)
    started = now if started_at is None else from_row(started_at)
    return TaskClaim(queue, _json(options), written, new, from_row(created_at), started)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


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
