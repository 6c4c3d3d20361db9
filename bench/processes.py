"""Workflow throughput and memory of ``everystep_worker --processes N`` (issue 56), beside
N separate workers and one process.

    .venv/bin/python bench/processes.py --db postgres|mariadb|sqlite
        [--processes 1 2] [--runs 2000] [--pool 4] [--repeat 3] [--body engine|cpu]
        [--label NAME]

On a fresh database of its own, for each N of ``--processes`` and each round
(``--repeat``; the order reverses every other round), two phases, each waiting for a
quiet machine and starting from empty tables:

- **group**: ONE ``manage.py everystep_worker --processes N --pool P --poll 0.05``,
  started and idle (every child holds its name), then ``--runs`` runs of ``bench_three``
  (3 durable steps with trivial bodies: the engine's own cost; ``--body cpu``:
  ``bench_cpu_three``, each step computing for about 2 ms in Python) scheduled in one
  transaction; runs/s from the rows (first claim to last completion), as ``compare.py``,
  and the CPUs busy over the phase (the machine, the worker processes, the database
  server: busy CPU seconds / wall seconds);
- **separate** (N > 1 only): N ``everystep_worker --pool P`` processes, names apart, the
  same way: what the group is compared with.

Memory is read at the end of each phase, before the stop, from ``/proc/PID/smaps_rollup``
of every process of the phase: RSS (each process's resident pages, shared ones counted
in every process) and PSS (shared pages divided among the processes sharing them: the
fair total). Prints, per N and shape, the median runs/s, its ratio to one process, and
the memory; appends one JSON line to ``bench/results/processes.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from harness import options, runs
from harness.cpu import CpuMeter, process_tree, wait_quiet
from harness.results import print_header, print_problems
from harness.server import attempts
from harness.session import Session, run_benchmark
from harness.workers import WorkerProcess


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="(1 2)")
    parser.add_argument("--runs", type=int, default=2000, help="runs per phase (2000)")
    parser.add_argument("--pool", type=int, default=4, help="--pool of each process (4)")
    parser.add_argument("--poll", type=float, default=0.05, help="--poll (0.05)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument(
        "--body",
        choices=("engine", "cpu"),
        default="engine",
        help="bench_three (trivial steps) or bench_cpu_three (2 ms of Python each) (engine)",
    )
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    if min(args.runs, args.pool, args.repeat, *args.processes) < 1:
        parser.error("--runs, --pool, --repeat and --processes must be at least 1")
    return args


def memory_mb(pids: list[int]) -> dict[str, float]:
    """Summed RSS and PSS of ``pids`` (MiB), and the largest and smallest process's."""
    each = [_rollup(pid) for pid in pids]
    rss = [rss for rss, _ in each]
    pss = [pss for _, pss in each]
    return {
        "rss_total": round(sum(rss), 1),
        "pss_total": round(sum(pss), 1),
        "rss_each": [round(value, 1) for value in rss],
        "pss_each": [round(value, 1) for value in pss],
    }


def _rollup(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) / 1024
    return fields.get("Rss", 0.0), fields.get("Pss", 0.0)


def busy(cpu: dict[str, float]) -> dict[str, float]:
    """CPUs busy over the phase: the machine, the worker processes, the database server."""
    wall = max(cpu["wall_s"], 1e-9)
    return {
        "machine": round(cpu["machine_s"] / wall, 2),
        "workers": round(cpu["worker_s"] / wall, 2),
        "db_server": round(cpu["db_server_s"] / wall, 2),
    }


def phase(args: argparse.Namespace, run: Session, shape: str, count: int, round_no: int) -> Any:
    from everystep_bench.workflows import bench_cpu_three, bench_three

    fleet: list[WorkerProcess] = []
    flags = ("--pool", str(args.pool), "--poll", str(args.poll))
    label = f"{shape}-x{count}-r{round_no}"

    def measure() -> dict[str, Any]:
        runs.tidy_tables(args.db)
        if shape == "group":
            fleet[:] = [run.workers.start_group(label, count, *flags)]
        else:
            fleet[:] = run.workers.start_fleet(label, count, *flags)
        quiet = wait_quiet(args.wait_quiet)
        pids = [pid for worker in fleet for pid in process_tree(worker.pid)]
        meter = CpuMeter(args.db, pids)
        meter.begin_workers()
        since = runs.id_floor()
        runs.schedule_runs(bench_cpu_three if args.body == "cpu" else bench_three, args.runs)
        meter.begin()

        def alive() -> None:
            for worker in fleet:
                worker.check_alive()

        runs.wait_for(lambda: runs.pending_runs() == 0, max(600.0, args.runs / 10), 0.1, alive)
        cpu = meter.end()
        memory = memory_mb(pids)
        exit_codes = [worker.terminate() for worker in fleet]
        return {
            "phase": shape,
            "processes": count,
            "round": round_no,
            **runs.finished_span(since),
            "memory_mb": memory,
            "cpus": busy(cpu),
            "quiet": quiet,
            "exit_code": next((code for code in exit_codes if code != 0), 0),
        }

    def cleanup() -> None:
        for worker in fleet:
            worker.kill()

    result = attempts(label, measure, cleanup)
    print(
        f"  round {round_no}  {shape:<8} x{count}  {result['runs_per_s']} runs/s  "
        f"PSS {result['memory_mb']['pss_total']} MiB  RSS {result['memory_mb']['rss_total']} MiB  "
        f"CPUs {result['cpus']}",
        flush=True,
    )
    return result


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    phases = []
    for index in range(args.repeat):
        order = args.processes if index % 2 == 0 else list(reversed(args.processes))
        for count in order:
            phases.append(phase(args, run, "group", count, index + 1))
            if count > 1:
                phases.append(phase(args, run, "separate", count, index + 1))
    return {"phases": phases, "rows": summarise(phases)}


def summarise(phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(p["processes"], p["phase"]) for p in phases})
    one = [p["runs_per_s"] for p in phases if (p["processes"], p["phase"]) == (1, "group")]
    base = statistics.median(one) if one else float("nan")
    for count, shape in keys:
        mine = [p for p in phases if (p["processes"], p["phase"]) == (count, shape)]
        rate = statistics.median(p["runs_per_s"] for p in mine)
        rows.append(
            {
                "processes": count,
                "shape": shape,
                "runs_per_s": round(rate, 1),
                "x_one_process": round(rate / base, 2),
                "pss_mb": round(statistics.median(p["memory_mb"]["pss_total"] for p in mine), 1),
                "rss_mb": round(statistics.median(p["memory_mb"]["rss_total"] for p in mine), 1),
                "pss_each": mine[-1]["memory_mb"]["pss_each"],
                "cpus": {
                    key: round(statistics.median(p["cpus"][key] for p in mine), 2)
                    for key in ("machine", "workers", "db_server")
                },
            }
        )
    return rows


def report(record: dict[str, Any]) -> None:
    args = record["args"]
    print_header(record)
    print(
        f"{args['db']}: {args['runs']} runs of "
        f"{'bench_cpu_three' if args['body'] == 'cpu' else 'bench_three'} per phase, --pool "
        f"{args['pool']} per process; medians of {args['repeat']} round(s); CPUs busy: the "
        "machine / the workers / the database server\n"
    )
    print(
        "| processes | shape | runs/s | x 1 process | CPUs busy | PSS MiB | RSS MiB "
        "| PSS per process |"
    )
    print("|---:|---|---:|---:|---|---:|---:|---|")
    for row in record["rows"]:
        print(
            f"| {row['processes']} | {row['shape']} | {row['runs_per_s']} | "
            f"{row['x_one_process']} | {row['cpus']['machine']} / {row['cpus']['workers']} / "
            f"{row['cpus']['db_server']} | {row['pss_mb']} | {row['rss_mb']} | "
            f"{' / '.join(map(str, row['pss_each']))} |"
        )
    print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("processes", args, lambda run: benchmark(args, run), report)


if __name__ == "__main__":
    sys.exit(main())
