"""Django ``@task`` on everystep's backend beside django-tasks-db's ``db_worker``, in one
run on this machine (issue 35).

Run it with the venv that ``bench/peers/setup-django-tasks.sh`` makes::

    bash bench/peers/setup-django-tasks.sh
    /tmp/tasks-bench-venv/bin/python bench/peers/django_tasks.py [--tasks 2000]
        [--concurrency 4] [--samples 30] [--results DIR] [--label NAME]

It makes a PostgreSQL database of its own (``tasks_bench_<hex>``, dropped at the end),
migrates the project in ``bench/peers/django_tasks_project`` (both backends in one
``TASKS``) and measures three kinds of task, each on a clean table:

- ``everystep-plain``: ``@task`` returning ``i + 1``, on everystep's backend;
- ``everystep-step``: the same, calling one ``@step`` first (recorded, durable);
- ``db-plain``: ``@task`` returning ``i + 1``, on django-tasks-db's backend.

For each: **enqueue** — ``--tasks`` calls of ``.enqueue(i)`` in this process, each in its
own transaction (autocommit), tasks/s; **execution** — workers started with the tasks
already waiting, tasks/s from the rows (first ``started_at`` to last ``finished_at``, so
start-up is left out). Concurrency is equal: one ``everystep_worker --pool C`` against
``C`` ``db_worker`` processes (a ``db_worker`` runs one task at a time). Then
**pickup**: with the workers idle, ``--samples`` tasks enqueued one at a time at random
moments; the delay from the row's enqueue time to its start time, median and p95. Both
workers run with their defaults: everystep's poll of 1 s woken at once by NOTIFY on
PostgreSQL, django-tasks-db's ``--interval 1`` polling (and its random start-up delay of
up to 1 s, outside the measured span).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "django_tasks_project"
ROOT = HERE.parents[1]
KINDS = ("everystep-plain", "everystep-step", "db-plain")


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per kind")
    parser.add_argument("--concurrency", type=int, default=4, help="tasks in flight")
    parser.add_argument("--samples", type=int, default=30, help="pickup samples per backend")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--label", default="tasks")
    return parser.parse_args()


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(sql)


def manage(*args: str) -> list[str]:
    return [sys.executable, str(PROJECT / "manage.py"), *args]


def start_workers(kind: str, concurrency: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    if kind.startswith("everystep"):
        commands = [manage("everystep_worker", "--pool", str(concurrency), "--name", "bench")]
    else:
        commands = [manage("db_worker", "--backend", "db") for _ in range(concurrency)]
    procs = []
    for n, command in enumerate(commands):
        log = open(logs / f"{kind}-{n}.log", "wb")  # noqa: SIM115 (the child holds it)
        procs.append(subprocess.Popen(command, cwd=PROJECT, stdout=log, stderr=log))
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def task_of(kind: str) -> Any:
    from bench_tasks import tasks

    return {
        "everystep-plain": tasks.everystep_plain,
        "everystep-step": tasks.everystep_step,
        "db-plain": tasks.db_plain,
    }[kind]


def rows(kind: str) -> tuple[str, str, str, str]:
    """The table, its enqueue/start/finish columns, for ``kind``'s backend."""
    if kind.startswith("everystep"):
        return "everystep_workflow", "created_at", "started_at", "completed_at"
    return "django_tasks_database_dbtaskresult", "enqueued_at", "started_at", "finished_at"


def clean() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE everystep_workflow CASCADE")
        cursor.execute("TRUNCATE django_tasks_database_dbtaskresult")
        cursor.execute("VACUUM ANALYZE")


def finished(kind: str) -> tuple[int, float]:
    """How many tasks finished, and the span from the first start to the last finish."""
    from django.db import connection

    table, _, started, ended = rows(kind)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count({ended}), extract(epoch from max({ended}) - min({started})) "
            f"FROM {table} WHERE {ended} IS NOT NULL"
        )
        count, span = cursor.fetchone()
    return int(count), float(span or 0.0)


def throughput(kind: str, args: argparse.Namespace, logs: Path) -> dict[str, float]:
    clean()
    task = task_of(kind)
    began = time.perf_counter()
    for i in range(args.tasks):
        task.enqueue(i)
    enqueue_s = time.perf_counter() - began
    procs = start_workers(kind, args.concurrency, logs)
    try:
        deadline = time.monotonic() + 600
        while finished(kind)[0] < args.tasks:
            if time.monotonic() > deadline:
                raise SystemExit(f"{kind}: not finished after 600 s (logs in {logs})")
            time.sleep(0.2)
    finally:
        stop(procs)
    count, span = finished(kind)
    return {
        "enqueue_per_s": round(args.tasks / enqueue_s, 1),
        "execute_per_s": round(count / span, 1) if span else 0.0,
    }


def pickup(kind: str, args: argparse.Namespace, logs: Path) -> dict[str, float]:
    from django.db import connection

    clean()
    task = task_of(kind)
    table, enqueued, started, _ = rows(kind)
    procs = start_workers(kind, args.concurrency, logs)
    delays = []
    try:
        time.sleep(3)  # past django-tasks-db's random start-up delay, workers idle
        for _ in range(args.samples):
            time.sleep(random.uniform(0.2, 1.2))  # any phase of a poll
            result = task.enqueue(0)
            deadline = time.monotonic() + 30
            while True:
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT extract(epoch from {started} - {enqueued}) FROM {table} "
                        f"WHERE id = %s AND {started} IS NOT NULL",
                        [uuid.UUID(str(result.id))],
                    )
                    row = cursor.fetchone()
                if row is not None:
                    delays.append(float(row[0]) * 1000)
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{kind}: a task not started after 30 s (logs in {logs})")
                time.sleep(0.005)
    finally:
        stop(procs)
    delays.sort()
    return {
        "pickup_median_ms": round(statistics.median(delays), 1),
        "pickup_p95_ms": round(delays[max(0, round(0.95 * len(delays)) - 1)], 1),
    }


def main() -> None:
    args = options()
    name = f"tasks_bench_{uuid.uuid4().hex[:12]}"
    os.environ["BENCH_DB"] = name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    sys.path.insert(0, str(PROJECT))
    logs = Path(f"/tmp/{name}-logs")
    logs.mkdir()
    admin(f'CREATE DATABASE "{name}"')
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        figures: dict[str, dict[str, float]] = {}
        for kind in KINDS:
            figures[kind] = throughput(kind, args, logs)
            print(kind, figures[kind], flush=True)
        for kind in ("everystep-plain", "db-plain"):
            figures[kind] |= pickup(kind, args, logs)
            print(kind, figures[kind], flush=True)
        report(args, figures)
    finally:
        from django.db import connections

        connections.close_all()
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(args: argparse.Namespace, figures: dict[str, dict[str, float]]) -> None:
    from importlib.metadata import version

    es, db = figures["everystep-plain"], figures["db-plain"]
    ratios = {
        "enqueue": round(es["enqueue_per_s"] / db["enqueue_per_s"], 2),
        "execute": round(es["execute_per_s"] / db["execute_per_s"], 2),
        "execute_with_a_step": round(
            figures["everystep-step"]["execute_per_s"] / db["execute_per_s"], 2
        ),
        "pickup_median": round(db["pickup_median_ms"] / es["pickup_median_ms"], 1),
    }
    print("everystep / django-tasks-db:", ratios)
    record = {
        "kind": "tasks",
        "label": args.label,
        "db": "postgres",
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "versions": {name: version(name) for name in ("Django", "django-tasks-db")},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nproc": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "figures": figures,
        "ratios": ratios,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    with open(args.results / "tasks.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
