"""Throughput with 1, 2, 4, 8 … worker processes, what they cost the database, and where
it stops scaling.

    .venv/bin/python bench/scaling.py --db postgres|mariadb|sqlite [--pgbouncer]
        [--workers 1 2 4 8] [--runs 1000] [--pool 8] [--repeat 1] [--skip-raw]
        [--idle-seconds 10] [--source PATH] [--label NAME]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end), for
each ``--workers`` value N, the phases of ``compare.py`` (``harness/phases.py``; each
waiting for a quiet machine):

- **raw limit** on N x ``--pool`` threads (the same total concurrency), unless
  ``--skip-raw``; always straight to the database;
- **everystep**: N ``manage.py everystep_worker --pool 8 --poll 0.05`` processes (names
  of their own), started and idle, then ``--runs`` runs of ``bench_three`` scheduled in
  one transaction; throughput from the rows. Meanwhile ``scaling_contention.py`` records lock
  waits (PostgreSQL: sampled; MariaDB: InnoDB's row-lock counters) and, through
  PgBouncer, clients waiting for a server connection;
- **idle**: N workers with the default poll interval, started and left idle for
  ``--idle-seconds``: statements (transactions) per second at the database.

``--pgbouncer`` (PostgreSQL): the workers connect through PgBouncer in transaction mode
on ``--pgbouncer-port`` (start it first: ``PGBOUNCER_POOL_SIZE=20 .ci/pgbouncer
start``), with LISTEN over a direct alias (``everystep_bench/pooled_settings.py``); the
database CPU then includes PgBouncer's.

``--repeat`` rounds; every other round takes the worker counts in reverse order. Per N
it prints runs/s (everystep and raw, medians), the workers' CPU per run (all workers
together), the database server's CPU per run, the CPUs in use over the phase (busy CPU
seconds / wall seconds: the whole machine, the workers, the database server), the waits
per run and the idle statements/s. Appends one JSON line to
``bench/results/scaling.jsonl``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from typing import Any

import scaling_contention as contention
from harness import cpu, options, server
from harness.phases import everystep_phase, print_phase, raw_phase
from harness.results import print_header, print_problems
from harness.session import Session, run_benchmark
from harness.workers import Workers

POOLED_SETTINGS = "everystep_bench.pooled_settings"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    options.add_phase_arguments(parser, runs=1000, workers=[1, 2, 4, 8])
    parser.add_argument("--repeat", type=int, default=1, help="rounds (1)")
    parser.add_argument("--skip-raw", action="store_true", help="no raw-limit phases")
    parser.add_argument(
        "--idle-seconds", type=float, default=10, help="idle-load window per N (10; 0: none)"
    )
    parser.add_argument(
        "--pgbouncer", action="store_true", help="workers through PgBouncer (PostgreSQL)"
    )
    parser.add_argument("--pgbouncer-port", type=int, default=6432, help="(6432)")
    args = parser.parse_args(argv)
    options.check_phase_arguments(parser, args)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.pgbouncer and args.db != "postgres":
        parser.error("--pgbouncer needs --db postgres")
    return args


def use_pgbouncer(args: argparse.Namespace) -> None:
    """Workers (and only they) through PgBouncer (the pooled settings send this
    process's connection straight to the server); its CPU counted with the database's."""
    os.environ["EVERYSTEP_TEST_PGBOUNCER_PORT"] = str(args.pgbouncer_port)
    args.settings_module = POOLED_SETTINGS
    cpu.DB_SERVER_COMMANDS["postgres"] = {"postgres", "pgbouncer"}


def setup_name(args: argparse.Namespace) -> str:
    return "pgbouncer" if args.pgbouncer else args.db


def cpus_in_use(phase: dict[str, Any]) -> dict[str, float]:
    """Busy CPUs over the phase: the machine, the workers (or the raw client, which is
    this process), the database server, and everything else."""
    spent = phase["cpu"]
    wall = max(spent["wall_s"], 1e-9)
    client = spent["worker_s"] if phase["phase"] == "everystep" else spent["bench_s"]
    return {
        "machine": round(spent["machine_s"] / wall, 2),
        "client": round(client / wall, 2),
        "db_server": round(spent["db_server_s"] / wall, 2),
        "other": round(spent["other_s"] / wall, 2),
    }


def measure(args: argparse.Namespace, workers: Workers, fleet: int, round_no: int) -> Any:
    """The phases for ``fleet`` workers: raw limit, then everystep."""
    phase_args = argparse.Namespace(**{**vars(args), "workers": fleet})
    phases = []
    if not args.skip_raw:
        raw = server.attempts(f"raw x{fleet}", lambda: raw_phase(phase_args), workers.kill_all)
        raw["workers"], raw["cpus"] = fleet, cpus_in_use(raw)
        print_phase(round_no, raw, f"{fleet * args.pool} threads")
        phases.append(raw)
    name = f"scaling-{round_no}-x{fleet}"
    mine = server.attempts(name, lambda: waited_phase(phase_args, workers, name), workers.kill_all)
    mine["cpus"] = cpus_in_use(mine)
    print_phase(round_no, mine)
    print(f"    waits {mine['waits']}", flush=True)
    phases.append(mine)
    if args.idle_seconds > 0:
        idle = contention.idle_load(args, workers, fleet, f"{name}-idle", args.idle_seconds)
        print(f"    idle x{fleet}: {idle['per_s']} per second", flush=True)
        phases.append({"phase": "idle", **idle})
    return phases


def waited_phase(args: argparse.Namespace, workers: Workers, name: str) -> Any:
    """``phases.everystep_phase`` with the waits recorded over it."""
    port = args.pgbouncer_port if args.pgbouncer else None
    with contention.WaitSampler(args.db, port) as waits:
        phase = everystep_phase(args, workers, name, options.SETTINGS_VALUE)
    phase["waits"] = waits.result
    return phase


def summarise(args: argparse.Namespace, phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3) if values else float("nan")

    rows = []
    for fleet in args.workers:
        mine = [p for p in phases if p["phase"] == "everystep" and p["workers"] == fleet]
        raws = [p for p in phases if p["phase"] == "raw" and p["workers"] == fleet]
        idles = [p for p in phases if p["phase"] == "idle" and p["workers"] == fleet]
        row: dict[str, Any] = {
            "workers": fleet,
            "slots": fleet * args.pool,
            "runs_per_s": median([p["runs_per_s"] for p in mine]),
            "raw_runs_per_s": median([p["runs_per_s"] for p in raws]),
            "worker_cpu_ms_per_run": median([p["worker_cpu_ms_per_run"] for p in mine]),
            "db_cpu_ms_per_run": median([p["db_cpu_ms_per_run"] for p in mine]),
            "raw_db_cpu_ms_per_run": median([p["db_cpu_ms_per_run"] for p in raws]),
        }
        for key in ("machine", "client", "db_server", "other"):
            row[f"cpus_{key}"] = median([p["cpus"][key] for p in mine])
            row[f"raw_cpus_{key}"] = median([p["cpus"][key] for p in raws])
        for key in ("lock_wait_s", "row_lock_waits", "row_lock_ms", "pool_wait_s"):
            per_run = [
                1000 * p["waits"][key] / max(p["completed"], 1) for p in mine if key in p["waits"]
            ]
            if per_run:
                row[f"{key.removesuffix('_s')}_per_run"] = median(per_run)
        for key in ("transactions", "Questions", "Com_select"):
            rates = [p["per_s"][key] for p in idles if key in p["per_s"]]
            if rates:
                row[f"idle_{key.lower()}_per_s"] = median(rates)
        rows.append(row)
    return rows


# The table's optional columns: (row key, heading); a column shows when a row has it.
WAIT_COLUMNS = (
    ("lock_wait_per_run", "lock wait ms/run (sampled)"),
    ("row_lock_waits_per_run", "row lock waits /1000 runs"),
    ("row_lock_ms_per_run", "row lock µs/run"),
    ("pool_wait_per_run", "pool wait ms/run (sampled)"),
    ("idle_transactions_per_s", "idle transactions/s"),
    ("idle_questions_per_s", "idle Questions/s (server)"),
    ("idle_com_select_per_s", "idle SELECTs/s (server)"),
)


def print_summary(record: dict[str, Any]) -> None:
    args, rows = record["args"], record["rows"]
    print_header(record)
    print(
        f"{record['setup']}: {args['runs']} runs of bench_three per phase, workers --pool "
        f"{args['pool']} --poll {args['poll']}; raw limit on workers x pool threads; medians "
        f"of {args['repeat']} round(s); CPUs = busy CPU seconds / wall seconds of the phase; "
        f"idle: {args['idle_seconds']} s, default poll\n"
    )
    extra = [(key, head) for key, head in WAIT_COLUMNS if any(key in row for row in rows)]
    head = ["workers", "runs/s", "x 1 worker", "raw runs/s", "worker CPU ms/run"]
    head += ["DB CPU ms/run", "CPUs: all / workers / db", *(h for _, h in extra)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    first = rows[0]["runs_per_s"] if rows else float("nan")
    for row in rows:
        cells = [
            row["workers"],
            row["runs_per_s"],
            f"{row['runs_per_s'] / first:.2f}",
            "—" if math.isnan(row["raw_runs_per_s"]) else row["raw_runs_per_s"],
            row["worker_cpu_ms_per_run"],
            row["db_cpu_ms_per_run"],
            f"{row['cpus_machine']} / {row['cpus_client']} / {row['cpus_db_server']}",
            *(row.get(key, "") for key, _ in extra),
        ]
        print("| " + " | ".join(map(str, cells)) + " |")
    print_problems(record)


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    phases: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = args.workers if index % 2 == 0 else list(reversed(args.workers))
        for fleet in order:
            phases += measure(args, run.workers, fleet, index + 1)
    setup: dict[str, Any] = {"setup": setup_name(args)}
    if args.pgbouncer:
        setup["pgbouncer"] = contention.pgbouncer_config(args.pgbouncer_port)
    return {**setup, "phases": phases, "rows": summarise(args, phases)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pgbouncer:
        use_pgbouncer(args)
    return run_benchmark("scaling", args, lambda run: benchmark(args, run), print_summary)


if __name__ == "__main__":
    sys.exit(main())
