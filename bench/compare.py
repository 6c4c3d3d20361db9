"""everystep against the raw-SQL limit, measured in the same invocation.

    .venv/bin/python bench/compare.py --db postgres|mariadb|sqlite [--runs 500] [--pool 8]
        [--workers 1] [--conn-max-age settings|0|600|none ...] [--repeat 3] [--profile]
        [--source PATH] [--label NAME] [--skip-raw] [--keep-logs] [--sleeping N]

Each round, on a fresh database of its own (``everystep_test_bench_…``, dropped at the end):

- **raw limit**: ``--runs`` runs of ``everystep_bench.workflows.bench_three`` (3 tiny steps)
  are scheduled, then claimed and executed with the bare driver on ``--pool`` threads
  (``raw_limit.py``: claim, one INSERT per step, one UPDATE to finish);
- **everystep**: one ``manage.py everystep_worker --pool N --poll 0.05`` process of the
  ``--source`` tree, started and idle (start-up is not measured), then the same runs are
  scheduled in one transaction and the worker executes them; once per ``--conn-max-age``
  value (``EVERYSTEP_TEST_CONN_MAX_AGE``, read by ``everystep_bench/settings.py``;
  ``settings`` keeps the test settings' 300). ``--workers N``: N such processes with
  names of their own, and the raw limit on N x ``--pool`` threads (``scaling.py`` runs
  this for 1, 2, 3 workers).

Throughput for both is completed runs / (last ``completed_at`` - first ``started_at``),
from the rows. Per phase it also reports the worker's CPU per run and per executed step
(``/proc/<pid>/stat``), the database server's CPU per run, connections opened (PostgreSQL
``pg_stat_database.sessions``; MariaDB global ``Connections``), the worker's RSS at start
and end (and its maximum, sampled), and ``other_s``: busy CPU of everything else on the
machine, the disturbance indicator (rerun when it is more than a few tenths of a second).
Rounds alternate the phase order; the summary gives medians and the median of the
per-round ratios.

``--profile`` adds one everystep phase per ``--conn-max-age`` value with ``py-spy record
--gil`` attached to the worker (``.venv/bin/pip install py-spy``) and writes its top
entries to ``bench/profiles/<db>-<label>.txt`` (``<db>-<label>-cma<value>.txt`` when there
are several values); ``--repeat 0 --profile``: those phases alone.
``--sleeping 100000`` first inserts that many runs due only in a day (sleeping or waiting
runs), kept through every phase: the claim must not walk them.
``--runs 100000 --skip-raw --repeat 1`` is the long memory run (runs are scheduled 10,000
per INSERT). Every invocation appends one JSON line to ``bench/results.jsonl``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import profile_report

THREE_STEPS = 3
SETTINGS_VALUE = "settings"


def add_phase_arguments(
    parser: argparse.ArgumentParser, runs: int = 500, workers: list[int] | None = None
) -> None:
    """The options ``everystep_phase`` and ``raw_phase`` read, for every script that
    uses them (``history.py``, ``scaling.py``); ``workers``: ``--workers`` takes a list
    with this default (each phase then gets one of its values)."""
    parser.add_argument("--runs", type=int, default=runs, help=f"runs per phase ({runs})")
    parser.add_argument("--pool", type=int, default=8, help="worker --pool (8)")
    parser.add_argument("--poll", type=float, default=0.05, help="worker --poll (0.05)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+" if workers else None,
        default=workers or 1,
        help="worker processes per everystep phase, named apart; the raw limit runs "
        f"workers x pool threads ({' '.join(map(str, workers or [1]))})",
    )
    parser.add_argument("--raw-batch", type=int, default=1, help="runs per raw claim (1)")
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy samples/s (250)")
    harness.add_worker_phase_arguments(parser)


def check_phase_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    fleets = args.workers if isinstance(args.workers, list) else [args.workers]
    if min(args.runs, args.pool, *fleets, args.raw_batch) < 1:
        parser.error("--runs, --pool, --workers and --raw-batch must be at least 1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_arguments(parser)
    add_phase_arguments(parser)
    parser.add_argument(
        "--conn-max-age",
        nargs="+",
        default=[SETTINGS_VALUE],
        metavar="SECONDS",
        help="CONN_MAX_AGE values to run the worker with: integers, 'none' (unlimited) or "
        "'settings' (keep tests/settings.py's); several give one phase each (settings)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds (3); 0 with --profile: the profile only"
    )
    parser.add_argument("--skip-raw", action="store_true", help="no raw-limit phase")
    parser.add_argument("--profile", action="store_true", help="one extra phase under py-spy")
    parser.add_argument(
        "--sleeping",
        type=int,
        default=0,
        help="runs sleeping (due in a day) kept in the tables through every phase (0)",
    )
    args = parser.parse_args(argv)
    check_phase_arguments(parser, args)
    if args.repeat < 0:
        parser.error("--repeat must be at least 0")
    if args.repeat == 0 and not args.profile:
        parser.error("--repeat 0 only makes sense with --profile (the profiled phase alone)")
    for value in args.conn_max_age:
        if value not in (SETTINGS_VALUE, "none") and not value.isdigit():
            parser.error(f"--conn-max-age: {value!r} is not an integer, 'none' or 'settings'")
    return args


# -- database-side counters --------------------------------------------------------------


def db_connections_opened(db: str) -> int | None:
    """A counter of connections opened: this database's sessions on PostgreSQL (their
    statistics reach the server within about a second), the server's on MariaDB."""
    from django.db import connection

    with connection.cursor() as cursor:
        if db == "postgres":
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            )
            return int(cursor.fetchone()[0])
        if db == "mariadb":
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
            return int(cursor.fetchone()[1])
    return None


def tidy_tables(db: str, keep_before: uuid.UUID | None = None) -> None:
    """Empty the run tables (but for the runs with ids below ``keep_before``: a
    history); on PostgreSQL also vacuum them, so every phase starts with the same table
    state."""
    from django.db import connection

    harness.clear_runs(since=keep_before)
    if db == "postgres":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE everystep_workflow, everystep_step")


# -- phases ---------------------------------------------------------------------------------


def raw_phase(args: argparse.Namespace, keep_before: uuid.UUID | None = None) -> dict[str, Any]:
    from everystep_bench.workflows import bench_three
    from raw_limit import run_raw_limit

    tidy_tables(args.db, keep_before)
    harness.schedule_runs(bench_three, args.runs)
    quiet = harness.wait_quiet(args.wait_quiet)
    conns = db_connections_opened(args.db)
    meter = harness.CpuMeter(args.db)
    meter.begin()
    result = run_raw_limit(args.pool * args.workers, args.raw_batch)
    cpu = meter.end()
    time.sleep(1.1 if args.db == "postgres" else 0)  # session statistics reach the server
    opened = db_connections_opened(args.db)
    span = harness.finished_span()
    return {
        "phase": "raw",
        **span,
        "wall_s": result.wall_s,
        "claims": result.claims,
        "client_cpu_ms_per_run": round(1000 * result.cpu_s / max(result.runs, 1), 3),
        "db_cpu_ms_per_run": round(1000 * cpu["db_server_s"] / max(span["completed"], 1), 3),
        "connections_opened": None if conns is None or opened is None else opened - conns,
        "cpu": cpu,
        "quiet": quiet,
    }


def everystep_phase(
    args: argparse.Namespace,
    workers: harness.Workers,
    name: str,
    conn_max_age: str,
    profile_to: Path | None = None,
    keep_before: uuid.UUID | None = None,
) -> dict[str, Any]:
    """``args.workers`` worker processes (``name``, or ``name-w<i>`` for several) execute
    ``args.runs`` runs of ``bench_three``; runs with ids below ``keep_before`` (a
    history) stay in the tables and are not counted."""
    from everystep_bench.workflows import bench_three

    tidy_tables(args.db, keep_before)
    quiet = harness.wait_quiet(args.wait_quiet)
    env = {"EVERYSTEP_TEST_CONN_MAX_AGE": None if conn_max_age == SETTINGS_VALUE else conn_max_age}
    fleet = [
        workers.start(
            name if args.workers == 1 else f"{name}-w{number}",
            *("--pool", str(args.pool), "--poll", str(args.poll)),
            env=env,
        )
        for number in range(1, args.workers + 1)
    ]
    for worker in fleet:
        worker.wait_ready()
    spy = start_profiler(fleet[0].pid, profile_to, args.profile_rate) if profile_to else None
    rss = [[worker.rss_mb()] for worker in fleet]
    conns = db_connections_opened(args.db)
    split_before = fleet_cpu_split(fleet)
    since = harness.id_floor()
    harness.schedule_runs(bench_three, args.runs)
    meter = harness.CpuMeter(args.db)
    meter.begin()
    last_rss = time.monotonic()

    def alive() -> None:
        nonlocal last_rss
        for worker in fleet:
            worker.check_alive()
        if time.monotonic() - last_rss > 2:
            for samples, worker in zip(rss, fleet, strict=True):
                samples.append(worker.rss_mb())
            last_rss = time.monotonic()

    timeout = max(600.0, args.runs / 10)
    harness.wait_for(lambda: harness.pending_runs() == 0, timeout, 0.1, alive)
    split_now = fleet_cpu_split(fleet)
    user, system = split_now[0] - split_before[0], split_now[1] - split_before[1]
    worker_cpu = user + system
    cpu = meter.end()
    cpu["worker_s"] = round(worker_cpu, 3)
    cpu["worker_user_s"], cpu["worker_system_s"] = round(user, 3), round(system, 3)
    cpu["other_s"] = round(cpu["other_s"] - worker_cpu, 2)
    for samples, worker in zip(rss, fleet, strict=True):
        samples.append(worker.rss_mb())
    if spy is not None:
        stop_profiler(spy)
    time.sleep(1.1 if args.db == "postgres" else 0)
    opened = db_connections_opened(args.db)
    exit_codes = [worker.terminate() for worker in fleet]
    span = harness.finished_span(since)
    done = max(span["completed"], 1)
    return {
        "phase": "everystep",
        "conn_max_age": conn_max_age,
        "workers": args.workers,
        "profiled": profile_to is not None,
        **span,
        "worker_cpu_ms_per_run": round(1000 * worker_cpu / done, 3),
        "worker_cpu_ms_per_step": round(1000 * worker_cpu / max(span["steps"], 1), 3),
        "db_cpu_ms_per_run": round(1000 * cpu["db_server_s"] / done, 3),
        "connections_opened": None if conns is None or opened is None else opened - conns,
        # The largest worker's: the start, the end, the maximum sampled.
        "rss_mb": {
            "start": max(samples[0] for samples in rss),
            "end": max(samples[-1] for samples in rss),
            "max": max(max(samples) for samples in rss),
            "samples": len(rss[0]),
            # The first worker's at 0, 25, 50, 75 and 100 % of the samples: growth or not.
            "quartiles": [rss[0][round(q * (len(rss[0]) - 1) / 4)] for q in range(5)],
        },
        "cpu": cpu,
        "quiet": quiet,
        "exit_code": next((code for code in exit_codes if code != 0), 0),  # None: killed
    }


def fleet_cpu_split(fleet: list[harness.WorkerProcess]) -> tuple[float, float]:
    """(user, system) CPU seconds of the worker processes together."""
    splits = [harness.process_cpu_split(worker.pid) for worker in fleet]
    return sum(user for user, _ in splits), sum(system for _, system in splits)


def start_profiler(pid: int, output: Path, rate: int) -> subprocess.Popen[bytes]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    # --gil: only the thread holding the GIL is sampled, so the samples split the
    # worker's Python CPU time; threads waiting on the database (which py-spy would
    # otherwise often count as active) are left out.
    command += ["--output", str(output), "--gil"]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached
    if spy.poll() is not None:
        raise RuntimeError(f"py-spy exited: {spy.stderr.read().decode() if spy.stderr else ''}")
    return spy


def stop_profiler(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()


# -- the benchmark --------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, workers: harness.Workers, scratch: Path) -> dict[str, Any]:
    rounds: list[list[dict[str, Any]]] = []
    keep = None
    if args.sleeping:
        # Runs that sleep for a day stay in the tables through every phase.
        tidy_tables(args.db)
        harness.schedule_sleeping(args.sleeping)
        keep = harness.id_floor(time.time() + 0.002)
    for index in range(args.repeat):
        phases: list[dict[str, Any]] = []
        order = ["raw", *args.conn_max_age] if index % 2 == 0 else [*args.conn_max_age, "raw"]
        for what in order:
            if what == "raw" and args.skip_raw:
                continue
            if what == "raw":
                phase = harness.attempts("raw", lambda: raw_phase(args, keep), workers.kill_all)
            else:
                name = f"compare-{index}-cma{what}"
                phase = harness.attempts(
                    name, phase_of(args, workers, name, what, keep), workers.kill_all
                )
            phases.append(phase)
            print_phase(index + 1, phase)
        rounds.append(phases)
    profiles = [profile_phase(args, workers, scratch, cma) for cma in args.conn_max_age]
    return {
        "rounds": rounds,
        "summary": summarise(rounds, args),
        "profiles": profiles if args.profile else [],
    }


def phase_of(
    args: argparse.Namespace,
    workers: harness.Workers,
    name: str,
    conn_max_age: str,
    keep_before: uuid.UUID | None = None,
) -> Callable[[], dict[str, Any]]:
    return lambda: everystep_phase(args, workers, name, conn_max_age, keep_before=keep_before)


def profile_phase(
    args: argparse.Namespace, workers: harness.Workers, scratch: Path, conn_max_age: str
) -> dict[str, Any]:
    """One more everystep phase, under py-spy; its report in ``bench/profiles/``."""
    if not args.profile:
        return {}
    name = f"compare-profile-cma{conn_max_age}"
    raw_output = scratch / f"{name}.collapsed"
    phase = harness.attempts(
        name,
        lambda: everystep_phase(args, workers, name, conn_max_age, raw_output),
        workers.kill_all,
    )
    print_phase(0, phase)
    harness.PROFILES.mkdir(exist_ok=True)
    suffix = f"-cma{conn_max_age}" if len(args.conn_max_age) > 1 else ""
    target = harness.PROFILES / f"{args.db}-{args.label}{suffix}.txt"
    title = (
        f"py-spy profile of one everystep_worker (--pool {args.pool} --poll {args.poll}), "
        f"{args.runs} runs of bench_three, {args.db}, CONN_MAX_AGE {conn_max_age}, "
        f"label {args.label}"
    )
    profile = profile_report.write_report(
        raw_output, target, phase, title, sys.argv, args.profile_rate
    )
    print(f"profile: {target}")
    return {**profile, "phase": phase}


def summarise(rounds: list[list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3) if values else float("nan")

    raws = [p for r in rounds for p in r if p["phase"] == "raw"]
    summary: dict[str, Any] = {"raw_runs_per_s": median([p["runs_per_s"] for p in raws])}
    for cma in args.conn_max_age:
        mine = [p for r in rounds for p in r if p.get("conn_max_age") == cma]
        if not mine:
            continue
        ratios = [
            p["runs_per_s"] / raw["runs_per_s"]
            for r in rounds
            for p in r
            if p.get("conn_max_age") == cma
            for raw in r
            if raw["phase"] == "raw" and raw["runs_per_s"]
        ]
        summary[f"cma_{cma}"] = {
            "runs_per_s": median([p["runs_per_s"] for p in mine]),
            "ratio_to_raw": median(ratios),
            "worker_cpu_ms_per_run": median([p["worker_cpu_ms_per_run"] for p in mine]),
            "worker_cpu_ms_per_step": median([p["worker_cpu_ms_per_step"] for p in mine]),
            "db_cpu_ms_per_run": median([p["db_cpu_ms_per_run"] for p in mine]),
            "rss_mb_start": median([p["rss_mb"]["start"] for p in mine]),
            "rss_mb_end": median([p["rss_mb"]["end"] for p in mine]),
            "other_cpu_s_max": max(p["cpu"]["other_s"] for p in mine),
        }
    return summary


def print_phase(round_no: int, p: dict[str, Any], title: str = "") -> None:
    label = "raw" if p["phase"] == "raw" else f"everystep cma={p['conn_max_age']}"
    label = f"{title} {label}" if title else label
    if p["phase"] == "everystep" and p.get("workers", 1) > 1:
        label += f" x{p['workers']}"
    if p["phase"] == "everystep" and p["profiled"]:
        label += " (py-spy)"
    conns = p["connections_opened"]
    line = (
        f"  round {round_no}  {label:<24} {p['runs_per_s']:>7.1f} runs/s  "
        f"{p['completed']} runs {p['steps']} steps in {p['span_s']:.2f}s  "
    )
    if p["phase"] == "raw":
        line += f"client CPU {p['client_cpu_ms_per_run']:.2f} ms/run  "
    else:
        line += (
            f"worker CPU {p['worker_cpu_ms_per_run']:.2f} ms/run "
            f"{p['worker_cpu_ms_per_step']:.2f} ms/step  RSS {p['rss_mb']['start']}->"
            f"{p['rss_mb']['end']} MB  exit {p['exit_code']}  "
        )
        if p["rss_mb"]["samples"] > 10:  # a long phase: does it grow?
            line += f"RSS quartiles {p['rss_mb'].get('quartiles')}  "
    line += (
        f"db CPU {p['db_cpu_ms_per_run']:.2f} ms/run  conns {conns}  other {p['cpu']['other_s']}s"
    )
    if not p["quiet"]["quiet"]:
        line += f"  (started while others used {p['quiet']['other_cpus']} CPU)"
    print(line, flush=True)


def print_summary(record: dict[str, Any]) -> None:
    args, s = record["args"], record["summary"]
    harness.print_header(record)
    print(
        f"{args['runs']} runs of bench_three (3 steps); {args['workers']} worker(s) --pool "
        f"{args['pool']} --poll {args['poll']}; raw: {args['workers'] * args['pool']} threads, "
        f"claim batch {args['raw_batch']}; medians of {args['repeat']} round(s)"
    )
    head = ("", "runs/s", "of raw", "wkr ms/run", "ms/step", "db ms/run", "RSS MB", "other s")
    print("  {:<22}{:>8}{:>8}{:>11}{:>9}{:>10}{:>13}{:>9}".format(*head))
    if not args["skip_raw"]:
        print("  {:<22}{:>8}".format("raw limit", s["raw_runs_per_s"]))
    for cma in args["conn_max_age"]:
        if f"cma_{cma}" not in s:
            continue
        m = s[f"cma_{cma}"]
        cells = (
            f"everystep cma={cma}",
            m["runs_per_s"],
            "-" if args["skip_raw"] else f"{100 * m['ratio_to_raw']:.1f}%",
            m["worker_cpu_ms_per_run"],
            m["worker_cpu_ms_per_step"],
            m["db_cpu_ms_per_run"],
            f"{m['rss_mb_start']}->{m['rss_mb_end']}",
            m["other_cpu_s_max"],
        )
        print("  {:<22}{:>8}{:>8}{:>11}{:>9}{:>10}{:>13}{:>9}".format(*map(str, cells)))
    harness.print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.run_benchmark(
        "compare", args, lambda run: benchmark(args, run.workers, run.scratch), print_summary
    )


if __name__ == "__main__":
    sys.exit(main())
