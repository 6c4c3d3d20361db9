"""The two phases ``compare.py`` puts side by side (``history.py`` and ``scaling.py``
measure them too): everystep's worker processes executing ``--runs`` runs of
``bench_three``, and the raw-SQL limit executing the same runs with the bare driver.
Both are timed from the rows (first ``started_at`` to last ``completed_at``)."""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

from harness import options, runs
from harness.cpu import CpuMeter, wait_quiet
from harness.profiler import Profiler
from harness.raw_limit import run_raw_limit
from harness.workers import WorkerProcess, Workers


def per_run(seconds: float, count: int) -> float:
    """CPU milliseconds per run (per step, with a step count)."""
    return round(1000 * seconds / max(count, 1), 3)


def raw_phase(args: argparse.Namespace, keep_before: uuid.UUID | None = None) -> dict[str, Any]:
    """The raw limit on ``args.workers`` x ``args.pool`` threads, ``args.runs`` runs."""
    from everystep_bench.workflows import bench_three

    runs.tidy_tables(args.db, keep_before)
    runs.schedule_runs(bench_three, args.runs)
    quiet = wait_quiet(args.wait_quiet)
    conns = runs.db_connections_opened(args.db)
    meter = CpuMeter(args.db)
    meter.begin()
    result = run_raw_limit(args.pool * args.workers, args.raw_batch)
    cpu = meter.end()
    opened = _connections_since(args.db, conns)
    span = runs.finished_span()
    return {
        "phase": "raw",
        **span,
        "wall_s": result.wall_s,
        "claims": result.claims,
        "client_cpu_ms_per_run": per_run(result.cpu_s, result.runs),
        "db_cpu_ms_per_run": per_run(cpu["db_server_s"], span["completed"]),
        "connections_opened": opened,
        "cpu": cpu,
        "quiet": quiet,
    }


def _connections_since(db: str, before: int | None) -> int | None:
    time.sleep(1.1 if db == "postgres" else 0)  # session statistics reach the server
    after = runs.db_connections_opened(db)
    return None if before is None or after is None else after - before


class RssSamples:
    """Each worker's RSS at the start, every 2 s while the runs execute, and at the end."""

    def __init__(self, fleet: list[WorkerProcess]) -> None:
        self.fleet = fleet
        self.samples = [[worker.rss_mb()] for worker in fleet]
        self.last = time.monotonic()

    def sample(self, every: float = 2.0) -> None:
        if time.monotonic() - self.last > every:
            for samples, worker in zip(self.samples, self.fleet, strict=True):
                samples.append(worker.rss_mb())
            self.last = time.monotonic()

    def summary(self) -> dict[str, Any]:
        """The largest worker's start, end and maximum; the first worker's quartiles."""
        first = self.samples[0]
        return {
            "start": max(samples[0] for samples in self.samples),
            "end": max(samples[-1] for samples in self.samples),
            "max": max(max(samples) for samples in self.samples),
            "samples": len(first),
            # At 0, 25, 50, 75 and 100 % of the samples: growth or not.
            "quartiles": [first[round(q * (len(first) - 1) / 4)] for q in range(5)],
        }


def everystep_phase(
    args: argparse.Namespace,
    workers: Workers,
    name: str,
    conn_max_age: str,
    profile_to: Path | None = None,
    keep_before: uuid.UUID | None = None,
) -> dict[str, Any]:
    """``args.workers`` worker processes (``name``, or ``name-w<i>`` for several) execute
    ``args.runs`` runs of ``bench_three``; runs with ids below ``keep_before`` (a
    history) stay in the tables and are not counted. ``profile_to``: py-spy's samples
    of the first worker go there."""
    from everystep_bench.workflows import bench_three

    runs.tidy_tables(args.db, keep_before)
    quiet = wait_quiet(args.wait_quiet)
    flags = ("--pool", str(args.pool), "--poll", str(args.poll))
    env = options.conn_max_age_env(conn_max_age)
    fleet = workers.start_fleet(name, args.workers, *flags, env=env)
    spy = Profiler(fleet[0].pid, profile_to, args.profile_rate) if profile_to else None
    rss = RssSamples(fleet)
    conns = runs.db_connections_opened(args.db)
    meter = CpuMeter(args.db, [worker.pid for worker in fleet])
    meter.begin_workers()
    since = runs.id_floor()
    runs.schedule_runs(bench_three, args.runs)
    meter.begin()

    def alive() -> None:
        for worker in fleet:
            worker.check_alive()
        rss.sample()

    timeout = max(600.0, args.runs / 10)
    runs.wait_for(lambda: runs.pending_runs() == 0, timeout, 0.1, alive)
    cpu = meter.end()
    rss.sample(every=0)
    if spy is not None:
        spy.stop()
    opened = _connections_since(args.db, conns)
    exit_codes = [worker.terminate() for worker in fleet]
    span = runs.finished_span(since)
    return {
        "phase": "everystep",
        "conn_max_age": conn_max_age,
        "workers": args.workers,
        "profiled": profile_to is not None,
        **span,
        "worker_cpu_ms_per_run": per_run(cpu["worker_s"], span["completed"]),
        "worker_cpu_ms_per_step": per_run(cpu["worker_s"], span["steps"]),
        "db_cpu_ms_per_run": per_run(cpu["db_server_s"], span["completed"]),
        "connections_opened": opened,
        "rss_mb": rss.summary(),
        "cpu": cpu,
        "quiet": quiet,
        "exit_code": next((code for code in exit_codes if code != 0), 0),  # None: killed
    }


def print_phase(round_no: int, p: dict[str, Any], title: str = "") -> None:
    """One line per phase as it ends: runs/s and what it cost."""
    label = "raw" if p["phase"] == "raw" else f"everystep cma={p['conn_max_age']}"
    label = f"{title} {label}" if title else label
    if p["phase"] == "everystep" and p.get("workers", 1) > 1:
        label += f" x{p['workers']}"
    if p["phase"] == "everystep" and p["profiled"]:
        label += " (py-spy)"
    line = (
        f"  round {round_no}  {label:<24} {p['runs_per_s']:>7.1f} runs/s  "
        f"{p['completed']} runs {p['steps']} steps in {p['span_s']:.2f}s  "
    )
    if p["phase"] == "raw":
        line += f"client CPU {p['client_cpu_ms_per_run']:.2f} ms/run  "
    else:
        line += _worker_cells(p)
    line += (
        f"db CPU {p['db_cpu_ms_per_run']:.2f} ms/run  conns {p['connections_opened']}  "
        f"other {p['cpu']['other_s']}s"
    )
    if not p["quiet"]["quiet"]:
        line += f"  (started while others used {p['quiet']['other_cpus']} CPU)"
    print(line, flush=True)


def _worker_cells(p: dict[str, Any]) -> str:
    rss = p["rss_mb"]
    cells = (
        f"worker CPU {p['worker_cpu_ms_per_run']:.2f} ms/run "
        f"{p['worker_cpu_ms_per_step']:.2f} ms/step  RSS {rss['start']}->"
        f"{rss['end']} MB  exit {p['exit_code']}  "
    )
    if rss["samples"] > 10:  # a long phase: does it grow?
        cells += f"RSS quartiles {rss.get('quartiles')}  "
    return cells
