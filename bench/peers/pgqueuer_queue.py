"""PgQueuer's plain job queue with everystep's three steps emulated, on this machine.

A peer figure to put beside ``bench/compare.py``'s in the same session: how fast does
a PostgreSQL job queue (PgQueuer, PyPI ``pgqueuer``) go through ``--runs`` jobs when
each job records three steps the way everystep records ``bench_three``'s?

Run it with the venv that ``bench/peers/setup-pgqueuer.sh`` makes (never the project's
``.venv``)::

    bash bench/peers/setup-pgqueuer.sh
    /tmp/pgqueuer-venv/bin/python bench/peers/pgqueuer_queue.py [--runs 2000]
        [--concurrency 8] [--gate worker|entrypoint] [--batch-size N] [--repeat 3]
        [--driver connection|pool] [--loop uvloop|asyncio] [--json] [--label NAME]

Each invocation creates its own database (``pgq_bench_<hex>``; dropped at the end,
also on an error or SIGTERM), installs PgQueuer's schema with its Python API
(``Queries.install()``: the default ``durable`` tables, all WAL-logged like everystep's)
and a table ``step`` shaped like ``everystep_step``. Each round:

1. the tables are emptied and ``VACUUM ANALYZE``d (as ``compare.py`` does between
   phases), then ``--runs`` jobs of entrypoint ``bench_three`` (payload ``[i, 1]``) are
   enqueued with ``Queries.enqueue``, ``--enqueue-batch`` per statement, before any
   consumer exists;
2. it waits (``--wait-quiet``) for the rest of the machine to be quiet;
3. ONE ``QueueManager`` in this process (start-up outside the measured span) runs in
   ``drain`` mode until the queue is empty. Its entrypoint emulates ``bench_three``:
   it takes one connection of a pool of ``--concurrency`` asyncpg connections and
   issues three ``INSERT INTO step`` statements (add, double, inc), each in autocommit,
   so each is its own transaction, as everystep commits each step on its own; then it
   returns and PgQueuer marks the job done itself (moves it to ``pgqueuer_log``).

Concurrency, comparable to ``everystep_worker --pool 8`` (8 runs in flight, each on a
connection of its own):

- ``--gate worker`` (default): ``QueueManager.run(max_concurrent_tasks=C,
  batch_size=C // 2)``: PgQueuer's hard cap on the jobs this worker has picked
  (enforced in its dequeue query); it requires ``max_concurrent_tasks >= 2 *
  batch_size``, hence batch size 4 for 8;
- ``--gate entrypoint``: ``@entrypoint(concurrency_limit=C)`` and ``batch_size=C``:
  the database-wide limit on the entrypoint's picked jobs.

``--driver connection`` (default) gives the ``QueueManager`` one asyncpg connection
(``AsyncpgDriver``, what ``pgq run`` uses); ``pool`` an ``AsyncpgPoolDriver`` on a pool
of its own. ``--loop uvloop`` (default) is the loop ``pgq run`` uses.

Measured per round, as ``compare.py`` measures everystep:

- **runs/s from the rows**: completed jobs / (last ``successful`` row's ``created`` -
  first ``picked`` row's ``created`` in ``pgqueuer_log``): first pick to last job
  marked done; also ``wall_s`` in this process, from ``QueueManager.run()`` to its
  return (start-up and drain detection included);
- **worker CPU** per run and per step: this process's user + system time
  (``os.times()``) over ``QueueManager.run()``;
- **db CPU** per run: utime + stime (and reaped children's) of every ``postgres``
  process (``/proc/<pid>/stat``) before and after, the method of ``harness/cpu.py``;
- ``other_s``: busy CPU of everything else on the machine (the disturbance indicator);
- RSS of this process at start and end of the consumer phase.

It prints one line per round and a summary line; ``--json`` appends one line (kind
``peer``, label ``pgqueuer-emulated``) to ``bench/results/peer.jsonl`` (``--results PATH``
elsewhere).

What it does NOT emulate (so it flatters PgQueuer, compared with everystep): no fenced
step insert (everystep's ``INSERT … SELECT … WHERE claim_token = … FOR SHARE``), no
run result stored, no replay or serialisation of step results, no claim token; and
PgQueuer batches its bookkeeping (picks ``batch_size`` jobs per dequeue, marks jobs done
in batches from a buffer flushed at ``batch_size`` entries or every 0.1 s), where
everystep finishes each run with its own statement. The steps go through asyncpg
(its statement cache prepares them) on one event loop, where everystep's go through
psycopg on ``--pool`` threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import psycopg
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "peer.jsonl"
ENTRYPOINT = "bench_three"
DB_PREFIX = "pgq_bench_"

# bench_three's steps: the names everystep records, and what they compute.
STEPS: tuple[tuple[str, Callable[..., int]], ...] = (
    ("everystep_bench.workflows.bench_add", lambda a, b: a + b),
    ("everystep_bench.workflows.bench_double", lambda x: 2 * x),
    ("everystep_bench.workflows.bench_inc", lambda x: x + 1),
)

# The columns of everystep_step, with the job's id for the run's.
STEP_TABLE = """
CREATE TABLE step (
    job_id      bigint      NOT NULL,
    step_id     text        NOT NULL,
    name        text        NOT NULL,
    args        jsonb       NOT NULL,
    kwargs      jsonb       NOT NULL,
    status      text        NOT NULL,
    result      jsonb,
    error       text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, step_id)
)
"""
INSERT_STEP = (
    "INSERT INTO step (job_id, step_id, name, args, kwargs, status, result, error, "
    "started_at, finished_at) "
    "VALUES ($1, $2, $3, $4::jsonb, '{}'::jsonb, 'done', $5::jsonb, NULL, $6, $7)"
)
TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics", "step")


# -- arguments -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="jobs per round (2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs in flight, as --pool (8)")
    parser.add_argument(
        "--gate",
        choices=["worker", "entrypoint"],
        default="worker",
        help="how the concurrency is capped: worker = run(max_concurrent_tasks=C), "
        "entrypoint = @entrypoint(concurrency_limit=C) (worker)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="QueueManager.run(batch_size=...); 0: C // 2 with --gate worker (the most "
        "PgQueuer allows), C with --gate entrypoint (0)",
    )
    parser.add_argument(
        "--driver",
        choices=["connection", "pool"],
        default="connection",
        help="the QueueManager's own database access: one asyncpg connection "
        "(AsyncpgDriver) or a pool (AsyncpgPoolDriver) (connection)",
    )
    parser.add_argument(
        "--loop", choices=["uvloop", "asyncio"], default="uvloop", help="event loop (uvloop)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument(
        "--enqueue-batch", type=int, default=1000, help="jobs per enqueue statement (1000)"
    )
    add_wait_quiet_argument(parser, "round")
    parser.add_argument("--label", default="pgqueuer-emulated", help="(pgqueuer-emulated)")
    parser.add_argument("--json", action="store_true", help="append a line to --results")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"({RESULTS})")
    parser.add_argument("--host", default=os.environ.get("EVERYSTEP_TEST_PG_HOST", "127.0.0.1"))
    parser.add_argument("--port", default=os.environ.get("EVERYSTEP_TEST_PG_PORT", "5432"))
    parser.add_argument("--user", default=os.environ.get("EVERYSTEP_TEST_PG_USER", "postgres"))
    parser.add_argument("--password", default=os.environ.get("EVERYSTEP_TEST_PG_PASSWORD", ""))
    args = parser.parse_args(argv)
    if min(args.runs, args.concurrency, args.repeat, args.enqueue_batch) < 1:
        parser.error("--runs, --concurrency, --repeat and --enqueue-batch must be at least 1")
    if args.batch_size == 0:
        args.batch_size = (
            max(args.concurrency // 2, 1) if args.gate == "worker" else args.concurrency
        )
    if args.gate == "worker" and args.concurrency < 2 * args.batch_size:
        parser.error("--gate worker: PgQueuer needs --concurrency >= 2 x --batch-size")
    return args


def knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The PgQueuer settings of a round, as passed to it."""
    return {
        "entrypoint_concurrency_limit": args.concurrency if args.gate == "entrypoint" else 0,
        "max_concurrent_tasks": args.concurrency if args.gate == "worker" else None,
        "batch_size": args.batch_size,
        "mode": "drain",
        "driver": "AsyncpgDriver" if args.driver == "connection" else "AsyncpgPoolDriver",
        "step_pool": args.concurrency,
        "loop": args.loop,
        "durability": "durable",
    }


# -- the database --------------------------------------------------------------------------


def conninfo(args: argparse.Namespace, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(
        host=args.host,
        port=args.port,
        user=args.user,
        password=args.password or None,
        dbname=dbname,
    )


def url(args: argparse.Namespace, dbname: str) -> str:
    """The same settings as a URL, the form asyncpg takes."""
    auth = quote(args.user, safe="")
    if args.password:
        auth += ":" + quote(args.password, safe="")
    return f"postgresql://{auth}@{args.host}:{args.port}/{quote(dbname, safe='')}"


def admin(args: argparse.Namespace, dbname: str = "postgres") -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo(args, dbname), autocommit=True)


def create_database(args: argparse.Namespace) -> str:
    name = f"{DB_PREFIX}{secrets.token_hex(4)}"
    with admin(args) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(args: argparse.Namespace, name: str) -> None:
    for attempt in range(5):  # the server may be restarting
        try:
            with admin(args) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg.OperationalError as exc:
            if attempt == 4:
                print(f"could not drop database {name} ({exc}): drop it by hand", file=sys.stderr)
            time.sleep(2)


async def install(args: argparse.Namespace, dbname: str) -> None:
    conn = await asyncpg.connect(url(args, dbname))
    try:
        await Queries(AsyncpgDriver(conn)).install()
        await conn.execute(STEP_TABLE)
    finally:
        await conn.close()


def tidy(args: argparse.Namespace, dbname: str) -> None:
    """Empty every table and vacuum it: each round starts from the same table state."""
    with admin(args, dbname) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)}")
        conn.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")


async def enqueue(args: argparse.Namespace, dbname: str) -> None:
    conn = await asyncpg.connect(url(args, dbname))
    try:
        queries = Queries(AsyncpgDriver(conn))
        for first in range(0, args.runs, args.enqueue_batch):
            numbers = range(first, min(first + args.enqueue_batch, args.runs))
            await queries.enqueue(
                [ENTRYPOINT] * len(numbers),
                [json.dumps([i, 1]).encode() for i in numbers],
                [0] * len(numbers),
            )
    finally:
        await conn.close()


def rows(args: argparse.Namespace, dbname: str) -> dict[str, Any]:
    """Completed jobs and step rows, and runs/s from the first pick to the last job
    marked done, from ``pgqueuer_log`` (as ``harness.runs.finished_span`` reads everystep's
    ``started_at`` and ``completed_at``)."""
    with admin(args, dbname) as conn:
        done, first, last = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'successful'), "
            "min(created) FILTER (WHERE status = 'picked'), "
            "max(created) FILTER (WHERE status = 'successful') FROM pgqueuer_log"
        ).fetchone()
        statuses = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM pgqueuer_log "
                "WHERE status NOT IN ('queued', 'picked') GROUP BY 1"
            ).fetchall()
        )
        left = dict(
            conn.execute("SELECT status::text, count(*) FROM pgqueuer GROUP BY 1").fetchall()
        )
        (steps,) = conn.execute("SELECT count(*) FROM step").fetchone()
        # Every job's third step holds 2 * (i + 1) + 1 for its payload [i, 1].
        (wrong,) = conn.execute(
            "SELECT count(*) FROM step a LEFT JOIN step c "
            "ON c.job_id = a.job_id AND c.step_id = '3' WHERE a.step_id = '1' "
            "AND (c.result IS NULL OR (c.result #>> '{}')::int "
            "<> 2 * ((a.args ->> 0)::int + (a.args ->> 1)::int) + 1)"
        ).fetchone()
    seconds = (last - first).total_seconds() if done else math.nan
    return {
        "completed": done,
        "steps": steps,
        "span_s": round(seconds, 3),
        "runs_per_s": round(done / seconds, 1) if done and seconds > 0 else 0.0,
        "statuses": statuses,
        "left_in_queue": left,
        "wrong_results": wrong,
    }


def database_version(args: argparse.Namespace) -> str:
    with admin(args) as conn:
        (value,) = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {value}"


# -- CPU and memory: the harness's own functions (bench/harness/cpu.py imports nothing of
# Django or everystep, so this venv can import it)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.cpu import db_server_cpu_seconds as _db_server_cpu_seconds  # noqa: E402
from harness.cpu import (  # noqa: E402
    machine_busy_seconds,
    process_cpu_split,
    process_rss_mb,
    wait_quiet,
)
from harness.options import add_wait_quiet_argument  # noqa: E402


def db_server_cpu_seconds() -> float:
    return _db_server_cpu_seconds("postgres")


def own_cpu() -> tuple[float, float]:
    return process_cpu_split(os.getpid())


def rss_mb() -> float:
    return process_rss_mb(os.getpid())


# -- the consumer --------------------------------------------------------------------------


class Problems(logging.Handler):
    """PgQueuer's log lines at WARNING or above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            line += f" ({record.exc_info[1]!r})"
        self.lines.append(line)


async def consume(args: argparse.Namespace, dbname: str) -> dict[str, Any]:
    """One QueueManager drains the queue; its CPU, memory and the server's CPU."""
    dsn = url(args, dbname)
    steps = await asyncpg.create_pool(dsn, min_size=args.concurrency, max_size=args.concurrency)
    own_pool = None
    if args.driver == "connection":
        qm_conn = await asyncpg.connect(dsn)
        driver: Any = AsyncpgDriver(qm_conn)
    else:
        qm_conn = None
        own_pool = await asyncpg.create_pool(dsn, min_size=2, max_size=max(args.concurrency, 2))
        driver = AsyncpgPoolDriver(own_pool)
    qm = QueueManager(Queries(driver))
    first_pick: list[float] = []
    in_flight = {"now": 0, "max": 0}  # jobs inside the entrypoint: the cap at work

    async def bench_three(job: Job) -> None:
        if not first_pick:
            first_pick.append(time.monotonic())
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        try:
            values = json.loads(job.payload or b"[]")
            async with steps.acquire() as conn:
                for number, (name, fn) in enumerate(STEPS, start=1):
                    started = datetime.now(UTC)
                    result = fn(*values)
                    await conn.execute(
                        INSERT_STEP,
                        job.id,
                        str(number),
                        name,
                        json.dumps(values),
                        json.dumps(result),
                        started,
                        datetime.now(UTC),
                    )
                    values = [result]
        finally:
            in_flight["now"] -= 1

    limit = args.concurrency if args.gate == "entrypoint" else 0
    qm.entrypoint(ENTRYPOINT, concurrency_limit=limit)(bench_three)

    busy_before, db_before = machine_busy_seconds(), db_server_cpu_seconds()
    rss_start = rss_mb()
    user0, system0 = own_cpu()
    began = time.monotonic()
    try:
        await asyncio.wait_for(
            qm.run(
                batch_size=args.batch_size,
                mode=QueueExecutionMode.drain,
                max_concurrent_tasks=args.concurrency if args.gate == "worker" else None,
            ),
            timeout=max(600.0, args.runs / 10),
        )
    finally:
        ended = time.monotonic()
        user1, system1 = own_cpu()
        rss_end = rss_mb()
        db_after, busy_after = db_server_cpu_seconds(), machine_busy_seconds()
        await steps.close()
        if qm_conn is not None:
            await qm_conn.close()
        if own_pool is not None:
            await own_pool.close()
    user, system = user1 - user0, system1 - system0
    db_cpu = db_after - db_before
    machine = busy_after - busy_before
    return {
        "wall_s": round(ended - began, 3),
        "first_pick_after_s": round(first_pick[0] - began, 3) if first_pick else None,
        "max_in_flight": in_flight["max"],
        "cpu": {
            "worker_s": round(user + system, 3),
            "worker_user_s": round(user, 3),
            "worker_system_s": round(system, 3),
            "db_server_s": round(db_cpu, 3),
            "machine_s": round(machine, 2),
            "other_s": round(machine - (user + system) - db_cpu, 2),
            "wall_s": round(ended - began, 3),
        },
        "rss_mb": {"start": rss_start, "end": rss_end},
    }


def run_loop(args: argparse.Namespace, coro: Coroutine[Any, Any, Any]) -> Any:
    if args.loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def server_started(args: argparse.Namespace) -> float:
    with admin(args) as conn:
        (value,) = conn.execute("SELECT extract(epoch FROM pg_postmaster_start_time())").fetchone()
    return float(value)


def wait_for_server(args: argparse.Namespace, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            server_started(args)
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


class ServerRestarted(Exception):
    pass


ATTEMPTS = 3
# What a database server restarting in the middle of a round looks like (others may
# restart the shared server): the round is measured again, up to ATTEMPTS times.
RESTART_ERRORS = (
    psycopg.OperationalError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    ConnectionError,
    OSError,
    ServerRestarted,
)


def measured_round(
    args: argparse.Namespace, dbname: str, number: int, problems: Problems
) -> dict[str, Any]:
    """``one_round``, again if the server restarted meanwhile; PgQueuer's complaints
    during an attempt given up on are set aside (``retries``), not counted."""
    retries: list[dict[str, Any]] = []
    for attempt in range(1, ATTEMPTS + 1):
        mark = len(problems.lines)
        try:
            started = server_started(args)
            phase = one_round(args, dbname)
            if server_started(args) != started:
                raise ServerRestarted("the database server restarted during the round")
            phase["attempt"] = attempt
            phase["retries"] = retries
            return phase
        except RESTART_ERRORS as exc:
            if attempt == ATTEMPTS:
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            lines = problems.lines[mark:]
            del problems.lines[mark:]
            retries.append({"attempt": attempt, "error": first, "log_lines": lines})
            print(f"  round {number}: {first}; measuring it again", flush=True)
            wait_for_server(args)
    raise AssertionError("unreachable")


def one_round(args: argparse.Namespace, dbname: str) -> dict[str, Any]:
    tidy(args, dbname)
    run_loop(args, enqueue(args, dbname))
    quiet = wait_quiet(args.wait_quiet)
    measured = run_loop(args, consume(args, dbname))
    span = rows(args, dbname)
    done = max(span["completed"], 1)
    worker = measured["cpu"]["worker_s"]
    return {
        "phase": "pgqueuer",
        **span,
        "wall_s": measured["wall_s"],
        "first_pick_after_s": measured["first_pick_after_s"],
        "max_in_flight": measured["max_in_flight"],
        "worker_cpu_ms_per_run": round(1000 * worker / done, 3),
        "worker_cpu_ms_per_step": round(1000 * worker / max(span["steps"], 1), 3),
        "db_cpu_ms_per_run": round(1000 * measured["cpu"]["db_server_s"] / done, 3),
        "cpu": measured["cpu"],
        "rss_mb": measured["rss_mb"],
        "quiet": quiet,
    }


# -- reporting -----------------------------------------------------------------------------


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("pgqueuer", "asyncpg", "psycopg", "uvloop"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


def source_info() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    return {
        "path": str(ROOT),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--", "everystep")),
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median([r[key] for r in rounds]), 3)

    return {
        "runs_per_s": median("runs_per_s"),
        "worker_cpu_ms_per_run": median("worker_cpu_ms_per_run"),
        "worker_cpu_ms_per_step": median("worker_cpu_ms_per_step"),
        "db_cpu_ms_per_run": median("db_cpu_ms_per_run"),
        "wall_s": median("wall_s"),
        "rss_mb_start": round(statistics.median([r["rss_mb"]["start"] for r in rounds]), 1),
        "rss_mb_end": round(statistics.median([r["rss_mb"]["end"] for r in rounds]), 1),
        "other_cpu_s_max": max(r["cpu"]["other_s"] for r in rounds),
    }


def print_round(number: int, p: dict[str, Any]) -> None:
    line = (
        f"  round {number}  pgqueuer  {p['runs_per_s']:>7.1f} runs/s  {p['completed']} runs "
        f"{p['steps']} steps in {p['span_s']:.2f}s (run() {p['wall_s']:.2f}s)  "
        f"worker CPU {p['worker_cpu_ms_per_run']:.2f} ms/run "
        f"{p['worker_cpu_ms_per_step']:.2f} ms/step  RSS {p['rss_mb']['start']}->"
        f"{p['rss_mb']['end']} MB  db CPU {p['db_cpu_ms_per_run']:.2f} ms/run  "
        f"other {p['cpu']['other_s']}s  in flight <= {p['max_in_flight']}"
    )
    if not p["quiet"]["quiet"]:
        line += f"  (started while others used {p['quiet']['other_cpus']} CPU)"
    print(line, flush=True)


def print_summary(record: dict[str, Any]) -> None:
    info, s = record["machine"], record["summary"]["pgqueuer"]
    k, v = record["peer"]["knobs"], record["peer"]
    print(
        f"\n{info['db_version']}, {info['nproc']} CPUs, load {info['loadavg_start']} -> "
        f"{info['loadavg_end']}; pgqueuer {v['versions']['pgqueuer']} asyncpg "
        f"{v['versions']['asyncpg']}, label {record['label']}"
    )
    gate = (
        f"max_concurrent_tasks {k['max_concurrent_tasks']}"
        if k["max_concurrent_tasks"]
        else f"entrypoint concurrency_limit {k['entrypoint_concurrency_limit']}"
    )
    print(
        f"{record['args']['runs']} jobs of 3 emulated steps; one QueueManager ({gate}, "
        f"batch_size {k['batch_size']}, {k['driver']}, {k['loop']}), step pool "
        f"{k['step_pool']}; medians of {len(record['rounds'])} round(s)"
    )
    print(
        f"pgqueuer-emulated: {s['runs_per_s']} runs/s  worker CPU "
        f"{s['worker_cpu_ms_per_run']} ms/run ({s['worker_cpu_ms_per_step']} ms/step)  "
        f"db CPU {s['db_cpu_ms_per_run']} ms/run  RSS {s['rss_mb_start']}->{s['rss_mb_end']} MB"
        f"  other {s['other_cpu_s_max']}s"
    )
    problems = record["worker_problems"]
    print(f"pgqueuer log lines at WARNING or above: {len(problems)}")
    for line in problems[:10]:
        print(f"  {line}")


# -- main ----------------------------------------------------------------------------------


def install_interrupts() -> None:
    """SIGTERM and SIGINT reach ``finally`` (the database is dropped)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_interrupts()
    problems = Problems()
    logging.getLogger("pgqueuer").addHandler(problems)
    machine = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "db_version": database_version(args),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    dbname = create_database(args)
    rounds: list[dict[str, Any]] = []
    try:
        run_loop(args, install(args, dbname))
        for number in range(1, args.repeat + 1):
            phase = measured_round(args, dbname, number, problems)
            rounds.append(phase)
            print_round(number, phase)
    finally:
        drop_database(args, dbname)
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    record = {
        "kind": "peer",
        "db": "postgres",
        "label": args.label,
        "args": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "password"
        },
        "machine": machine,
        "peer": {
            "name": "pgqueuer",
            "versions": versions(),
            "knobs": knobs(args),
            "steps": "emulated: 3 autocommit INSERTs into a table shaped like everystep_step",
        },
        "source": source_info(),
        "rounds": [[phase] for phase in rounds],
        "summary": {"pgqueuer": summarise(rounds)},
        "worker_problems": problems.lines,
    }
    print_summary(record)
    if args.json:
        with open(args.results, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        print(f"appended to {args.results}")
    incomplete = [
        r
        for r in rounds
        if r["completed"] != args.runs or r["steps"] != 3 * args.runs or r["wrong_results"]
    ]
    return 1 if incomplete else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # the database is dropped by then
        print(f"interrupted ({exc}); nothing recorded", file=sys.stderr)
        sys.exit(130)
