"""Statements per run, per executed step and per idle second: counted inside the process
and, where the database allows, at the database.

    .venv/bin/python bench/statements.py --db postgres|mariadb|sqlite [--runs 200] [--pool 8]
        [--conn-max-age settings|0|600|none ...] [--idle-seconds 20] [--anatomy-runs 20]
        [--source PATH] [--label NAME] [--pg-log PATH]

Three measurements on a fresh database of its own (dropped at the end):

A. **One run at a time** (deterministic): an embedded ``everystep.worker.Worker`` with
   ``pool_size=1`` on a thread of this process claims and executes ``--anatomy-runs`` runs
   of ``bench_one`` (1 step), then of ``bench_three`` (3 steps), one claim per run, minus
   the same worker with nothing due (start-up, the empty claim, the drain). Per executed
   step = (three - one) / 2; per run besides steps = three - 3 x per step. Also prints
   every statement of one worker life with one ``bench_three`` run, in order.
B. **One worker process** (``manage.py everystep_worker --pool N --poll 0.05``), ``--runs``
   runs of ``bench_three``: everything the worker sent from just before scheduling until
   the last run completed (its claims and polls, passes and heartbeats), per run;
   once per ``--conn-max-age`` value.
C. **Idle**: a worker with the default flags (pool 4, poll 0.2 s, heartbeat 5 s) and nothing
   to do, over ``--idle-seconds``: statements per second.

Counted in the process by ``everystep_bench/counting.py`` (Django's cursors and
connections patched at class level, every thread; a worker subprocess reports on
``SIGUSR1``). Counted at the database:

- PostgreSQL: ``ALTER DATABASE … SET log_statement = 'all'`` on the benchmark database,
  then the server log's lines for that database, this process's own session left out
  (every statement the server executed, ``BEGIN``/``COMMIT``, health checks and
  connection set-up included; transactions derived per session). Needs the server log
  readable (``--pg-log``; found under ``/var/log/postgresql`` by default) and a superuser.
- MariaDB: ``SHOW GLOBAL STATUS`` deltas (``Questions``, ``Com_*``, ``Connections``) minus
  what this process sent itself. Server-wide: other clients of the server count too, so
  run it on a quiet server (``COM_PING`` health checks are not in ``Questions``).
- SQLite: nothing at the database; in-process only.

Prints a report and appends one JSON line to ``bench/results/statements.jsonl``. The
counting at the database is in ``statements_db.py``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from everystep_bench import counting
from harness import options, runs, server
from harness.cpu import wait_quiet
from harness.results import print_header, print_problems
from harness.session import Session, run_benchmark
from harness.workers import WorkerProcess, Workers
from statements_db import BENCH_GROUP, DatabaseSide, database_side

ANATOMY_RUNNER = "bench-anatomy"
HEARTBEAT = 5.0  # EVERYSTEP_HEARTBEAT's default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--runs", type=int, default=200, help="worker runs for B (200)")
    parser.add_argument("--anatomy-runs", type=int, default=20, help="runs per workflow, A (20)")
    parser.add_argument("--pool", type=int, default=8, help="worker --pool for B (8)")
    parser.add_argument("--poll", type=float, default=0.05, help="worker --poll for B (0.05)")
    options.add_conn_max_age_argument(parser)
    parser.add_argument("--idle-seconds", type=float, default=20, help="C's window (20)")
    parser.add_argument("--pg-log", type=Path, default=None, help="PostgreSQL server log")
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    options.check_conn_max_age(parser, args.conn_max_age)
    if min(args.runs, args.anatomy_runs, args.pool) < 1 or args.idle_seconds <= 0:
        parser.error("--runs, --anatomy-runs, --pool and --idle-seconds must be positive")
    return args


# -- A: one pass, in process ----------------------------------------------------------------


def counted_worker(side: DatabaseSide, *, trace: bool = False) -> dict[str, Any]:
    """An embedded ``Worker(pool_size=1)`` on a thread of this process, until nothing is
    due: every run is claimed alone and executed on the pool thread, as in a worker
    process. Counted in process (every thread but this main one, which only waits) and
    at the database; a long poll, no NOTIFY and no heartbeat beyond the first keep the
    count deterministic."""
    from django.db import connection

    from everystep.worker import Worker

    worker = Worker(
        pool_size=1,
        poll=5.0,
        name=ANATOMY_RUNNER,
        notify=False,
        heartbeat=3600.0,
        orphan_timeout=0,
    )
    mark, before = side.mark(), counting.snapshot()
    if trace:
        counting.start_trace()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="everystep-loop-anatomy", daemon=True)
    thread.start()
    try:
        if not worker.ready.wait(60):
            raise TimeoutError("the embedded worker did not start")
        runs.wait_for(lambda: runs.pending_runs() == 0, 600, 0.05)
        time.sleep(0.5)  # the claim that finds nothing left, after the last run
    finally:
        worker.stop()
        thread.join(60)
    steps = counting.stop_trace() if trace else []
    counts = counting.delta(counting.snapshot(), before)
    if errors:
        raise errors[0]
    mine = Counter(counting.by_kind(counts))
    mine.subtract(counting.by_kind(counts, BENCH_GROUP))  # this thread: waiting for the runs
    return {
        "in_process": counting.round_trips(mine, connection.vendor),
        "kinds": {k: v for k, v in mine.items() if v},
        "db": side.since(mark, counts),
        "trace": [(group, kind, sql) for group, kind, sql in steps if group != BENCH_GROUP],
    }


def per_run(full: dict[str, Any], base: dict[str, Any], runs: int) -> dict[str, Any]:
    def divide(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, float] | None:
        if a is None or b is None:
            return None
        keys = [k for k, v in a.items() if isinstance(v, int | float)]
        return {k: round((a[k] - b.get(k, 0)) / runs, 2) for k in keys}

    return {
        "in_process": divide(full["in_process"], base["in_process"]),
        "db": divide(full["db"], base["db"]),
    }


def measure_anatomy(args: argparse.Namespace, side: DatabaseSide) -> dict[str, Any]:
    from everystep_bench.workflows import bench_one, bench_three

    results: dict[str, Any] = {}
    for name, workflow in (("bench_one", bench_one), ("bench_three", bench_three)):
        runs.clear_runs()
        base = counted_worker(side)
        runs.schedule_runs(workflow, args.anatomy_runs)
        full = counted_worker(side)
        results[name] = per_run(full, base, args.anatomy_runs)
    runs.clear_runs()
    runs.schedule_runs(bench_three, 1)
    one = counted_worker(side, trace=True)
    results["trace_one_bench_three"] = one["trace"]
    results["split"] = {
        where: split(results["bench_one"][where], results["bench_three"][where])
        for where in ("in_process", "db")
    }
    return results


def split(one: dict[str, float] | None, three: dict[str, float] | None) -> dict[str, float] | None:
    """Per executed step and per run besides steps, from the 1-step and 3-step runs."""
    if one is None or three is None:
        return None
    key = "total" if "total" in three else "statements"
    step = (three[key] - one[key]) / 2
    out = {"per_step": round(step, 2), "per_run_besides_steps": round(three[key] - 3 * step, 2)}
    if "transactions" in three:
        tx_step = (three["transactions"] - one["transactions"]) / 2
        out["transactions_per_step"] = round(tx_step, 2)
        out["transactions_besides_steps"] = round(three["transactions"] - 3 * tx_step, 2)
    return out


# -- B and C: a worker process ----------------------------------------------------------------


def worker_window(
    worker: WorkerProcess,
    count_file: Path,
    side: DatabaseSide,
    during: Callable[[], None],
) -> dict[str, Any]:
    """What ``worker`` sent while ``during()`` ran, in the worker and at the database."""
    from django.db import connection

    first = counting.request_snapshot(worker.pid, count_file)
    mark, own = side.mark(), counting.snapshot()
    during()
    last = counting.request_snapshot(worker.pid, count_file)
    db = side.since(mark, counting.delta(counting.snapshot(), own))
    counts = counting.delta(last, first)
    groups = sorted({key.split(":", 1)[0] for key in counts})
    return {
        "in_process": counting.round_trips(counting.by_kind(counts), connection.vendor),
        "by_group": {
            g: counting.round_trips(counting.by_kind(counts, g), connection.vendor) for g in groups
        },
        "kinds": dict(counting.by_kind(counts)),
        "db": db,
    }


def scale(window: dict[str, Any], divisor: float, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Counts divided by ``divisor`` (runs or seconds), but the ``keep`` ones."""

    def divide(d: dict[str, Any] | None) -> dict[str, Any] | None:
        if d is None:
            return None
        return {
            k: v if k in keep else round(v / divisor, 2)
            for k, v in d.items()
            if isinstance(v, int | float)
        }

    return {
        "in_process": divide(window["in_process"]),
        "by_group": {g: divide(v) for g, v in window["by_group"].items()},
        "db": divide(window["db"]),
        "db_kinds": divide(window["db"]["kinds"]) if window["db"] else None,
        "kinds": divide(window["kinds"]),
    }


def measure_worker(
    args: argparse.Namespace,
    workers: Workers,
    side: DatabaseSide,
    scratch: Path,
    conn_max_age: str,
) -> dict[str, Any]:
    from everystep_bench.workflows import bench_three

    runs.clear_runs()
    quiet = wait_quiet(args.wait_quiet)
    count_file = scratch / f"counts-cma{conn_max_age}.json"
    env = {
        "EVERYSTEP_BENCH_COUNT_FILE": str(count_file),
        **options.conn_max_age_env(conn_max_age),
    }
    name = f"statements-cma{conn_max_age}"
    worker = workers.start(name, "--pool", str(args.pool), "--poll", str(args.poll), env=env)
    worker.wait_ready()

    def execute() -> None:
        runs.schedule_runs(bench_three, args.runs)
        runs.wait_for(lambda: runs.pending_runs() == 0, 600, 0.1, worker.check_alive)

    window = worker_window(worker, count_file, side, execute)
    exit_code = worker.terminate()
    span = runs.finished_span()
    return {
        "conn_max_age": conn_max_age,
        "runs": args.runs,
        "completed": span["completed"],
        "steps": span["steps"],
        "per_run": scale(window, max(span["completed"], 1)),
        "exit_code": exit_code,
        "quiet": quiet,
    }


def measure_idle(
    args: argparse.Namespace, workers: Workers, side: DatabaseSide, scratch: Path
) -> dict[str, Any]:
    runs.clear_runs()
    quiet = wait_quiet(args.wait_quiet)
    count_file = scratch / "counts-idle.json"
    worker = workers.start("statements-idle", env={"EVERYSTEP_BENCH_COUNT_FILE": str(count_file)})
    worker.wait_ready()
    time.sleep(HEARTBEAT + 1.0)  # the heartbeat thread's first beat opens its connection
    window = worker_window(worker, count_file, side, lambda: time.sleep(args.idle_seconds))
    exit_code = worker.terminate()
    return {
        "flags": "defaults (pool 4, poll 0.2, heartbeat 5, NOTIFY on PostgreSQL)",
        "seconds": args.idle_seconds,
        "per_second": scale(window, args.idle_seconds, keep=("sessions_seen",)),
        "exit_code": exit_code,
        "quiet": quiet,
    }


# -- report ------------------------------------------------------------------------------------


def fmt(d: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    if d is None:
        return "n/a"
    return ", ".join(f"{k} {d[k]:g}" for k in keys if d.get(k))


IN_KEYS = ("total", "sql", "tx", "other", "connects")
DB_KEYS = ("statements", "transactions", "sessions_seen", "connections")


def print_report(record: dict[str, Any]) -> None:
    a = record["anatomy"]
    print_header(record)
    print(f"counted at the database: {record['db_side']}")
    print("\nA. embedded Worker(pool_size=1), one run claimed at a time, per run:")
    for name in ("bench_one", "bench_three"):
        print(f"  {name:<12} in process: {fmt(a[name]['in_process'], IN_KEYS)}")
        print(f"  {'':<12} at the db:  {fmt(a[name]['db'], DB_KEYS)}")
    for where in ("in_process", "db"):
        s = a["split"][where]
        if s:
            extra = ""
            if "transactions_per_step" in s:
                extra = (
                    f"; transactions {s['transactions_per_step']:g} per step, "
                    f"{s['transactions_besides_steps']:g} per run besides steps"
                )
            print(
                f"  => {where.replace('_', ' ')}: {s['per_step']:g} per executed step, "
                f"{s['per_run_besides_steps']:g} per run besides steps{extra}"
            )
    print(
        "  a worker's life with one bench_three run, in order (start-up, run, empty claim, drain):"
    )
    for number, (group, kind, sql) in enumerate(a["trace_one_bench_three"], start=1):
        print(f"    {number:>2} {group:<9} {kind:<15} {sql[:100]}")
    for b in record["worker"]:
        p = b["per_run"]
        print(
            f"\nB. one worker --pool {record['args']['pool']} --poll {record['args']['poll']}, "
            f"CONN_MAX_AGE {b['conn_max_age']}, {b['completed']}/{b['runs']} runs, per run:"
        )
        print_counts(p)
    c = record["idle"]["per_second"]
    print(
        f"\nC. idle worker, {record['idle']['flags']}, {record['idle']['seconds']:g} s, per second:"
    )
    print_counts(c)
    print()
    print_problems(record)


def print_counts(counts: dict[str, Any]) -> None:
    """One worker's statements, in the worker by thread group and at the database."""
    print(f"  in the worker: {fmt(counts['in_process'], IN_KEYS)}")
    for group, values in counts["by_group"].items():
        print(f"    {group:<10} {fmt(values, IN_KEYS)}")
    print(f"  at the db: {fmt(counts['db'], DB_KEYS)}")
    if counts["db_kinds"]:
        print(f"    by kind: {fmt(counts['db_kinds'], tuple(counts['db_kinds']))}")


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    """A, B once per ``--conn-max-age`` value, then C; each measured again if the
    server restarted meanwhile."""
    counting.install()
    counting.set_main_group(BENCH_GROUP)
    side = database_side(args.db, args.pg_log)

    def again(label: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return server.attempts(label, measure, run.workers.kill_all, side.attach)

    def measure_b(conn_max_age: str) -> Callable[[], dict[str, Any]]:
        return lambda: measure_worker(args, run.workers, side, run.scratch, conn_max_age)

    return {
        "db_side": side.note,
        "anatomy": again("A", lambda: measure_anatomy(args, side)),
        "worker": [again(f"B cma={c}", measure_b(c)) for c in args.conn_max_age],
        "idle": again("C", lambda: measure_idle(args, run.workers, side, run.scratch)),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("statements", args, lambda run: benchmark(args, run), print_report)


if __name__ == "__main__":
    sys.exit(main())
