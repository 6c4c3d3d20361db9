"""Benchmark everystep workers against a real database: pickup latency and throughput.

    .venv/bin/python bench/run.py --db postgres|mariadb|sqlite [--runs 1000] [--workers 2]
        [--pool 8] [--samples 30] [--only pickup|throughput] [--source PATH] [--label NAME]

Creates its own database (``everystep_test_bench…``) from ``tests/settings.py``, starts
real ``manage.py everystep_worker`` subprocesses against it, prints a results table,
appends one JSON line to ``bench/results/run.jsonl`` and drops the database at the end.
The numbers are measurements of this machine at this moment, not targets any test asserts.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from typing import Any

from harness import options
from harness.cpu import machine_busy_seconds
from harness.results import print_header, print_problems
from harness.runs import clear_runs, percentile, wait_for
from harness.session import Session, run_benchmark
from harness.workers import WorkerProcess, Workers

STEPS_PER_RUN = 4  # tests.testapp.workflows.sequential: add, double, pair, peek
PICKUP_POLL = 1.0
THROUGHPUT_POLL = 0.05
PHASE_TIMEOUT = 600.0


# -- measurements --------------------------------------------------------------------


def one_pickup(worker: WorkerProcess) -> tuple[float, float, float]:
    """Schedule one run on an idle worker, as an application would (in a transaction);
    seconds from the commit to its claim and to the start of its first step, and from
    its ``created_at`` (before the INSERT) to that start."""
    from django.db import transaction
    from django.utils import timezone

    from everystep import schedule
    from everystep.models import Status, Step, Workflow
    from tests.testapp.workflows import sequential

    with transaction.atomic():
        run = schedule(sequential, 1, 2)
    committed = timezone.now()
    done = Workflow.objects.filter(id=run.id, status=Status.COMPLETED)
    wait_for(done.exists, 30, 0.01, worker.check_alive)
    run.refresh_from_db()
    first = Step.objects.filter(workflow_id=run.id).order_by("started_at").first()
    assert first is not None and run.started_at is not None
    return (
        (run.started_at - committed).total_seconds(),
        (first.started_at - committed).total_seconds(),
        (first.started_at - run.created_at).total_seconds(),
    )


def measure_pickup(workers: Workers, label: str, samples: int, *flags: str) -> dict[str, Any]:
    """Pickup latency of one idle worker polling every second, ``samples`` times."""
    name = f"pickup-{label}"
    worker = workers.start(name, "--poll", str(PICKUP_POLL), *flags)
    one_pickup(worker)  # warm-up: the worker has started, imported and connected
    claims, firsts, from_created = [], [], []
    for _ in range(samples):
        # The worker's poll timer restarts when a run finishes: vary the idle gap.
        time.sleep(random.uniform(0.2, 0.5))
        claim, first, created = one_pickup(worker)
        claims.append(1000 * claim)
        firsts.append(1000 * first)
        from_created.append(1000 * created)
    return {
        "mode": label,
        "samples": samples,
        "p50_ms": round(percentile(firsts, 0.5), 1),
        "p90_ms": round(percentile(firsts, 0.9), 1),
        "p99_ms": round(percentile(firsts, 0.99), 1),
        "max_ms": round(max(firsts), 1),
        "claim_p50_ms": round(percentile(claims, 0.5), 1),
        "from_created_p50_ms": round(percentile(from_created, 0.5), 1),
        "exit_code": worker.terminate(),
    }


def schedule_batch(runs: int) -> None:
    from django.db import transaction

    from everystep import schedule
    from tests.testapp.workflows import sequential

    with transaction.atomic():
        for i in range(runs):
            schedule(sequential, i, 1)


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, CPU seconds of this process and its
    waited-for children). Their difference over a phase is the database server plus
    anything else running on the machine: a disturbance indicator."""
    ours = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return machine_busy_seconds(), sum(usage.ru_utime + usage.ru_stime for usage in ours)


def measure_throughput(workers: Workers, runs: int, count: int, pool: int) -> dict[str, Any]:
    """Wall time for ``count`` workers to complete ``runs`` runs scheduled up front."""
    from django.db.models import Max, Min
    from django.utils import timezone

    from everystep.models import Status, Workflow

    clear_runs()
    schedule_batch(runs)
    machine_before, own_before = cpu_seconds()
    began = timezone.now()
    started = [
        workers.start(f"throughput-{i}", "--pool", str(pool), "--poll", str(THROUGHPUT_POLL))
        for i in range(count)
    ]
    pending = Workflow.objects.filter(status__in=[Status.SCHEDULED, Status.RUNNING])

    def alive() -> None:
        for worker in started:
            worker.check_alive()

    wait_for(lambda: not pending.exists(), PHASE_TIMEOUT, 0.25, alive)
    span = Workflow.objects.aggregate(first=Min("started_at"), last=Max("completed_at"))
    exit_codes = [worker.terminate() for worker in started]
    machine_after, own_after = cpu_seconds()
    wall = (span["last"] - began).total_seconds()
    done = finished_counts()
    own = own_after - own_before
    return {
        "runs": runs,
        "workers": count,
        "pool": pool,
        **done,
        "wall_s": round(wall, 2),
        "claim_to_done_s": round((span["last"] - span["first"]).total_seconds(), 2),
        "runs_per_s": round(done["completed"] / wall, 1),
        "steps_per_s": round(done["steps"] / wall, 1),
        "cpu_own_s": round(own, 1),
        "cpu_other_s": round(machine_after - machine_before - own, 1),
        "exit_codes": exit_codes,
    }


def finished_counts() -> dict[str, Any]:
    from django.db.models import Count

    from everystep.models import Status, Step, Workflow

    per_worker = Workflow.objects.values_list("claimed_by").annotate(n=Count("id"))
    return {
        "completed": Workflow.objects.filter(status=Status.COMPLETED).count(),
        "steps": Step.objects.count(),
        "runs_per_worker": dict(sorted(per_worker)),
    }


# -- reporting -----------------------------------------------------------------------


def print_table(record: dict[str, Any]) -> None:
    print_header(record)
    print(
        f"\npickup latency: idle worker, poll {PICKUP_POLL:g}s, first step start - commit of "
        "the scheduling transaction (last column: from created_at, before the INSERT)"
    )
    head = ("mode", "samples", "p50 ms", "p90 ms", "p99 ms", "max ms", "claim p50", "exit")
    form = "  {:<10}{:>8}{:>9}{:>9}{:>9}{:>9}{:>11}{:>6}{:>9}"
    print(form.format(*head, "created"))
    keys = ("mode", "samples", "p50_ms", "p90_ms", "p99_ms", "max_ms", "claim_p50_ms")
    for row in record["pickup"]:
        cells = [row[key] for key in (*keys, "exit_code", "from_created_p50_ms")]
        print(form.format(*map(str, cells)))
    if record["throughput"] is not None:
        _print_throughput(record["throughput"])
    print()
    print_problems(record)


def _print_throughput(t: dict[str, Any]) -> None:
    print(
        f"\nthroughput: {t['runs']} runs of sequential ({STEPS_PER_RUN} steps), "
        f"{t['workers']} workers x pool {t['pool']}, poll {THROUGHPUT_POLL:g}s"
    )
    print(
        f"  completed {t['completed']}/{t['runs']}, {t['steps']} steps in {t['wall_s']}s "
        f"from worker start ({t['claim_to_done_s']}s from first claim)"
    )
    print(f"  {t['runs_per_s']} runs/s, {t['steps_per_s']} steps/s")
    print(f"  runs per worker {t['runs_per_worker']}; exit codes {t['exit_codes']}")
    print(
        f"  CPU during the phase: {t['cpu_own_s']}s bench + workers, "
        f"{t['cpu_other_s']}s database server and everything else"
    )


# -- main ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--runs", type=int, default=1000, help="throughput runs (1000)")
    parser.add_argument("--workers", type=int, default=2, help="throughput workers (2)")
    parser.add_argument("--pool", type=int, default=8, help="pool per throughput worker (8)")
    parser.add_argument("--samples", type=int, default=30, help="pickup samples per mode (30)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the worker logs")
    parser.add_argument(
        "--only", choices=["pickup", "throughput"], help="run one of the two phases only"
    )
    args = parser.parse_args(argv)
    if min(args.runs, args.workers, args.pool, args.samples) < 1:
        parser.error("--runs, --workers, --pool and --samples must be at least 1")
    return args


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    modes = [("notify", ()), ("polling", ("--no-notify",))]
    if args.db != "postgres":
        modes = [("polling", ())]
    pickup, throughput = [], None
    if args.only != "throughput":
        pickup = [
            measure_pickup(run.workers, label, args.samples, *flags) for label, flags in modes
        ]
    if args.only != "pickup":
        throughput = measure_throughput(run.workers, args.runs, args.workers, args.pool)
    return {"pickup": pickup, "throughput": throughput}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("run", args, lambda run: benchmark(args, run), print_table)


if __name__ == "__main__":
    sys.exit(main())
