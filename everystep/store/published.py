"""The values runs publish (``everystep.publish``): one row per run and key, written by
an upsert that also counts the key's writes (a key new to the run only while the run is
under its cap of keys), and read back whole, per run, or one key for many runs (the
runs list's column).

A fork shows the values of the run it was forked from until it publishes any of its
own: ``snapshots`` follows ``forked_from`` from a run that has none.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection, Iterator
from typing import Any

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from everystep import serde
from everystep.errors import EverystepError
from everystep.models import Published, Workflow
from everystep.store import database
from everystep.store.guard import guarded

# How far ``snapshots`` follows a chain of forks with no values of their own.
_FORK_DEPTH = 20
# Ids per read: SQLite builds may refuse more than 999 variables in a statement.
_CHUNK = 900
# The class id of everystep's PostgreSQL advisory locks on a run's new keys (the first
# of the two int4 keys): "esPB" as an int.
_LOCK_CLASS = 0x65735042
# How long (seconds) a MariaDB/MySQL writer waits for that lock before it writes without
# it: another writer holds it for one statement.
_LOCK_WAIT = 10

State = tuple[str, tuple[int, int]]


@guarded
def write(run_id: uuid.UUID, key: str, stored: Any, *, cap: int | None = None) -> bool:
    """Make ``stored`` (a value already encoded by ``serde``) the latest under ``key`` for
    run ``run_id``, counting the write in the row's ``version``: one statement. With
    ``cap``, a key the run has not stored is written only while the run has fewer than
    ``cap`` keys; returns whether the value was written."""
    conn = database.connection()
    params = [
        Workflow._meta.pk.get_db_prep_value(run_id, conn),
        key,
        Published._meta.get_field("value").get_db_prep_save(stored, conn),
        Published._meta.get_field("updated_at").get_db_prep_save(timezone.now(), conn),
    ]
    if cap is None:
        with conn.cursor() as cursor:
            cursor.execute(_upsert(conn, "VALUES (%s, %s, %s, 1, %s)"), params)
        return True
    table = conn.ops.quote_name(Published._meta.db_table)
    workflow_id, key_column = conn.ops.quote_name("workflow_id"), conn.ops.quote_name("key")
    # One statement decides and writes, so no key slips in between a count and an
    # insert of this statement; an existing key is always updated, at the cap too.
    source = (
        f"SELECT %s, %s, %s, 1, %s {'FROM DUAL ' if conn.vendor == 'mysql' else ''}"
        f"WHERE (SELECT COUNT(*) FROM {table} WHERE {workflow_id} = %s) < %s "
        f"OR EXISTS (SELECT 1 FROM {table} WHERE {workflow_id} = %s AND {key_column} = %s)"
    )
    params += [params[0], cap, params[0], key]
    with _keys_locked(conn, run_id), conn.cursor() as cursor:
        cursor.execute(_upsert(conn, source), params)
        return cursor.rowcount > 0


def _upsert(conn: Any, source: str) -> str:
    """``INSERT`` of one ``Published`` row from ``source`` (``VALUES`` or a ``SELECT``
    of workflow id, key, value, version and time) that updates the row already there."""
    quote = conn.ops.quote_name
    table = quote(Published._meta.db_table)
    names = ("workflow_id", "key", "value", "version", "updated_at")
    columns = ", ".join(quote(name) for name in names)
    if conn.vendor == "mysql":
        update = (
            f"ON DUPLICATE KEY UPDATE {quote('value')} = VALUES({quote('value')}), "
            f"{quote('version')} = {quote('version')} + 1, "
            f"{quote('updated_at')} = VALUES({quote('updated_at')})"
        )
    else:
        update = (
            f"ON CONFLICT ({quote('workflow_id')}, {quote('key')}) DO UPDATE SET "
            f"{quote('value')} = excluded.{quote('value')}, "
            f"{quote('version')} = {table}.{quote('version')} + 1, "
            f"{quote('updated_at')} = excluded.{quote('updated_at')}"
        )
    return f"INSERT INTO {table} ({columns}) {source} {update}"


@contextlib.contextmanager
def _keys_locked(conn: Any, run_id: uuid.UUID) -> Iterator[None]:
    """Hold run ``run_id``'s lock on new keys while the body runs: two processes adding
    keys to one run at once would each count the keys before the other's commit, and
    both pass the cap. SQLite needs none: its one writer runs the statement alone."""
    if conn.vendor == "postgresql":
        # A transaction-scoped lock (it holds through a transaction-mode pooler), in the
        # two-key space, with everystep's class id, so no bigint lock of the project's
        # can be the same lock; READ COMMITTED gives the insert a snapshot taken after it.
        with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, _lock_id(run_id)])
            yield
    elif conn.vendor == "mysql":
        # A named lock of the session, released once the (autocommit) insert committed:
        # InnoDB's READ COMMITTED takes no gap locks, so no row lock could stand for it.
        name = f"everystep.published.{run_id.hex}"
        with conn.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, %s)", [name, _LOCK_WAIT])
            (held,) = cursor.fetchone()
        try:
            yield
        finally:
            if held == 1:
                with conn.cursor() as cursor:
                    cursor.execute("SELECT RELEASE_LOCK(%s)", [name])
    else:
        yield


def _lock_id(run_id: uuid.UUID) -> int:
    # The run id's last 32 bits, as PostgreSQL's signed int4 (UUIDv7 puts its time in
    # the first bits, its randomness last): two runs that share one only wait in turn.
    return int.from_bytes(run_id.bytes[-4:], "big", signed=True)


@guarded
def states(runs: Collection[uuid.UUID]) -> dict[uuid.UUID, State]:
    """``run id → (status, (keys, writes))`` of the runs that exist: what a watcher
    compares to see that a run's values changed, without reading them. The status is
    read first, so values read after a final status are the final values."""
    ids = list(runs)
    statuses: dict[uuid.UUID, str] = {}
    tokens: dict[uuid.UUID, tuple[int, int]] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        statuses.update(Workflow.objects.filter(id__in=chunk).values_list("id", "status"))
        rows = (
            Published.objects.filter(workflow_id__in=chunk)
            .values("workflow_id")
            .annotate(keys=Count("id"), writes=Sum("version"))
            .order_by()
        )
        tokens.update({row["workflow_id"]: (row["keys"], int(row["writes"])) for row in rows})
    return {run: (status, tokens.get(run, (0, 0))) for run, status in statuses.items()}


@guarded
def snapshots(
    runs: Collection[uuid.UUID], *, decode: bool = True
) -> dict[uuid.UUID, dict[str, Any]]:
    """``run id → {key: value}`` of the runs that exist; a fork with no value of its own
    has its origin's. ``decode=False``: the values in their stored form (a page shows
    them so, and imports nothing a stored value names)."""
    ids = list(runs)
    origins: dict[uuid.UUID, uuid.UUID | None] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        origins.update(Workflow.objects.filter(id__in=chunk).values_list("id", "forked_from_id"))
    return _with_origins(origins, decode)


@guarded
def snapshot(run: uuid.UUID | Workflow, *, decode: bool = True) -> dict[str, Any] | None:
    """Run ``run``'s values, or None if there is no such run; given its row, the run is
    not read again."""
    if isinstance(run, Workflow):
        return _with_origins({run.id: run.forked_from_id}, decode)[run.id]
    return snapshots([run], decode=decode).get(run)


def _with_origins(
    origins: dict[uuid.UUID, uuid.UUID | None], decode: bool
) -> dict[uuid.UUID, dict[str, Any]]:
    values = _values(list(origins), decode)
    # A fork without values of its own shows its origin's, through a chain of such forks.
    pending: dict[uuid.UUID, uuid.UUID] = {
        run: origin for run, origin in origins.items() if origin is not None and not values.get(run)
    }
    for _ in range(_FORK_DEPTH):
        if not pending:
            break
        found = _values(list(set(pending.values())), decode)
        upward = dict(
            Workflow.objects.filter(id__in=list(set(pending.values()))).values_list(
                "id", "forked_from_id"
            )
        )
        for run, origin in list(pending.items()):
            above = upward.get(origin)
            if found.get(origin):
                values[run] = found[origin]
                del pending[run]
            elif above is not None:
                pending[run] = above
            else:
                del pending[run]
    return {run: values.get(run, {}) for run in origins}


@guarded
def column(runs: Collection[uuid.UUID], key: str, *, decode: bool = True) -> dict[uuid.UUID, Any]:
    """``run id → value`` under ``key`` of those ``runs`` that have one (a fork with no
    value of its own shows its origin's, one step back); ``decode`` as ``snapshots``."""
    ids = list(runs)
    found: dict[uuid.UUID, Any] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        found.update(_one_key(chunk, key, decode))
        missing = [run for run in chunk if run not in found]
        if missing:
            origins = dict(
                Workflow.objects.filter(id__in=missing, forked_from__isnull=False).values_list(
                    "id", "forked_from_id"
                )
            )
            if origins:
                theirs = _one_key(list(set(origins.values())), key, decode)
                found.update({run: theirs[o] for run, o in origins.items() if o in theirs})
    return found


def _one_key(ids: list[uuid.UUID], key: str, decode: bool) -> dict[uuid.UUID, Any]:
    rows = Published.objects.filter(workflow_id__in=ids, key=key)
    rows = rows.values_list("workflow_id", "value")
    return {run: _decoded(value) if decode else value for run, value in rows}


def _values(ids: list[uuid.UUID], decode: bool) -> dict[uuid.UUID, dict[str, Any]]:
    values: dict[uuid.UUID, dict[str, Any]] = {}
    for start in range(0, len(ids), _CHUNK):
        rows = (
            Published.objects.filter(workflow_id__in=ids[start : start + _CHUNK])
            .order_by("workflow_id", "key")
            .values_list("workflow_id", "key", "value")
        )
        for run, key, value in rows:
            values.setdefault(run, {})[key] = _decoded(value) if decode else value
    return values


def _decoded(value: Any) -> Any:
    try:
        return serde.decode(value)
    except EverystepError:  # a value whose type is gone since: shown as stored
        return value
