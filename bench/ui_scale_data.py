"""The rows of the UI scale database: a million runs over 90 days, five million steps, and
one big run (2,000 steps, a 50-branch fork) to look at.

Runs are made in chunks of consecutive creation times; each chunk is written in one
transaction together with its steps and a row in ``scale_chunks``, so an interrupted
generation (a database restart, Ctrl-C) resumes at the first chunk not recorded. A chunk's
rows come from a random generator seeded with its number: the same chunk is the same rows
whichever run writes it. PostgreSQL loads with ``COPY`` (psycopg 3), MariaDB with
multi-row ``INSERT`` batches (mysqlclient's ``executemany``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

RUNS = 1_000_000
STEPS = 5_000_000
CHUNKS = 100
DAYS = 90
BIG_RUN_KEY = "big-run"
BIG_RUN_NAME = "scale.big_run"
BIG_FORK_BRANCHES = 50
BIG_STEPS = 2_000
RUNNERS = [f"runner-{zone}-{n}" for zone in ("a", "b") for n in range(1, 5)]
IDEMPOTENT_SHARE = 0.3
INSERT_BATCH = 1_000

# (status, weight): mostly finished work, a tail of everything an operator hunts for.
STATUS_WEIGHTS = [
    ("completed", 900),
    ("failed", 40),
    ("stopped", 10),
    ("cancelled", 10),
    ("blocked", 5),
    ("running", 5),
    ("scheduled", 30),
]
RUN_COLUMNS = [
    "id", "name", "args", "idempotency_key", "status", "claimed_by", "claim_token", "result",
    "error", "created_at", "started_at", "completed_at", "updated_at", "recoveries", "due_at",
    "waiting_for",
]  # fmt: skip
STEP_COLUMNS = [
    "workflow_id", "step_id", "name", "args", "kwargs", "status", "result", "error",
    "started_at", "finished_at",
]  # fmt: skip

_AREAS = ["billing", "orders", "shipping", "users", "reports", "search", "mail", "media"]
_VERBS = ["sync", "import", "export", "charge", "refund", "notify", "rebuild", "verify", "merge"]
_THINGS = ["invoice", "account", "batch", "catalog", "ledger", "report"]


def workflow_names() -> list[str]:
    """About 200 names, like a large project's: ``area.verb_thing``."""
    names = [f"{a}.{v}_{t}" for a in _AREAS for v in _VERBS for t in _THINGS]
    return sorted(names)[::2][:200]


NAMES = workflow_names()
# A few workflows do most of the work (Zipf-like), many run rarely.
NAME_WEIGHTS = [1.0 / (rank + 1) for rank in range(len(NAMES))]


def uuid7_at(moment: datetime, rng: random.Random) -> uuid.UUID:
    """A version-7 UUID whose time field is ``moment`` (as ``everystep.models.uuid7``)."""
    ms = int(moment.timestamp() * 1000)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rng.getrandbits(12) << 64
    value |= 0b10 << 62 | rng.getrandbits(62)
    return uuid.UUID(int=value)


@dataclass(frozen=True)
class Chunk:
    """Rows of one chunk, as tuples in ``RUN_COLUMNS`` / ``STEP_COLUMNS`` order."""

    number: int
    runs: list[tuple[Any, ...]]
    steps: list[tuple[Any, ...]]


def make_chunk(number: int, origin: datetime, runs: int = RUNS) -> Chunk:
    """Chunk ``number`` of ``CHUNKS``: its slice of the 90 days, its runs and steps."""
    rng = random.Random(number)
    width = timedelta(days=DAYS) / CHUNKS
    count = runs // CHUNKS
    start = origin + width * number
    moments = sorted(start + width * rng.random() for _ in range(count))
    runs, steps = [], []
    for index, created in enumerate(moments):
        run, run_steps = _run(rng, created, number * count + index, origin)
        runs.append(run)
        steps.extend(run_steps)
    return Chunk(number, runs, steps)


def _run(
    rng: random.Random, created: datetime, serial: int, origin: datetime
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    run_id = uuid7_at(created, rng)
    name = rng.choices(NAMES, NAME_WEIGHTS)[0]
    status = rng.choices([s for s, _ in STATUS_WEIGHTS], [w for _, w in STATUS_WEIGHTS])[0]
    key = f"order-{serial}" if rng.random() < IDEMPOTENT_SHARE else None
    waiting = status == "scheduled" and rng.random() < 0.5
    started = None if status == "scheduled" and not waiting else created + _ms(rng, 5, 500)
    # Five steps per run on average: 0 to 10 in sequence, a few runs fork.
    plan = _step_ids(rng) if started else []
    steps: list[tuple[Any, ...]] = []
    clock = started or created
    for position, step_id in enumerate(plan):
        last = position == len(plan) - 1
        step_status = "failed" if last and status == "failed" else "done"
        if last and status in ("running", "blocked"):
            step_status = "started"
        took = _ms(rng, 5, 2_000)
        finished = None if step_status == "started" else clock + took
        steps.append(_step(run_id, step_id, name, step_status, clock, finished))
        clock = clock + took
    final = status in ("completed", "failed", "stopped", "cancelled")
    completed = clock + _ms(rng, 1, 50) if final else None
    run = (
        run_id, name, json.dumps([serial, {"customer": f"c_{serial % 50_000}"}]), key, status,
        rng.choice(RUNNERS) if started else None,
        uuid.UUID(int=rng.getrandbits(128), version=4) if status == "running" else None,
        json.dumps({"ok": True, "count": serial % 97}) if status == "completed" else None,
        _error(serial) if status == "failed" else None,
        created, started, completed, completed or clock, 0,
        _due(rng, status, waiting, created), "approval" if waiting else None,
    )  # fmt: skip
    return run, steps


def _step_ids(rng: random.Random) -> list[str]:
    # 0 to 11 steps, five on average over all runs (those never started have none).
    count = rng.randint(0, 10) + (rng.random() < 0.08)
    if count < 4 or rng.random() > 0.1:
        return [str(n) for n in range(1, count + 1)]
    # A small fork at position 2: branches of two steps each.
    branches = rng.randint(2, 4)
    forked = [f"2.{b}.{s}" for b in range(branches) for s in (1, 2)]
    return ["1", *forked, *[str(n) for n in range(3, count - len(forked) + 1)]]


def _step(
    run_id: uuid.UUID,
    step_id: str,
    workflow: str,
    status: str,
    started: datetime,
    finished: datetime | None,
) -> tuple[Any, ...]:
    function = f"{workflow}_step_{step_id.rsplit('.', 1)[-1]}"
    result = json.dumps({"step": step_id}) if status == "done" else None
    error = _error(0) if status == "failed" else None
    return (run_id, step_id, function, "[1]", "{}", status, result, error, started, finished)


def _error(serial: int) -> str:
    return json.dumps({"type": "TimeoutError", "message": f"upstream timed out ({serial})"})


def _due(rng: random.Random, status: str, waiting: bool, created: datetime) -> datetime | None:
    if not waiting:
        return created
    # Half the waits have a deadline days ahead, the rest wait for the event alone.
    return created + timedelta(days=rng.randint(91, 120)) if rng.random() < 0.5 else None


def _ms(rng: random.Random, low: int, high: int) -> timedelta:
    return timedelta(milliseconds=rng.randint(low, high))


def big_run(origin: datetime) -> Chunk:
    """The run of 2,000 steps: 400 in sequence, a fork of 50 branches of 30 steps each
    (branch 17 failed), 100 after it; the run failed. Its idempotency key is ``big-run``."""
    rng = random.Random(-1)
    created = origin + timedelta(days=DAYS) - timedelta(hours=1)
    run_id = uuid7_at(created, rng)
    ids = [str(n) for n in range(1, 401)]
    ids += [f"401.{b}.{s}" for b in range(BIG_FORK_BRANCHES) for s in range(1, 31)]
    ids += [str(n) for n in range(402, 402 + BIG_STEPS - len(ids))]
    steps, clock = [], created + timedelta(milliseconds=20)
    for step_id in ids:
        took = _ms(rng, 5, 800)
        failed = step_id == "401.17.30"
        steps.append(
            _step(
                run_id, step_id, BIG_RUN_NAME, "failed" if failed else "done", clock, clock + took
            )
        )
        # The branches of the fork ran side by side: only the sequence moves the clock far.
        clock = clock + (took / 10 if step_id.startswith("401.") else took)
    run = (
        run_id, BIG_RUN_NAME, json.dumps(["everything"]), BIG_RUN_KEY, "failed", RUNNERS[0],
        None, None, _error(-1), created, created, clock, clock, 0, created, None,
    )  # fmt: skip
    return Chunk(-1, [run], steps)


def all_chunks(origin: datetime, done: set[int], runs: int = RUNS) -> Iterator[Chunk]:
    """The chunks not written yet, the big run first."""
    if -1 not in done:
        yield big_run(origin)
    for number in range(CHUNKS):
        if number not in done:
            yield make_chunk(number, origin, runs)


# -- writing ----------------------------------------------------------------------------


def prepare(connection: Any) -> datetime:
    """The bookkeeping table, and the origin of the 90 days (fixed at the first run, so a
    resumed generation continues the same history)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS scale_chunks (number integer PRIMARY KEY, "
            "origin varchar(40) NOT NULL, seconds double precision NOT NULL)"
        )
        cursor.execute("SELECT origin FROM scale_chunks ORDER BY number LIMIT 1")
        row = cursor.fetchone()
    if row:
        return datetime.fromisoformat(row[0])
    now = datetime.now(UTC).replace(microsecond=0)
    return now - timedelta(days=DAYS)


def done_chunks(connection: Any) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT number FROM scale_chunks")
        return {row[0] for row in cursor.fetchall()}


def write_chunk(connection: Any, chunk: Chunk, origin: datetime) -> float:
    """Write one chunk and its bookkeeping row in one transaction; seconds it took."""
    from django.db import transaction

    began = time.monotonic()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            _copy(connection, "everystep_workflow", RUN_COLUMNS, chunk.runs)
            _copy(connection, "everystep_step", STEP_COLUMNS, chunk.steps)
        else:
            _insert(connection, "everystep_workflow", RUN_COLUMNS, chunk.runs)
            _insert(connection, "everystep_step", STEP_COLUMNS, chunk.steps)
        took = time.monotonic() - began
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO scale_chunks (number, origin, seconds) VALUES (%s, %s, %s)",
                [chunk.number, origin.isoformat(), took],
            )
    return took


def _copy(connection: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    with connection.cursor() as cursor:
        # Not durable until the chunk commits anyway: the WAL flush need not be waited for.
        cursor.execute("SET LOCAL synchronous_commit = off")
        sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        with cursor.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)


def _insert(connection: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    native_uuid = connection.features.has_native_uuid_field
    placeholders = ", ".join(["%s"] * len(columns))
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"
    with connection.cursor() as cursor:
        # The generator writes whole runs with their steps: nothing to check row by row.
        cursor.execute("SET SESSION foreign_key_checks = 0, unique_checks = 0")
        for start in range(0, len(rows), INSERT_BATCH):
            batch = [_mysql_row(row, native_uuid) for row in rows[start : start + INSERT_BATCH]]
            # mysqlclient turns this into one multi-row INSERT statement.
            cursor.executemany(sql, batch)
        cursor.execute("SET SESSION foreign_key_checks = 1, unique_checks = 1")


def _mysql_row(row: tuple[Any, ...], native_uuid: bool) -> tuple[Any, ...]:
    return tuple(_mysql_value(value, native_uuid) for value in row)


def _mysql_value(value: Any, native_uuid: bool) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value) if native_uuid else value.hex
    if isinstance(value, datetime):
        # Django stores naive UTC on MySQL/MariaDB.
        return value.astimezone(UTC).replace(tzinfo=None)
    return value
