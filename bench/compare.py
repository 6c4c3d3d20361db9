"""everystep against the raw-SQL limit, measured in the same invocation.

    .venv/bin/python bench/compare.py --db postgres|mariadb|sqlite [--runs 500] [--pool 8]
        [--workers 1] [--conn-max-age settings|0|600|none ...] [--repeat 3] [--profile]
        [--source PATH] [--label NAME] [--skip-raw] [--keep-logs] [--sleeping N]

Each round, on a fresh database of its own (``everystep_test_bench_…``, dropped at the end):

- **raw limit**: ``--runs`` runs of ``everystep_bench.workflows.bench_three`` (3 tiny steps)
  are scheduled, then claimed and executed with the bare driver on ``--pool`` threads
  (``harness/raw_limit.py``: claim, one INSERT per step, one UPDATE to finish);
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
per INSERT). Every invocation appends one JSON line to ``bench/results/compare.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import options, profiler, runs, server
from harness.phases import everystep_phase, print_phase, raw_phase
from harness.results import print_header, print_problems
from harness.session import BENCH, Session, run_benchmark
from harness.workers import Workers

PROFILES = BENCH / "profiles"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    options.add_phase_arguments(parser)
    options.add_conn_max_age_argument(parser)
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
    options.check_phase_arguments(parser, args)
    options.check_conn_max_age(parser, args.conn_max_age)
    if args.repeat < 0:
        parser.error("--repeat must be at least 0")
    if args.repeat == 0 and not args.profile:
        parser.error("--repeat 0 only makes sense with --profile (the profiled phase alone)")
    return args


# -- the benchmark --------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    keep = None
    if args.sleeping:
        # Runs that sleep for a day stay in the tables through every phase.
        runs.tidy_tables(args.db)
        runs.schedule_sleeping(args.sleeping)
        keep = runs.id_floor(time.time() + 0.002)
    rounds = [one_round(args, run.workers, index, keep) for index in range(args.repeat)]
    profiles = [profile_phase(args, run.workers, run.scratch, cma) for cma in args.conn_max_age]
    return {
        "rounds": rounds,
        "summary": summarise(rounds, args),
        "profiles": profiles if args.profile else [],
    }


def one_round(
    args: argparse.Namespace, workers: Workers, index: int, keep: uuid.UUID | None
) -> list[dict[str, Any]]:
    """The raw limit and one everystep phase per ``--conn-max-age`` value; every other
    round in the reverse order."""
    phases: list[dict[str, Any]] = []
    order = ["raw", *args.conn_max_age] if index % 2 == 0 else [*args.conn_max_age, "raw"]
    for what in order:
        if what == "raw" and args.skip_raw:
            continue
        if what == "raw":
            phase = server.attempts("raw", lambda: raw_phase(args, keep), workers.kill_all)
        else:
            name = f"compare-{index}-cma{what}"
            phase = server.attempts(
                name, phase_of(args, workers, name, what, keep), workers.kill_all
            )
        phases.append(phase)
        print_phase(index + 1, phase)
    return phases


def phase_of(
    args: argparse.Namespace,
    workers: Workers,
    name: str,
    conn_max_age: str,
    keep_before: uuid.UUID | None = None,
) -> Callable[[], dict[str, Any]]:
    return lambda: everystep_phase(args, workers, name, conn_max_age, keep_before=keep_before)


def profile_phase(
    args: argparse.Namespace, workers: Workers, scratch: Path, conn_max_age: str
) -> dict[str, Any]:
    """One more everystep phase, under py-spy; its report in ``bench/profiles/``."""
    if not args.profile:
        return {}
    name = f"compare-profile-cma{conn_max_age}"
    raw_output = scratch / f"{name}.collapsed"
    phase = server.attempts(
        name,
        lambda: everystep_phase(args, workers, name, conn_max_age, raw_output),
        workers.kill_all,
    )
    print_phase(0, phase)
    PROFILES.mkdir(exist_ok=True)
    suffix = f"-cma{conn_max_age}" if len(args.conn_max_age) > 1 else ""
    target = PROFILES / f"{args.db}-{args.label}{suffix}.txt"
    title = (
        f"py-spy profile of one everystep_worker (--pool {args.pool} --poll {args.poll}), "
        f"{args.runs} runs of bench_three, {args.db}, CONN_MAX_AGE {conn_max_age}, "
        f"label {args.label}"
    )
    profile = profiler.write_report(raw_output, target, phase, title, sys.argv, args.profile_rate)
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


def print_summary(record: dict[str, Any]) -> None:
    args, s = record["args"], record["summary"]
    print_header(record)
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
    print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("compare", args, lambda run: benchmark(args, run), print_summary)


if __name__ == "__main__":
    sys.exit(main())
