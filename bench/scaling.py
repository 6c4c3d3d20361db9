"""Throughput with 1, 2, 3 … worker processes, and where it stops scaling.

    .venv/bin/python bench/scaling.py --db postgres|mariadb|sqlite [--workers 1 2 3]
        [--runs 1000] [--pool 8] [--repeat 1] [--skip-raw] [--source PATH] [--label NAME]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end), for
each ``--workers`` value N, ``compare.py``'s phases (each waiting for a quiet machine):

- **raw limit** on N x ``--pool`` threads (the same total concurrency), unless
  ``--skip-raw``;
- **everystep**: N ``manage.py everystep_worker --pool 8 --poll 0.05`` processes (names
  of their own), started and idle, then ``--runs`` runs of ``bench_three`` scheduled in
  one transaction; throughput from the rows.

``--repeat`` rounds; every other round takes the worker counts in reverse order. Per N
it prints runs/s (everystep and raw, medians), the workers' CPU per run (all workers
together), the database server's CPU per run, and the CPUs in use over the phase
(busy CPU seconds / wall seconds): the whole machine, the workers, the database server.
When the machine's CPUs are all busy, the split shows what the next worker would have
to share with (on a 2-core machine: mostly the database server). Appends one JSON line
(``"kind": "scaling"``) to ``bench/results.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import compare
import harness


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_arguments(parser)
    compare.add_phase_arguments(parser, runs=1000, workers=[1, 2, 3])
    parser.add_argument("--repeat", type=int, default=1, help="rounds (1)")
    parser.add_argument("--skip-raw", action="store_true", help="no raw-limit phases")
    args = parser.parse_args(argv)
    compare.check_phase_arguments(parser, args)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def cpus_in_use(phase: dict[str, Any]) -> dict[str, float]:
    """Busy CPUs over the phase: the machine, the workers (or the raw client, which is
    this process), the database server, and everything else."""
    cpu = phase["cpu"]
    wall = max(cpu["wall_s"], 1e-9)
    client = cpu["worker_s"] if phase["phase"] == "everystep" else cpu["bench_s"]
    return {
        "machine": round(cpu["machine_s"] / wall, 2),
        "client": round(client / wall, 2),
        "db_server": round(cpu["db_server_s"] / wall, 2),
        "other": round(cpu["other_s"] / wall, 2),
    }


def measure(args: argparse.Namespace, workers: harness.Workers, fleet: int, round_no: int) -> Any:
    """The phases for ``fleet`` workers: raw limit, then everystep."""
    phase_args = argparse.Namespace(**{**vars(args), "workers": fleet})
    phases = []
    if not args.skip_raw:
        raw = harness.attempts(
            f"raw x{fleet}", lambda: compare.raw_phase(phase_args), workers.kill_all
        )
        raw["workers"], raw["cpus"] = fleet, cpus_in_use(raw)
        compare.print_phase(round_no, raw, f"{fleet * args.pool} threads")
        phases.append(raw)
    name = f"scaling-{round_no}-x{fleet}"
    mine = harness.attempts(
        name,
        lambda: compare.everystep_phase(phase_args, workers, name, compare.SETTINGS_VALUE),
        workers.kill_all,
    )
    mine["cpus"] = cpus_in_use(mine)
    compare.print_phase(round_no, mine)
    phases.append(mine)
    return phases


def summarise(args: argparse.Namespace, phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3) if values else float("nan")

    rows = []
    for fleet in args.workers:
        mine = [p for p in phases if p["phase"] == "everystep" and p["workers"] == fleet]
        raws = [p for p in phases if p["phase"] == "raw" and p["workers"] == fleet]
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
        rows.append(row)
    return rows


def print_summary(record: dict[str, Any]) -> None:
    args = record["args"]
    harness.print_header(record)
    print(
        f"{args['runs']} runs of bench_three per phase, workers --pool {args['pool']} "
        f"--poll {args['poll']}; raw limit on workers x pool threads; medians of "
        f"{args['repeat']} round(s); CPUs = busy CPU seconds / wall seconds of the phase"
    )
    head = (
        "workers",
        "runs/s",
        "raw",
        "of raw",
        "wkr ms/run",
        "db ms/run",
        "CPUs: all",
        "workers",
        "db",
        "other",
        "raw: all",
        "db",
    )
    form = "  {:>7}{:>8}{:>8}{:>8}{:>11}{:>10}{:>10}{:>8}{:>6}{:>7}{:>10}{:>6}"
    print(form.format(*head))
    first = record["rows"][0]["runs_per_s"] if record["rows"] else float("nan")
    for row in record["rows"]:
        ratio = row["runs_per_s"] / row["raw_runs_per_s"] if row["raw_runs_per_s"] else 0
        cells = (
            row["workers"],
            row["runs_per_s"],
            row["raw_runs_per_s"],
            f"{100 * ratio:.0f}%",
            row["worker_cpu_ms_per_run"],
            row["db_cpu_ms_per_run"],
            row["cpus_machine"],
            row["cpus_client"],
            row["cpus_db_server"],
            row["cpus_other"],
            row["raw_cpus_machine"],
            row["raw_cpus_db_server"],
        )
        print(form.format(*map(str, cells)))
    for row in record["rows"][1:]:
        print(
            f"  {row['workers']} workers: {row['runs_per_s'] / first:.2f} x the throughput "
            f"of {record['rows'][0]['workers']}"
        )
    harness.print_problems(record)


def benchmark(args: argparse.Namespace, run: harness.Session) -> dict[str, Any]:
    phases: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = args.workers if index % 2 == 0 else list(reversed(args.workers))
        for fleet in order:
            phases += measure(args, run.workers, fleet, index + 1)
    return {"phases": phases, "rows": summarise(args, phases)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.run_benchmark("scaling", args, lambda run: benchmark(args, run), print_summary)


if __name__ == "__main__":
    sys.exit(main())
