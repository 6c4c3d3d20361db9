"""Bulk cancel by filter: time and memory at 10,000 and 100,000 matching runs (issue 20).

    .venv/bin/python bench/bulk_cancel.py --db postgres|mariadb|sqlite
        [--runs 10000 100000] [--batch-size 1000] [--source PATH] [--label NAME]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end), for each
size N: N scheduled runs of ``bench.sleeping`` (due in a day: no worker would take them)
and N/10 of another workflow are inserted (``bulk_create``, 10,000 a statement), then

- ``store.bulk.count`` of the filter (``--workflow bench.sleeping --status scheduled``),
  as ``--dry-run`` prints it;
- ``store.bulk.bulk_cancel`` of that filter, timed, with this process's RSS before and
  after;
- the same again on fresh rows under ``tracemalloc``: the peak of Python memory the bulk
  cancel allocated (tracemalloc slows allocations down, so this pass is not timed).

Memory that stays flat from 10,000 to 100,000 runs is the point: a batch's ids are the
only list, and each batch is one short transaction. Checks that every matching run was
cancelled and none of the others. Prints one JSON line and appends it (``"kind":
"bulk_cancel"``) to ``bench/results/bulk_cancel.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import tracemalloc
from typing import Any

from harness import options
from harness.cpu import process_rss_mb
from harness.results import print_header
from harness.runs import clear_runs
from harness.session import Session, run_benchmark

MATCHING = "bench.sleeping"
OTHER = "bench.other"
INSERT_BATCH = 10_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument(
        "--runs", type=int, nargs="+", default=[10_000, 100_000], help="sizes (10000 100000)"
    )
    parser.add_argument("--batch-size", type=int, default=1000, help="runs per batch (1000)")
    args = parser.parse_args(argv)
    if min(args.runs) < 1 or args.batch_size < 1:
        parser.error("--runs and --batch-size must be at least 1")
    return args


def insert(runs: int) -> None:
    """``runs`` scheduled runs of MATCHING and ``runs // 10`` of OTHER, due in a day."""
    from datetime import timedelta

    from django.utils import timezone

    from everystep.models import Workflow

    later = timezone.now() + timedelta(days=1)
    for name, count in ((MATCHING, runs), (OTHER, runs // 10)):
        for first in range(0, count, INSERT_BATCH):
            rows = [
                Workflow(name=name, args=[i], due_at=later)
                for i in range(first, min(first + INSERT_BATCH, count))
            ]
            Workflow.objects.bulk_create(rows, batch_size=INSERT_BATCH)


def statuses() -> dict[str, dict[str, int]]:
    from django.db.models import Count

    from everystep.models import Workflow

    rows = Workflow.objects.values_list("name", "status").annotate(n=Count("id")).order_by()
    found: dict[str, dict[str, int]] = {}
    for name, status, n in rows:
        found.setdefault(name, {})[status] = n
    return found


def cancel(batch_size: int) -> int:
    from everystep.store import bulk
    from everystep.store.audit import Actor

    run_filter = bulk.RunFilter(workflow=MATCHING, status="scheduled")
    return bulk.bulk_cancel(run_filter, Actor.command("bench"), batch_size=batch_size)


def fresh(runs: int) -> float:
    """Empty tables, then ``runs`` (and the others) inserted; seconds the insert took."""
    from everystep.models import AuditEntry

    clear_runs()
    AuditEntry.objects.all().delete()
    began = time.perf_counter()
    insert(runs)
    return round(time.perf_counter() - began, 2)


def one_size(runs: int, batch_size: int) -> dict[str, Any]:
    """The figures for ``runs`` matching runs."""
    from everystep.store import bulk

    inserted_s = fresh(runs)
    began = time.perf_counter()
    matched = bulk.count(bulk.RunFilter(workflow=MATCHING, status="scheduled"), "cancel")
    count_s = time.perf_counter() - began
    gc.collect()
    rss_before = process_rss_mb(os.getpid())
    began = time.perf_counter()
    cancelled = cancel(batch_size)
    wall_s = time.perf_counter() - began
    rss_after = process_rss_mb(os.getpid())
    after = statuses()
    if matched != runs or cancelled != runs or after[OTHER] != {"scheduled": runs // 10}:
        raise SystemExit(
            f"wrong result at {runs}: matched {matched}, cancelled {cancelled}, {after}"
        )
    fresh(runs)
    gc.collect()
    tracemalloc.start()
    cancel(batch_size)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "runs": runs,
        "insert_s": inserted_s,
        "count_s": round(count_s, 3),
        "cancel_s": round(wall_s, 2),
        "runs_per_s": round(cancelled / wall_s),
        "rss_mb_before": rss_before,
        "rss_mb_after": rss_after,
        "tracemalloc_peak_mb": round(peak / 2**20, 2),
    }


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    sizes = []
    for runs in args.runs:
        measured = one_size(runs, args.batch_size)
        print(json.dumps(measured), file=sys.stderr)
        sizes.append(measured)
    return {"sizes": sizes}


def report(record: dict[str, Any]) -> None:
    print_header(record)
    print(f"bulk cancel by filter, --batch-size {record['args']['batch_size']}")
    form = "  {:>8}{:>10}{:>10}{:>10}{:>20}{:>20}"
    print(
        form.format(
            "runs", "count s", "cancel s", "runs/s", "RSS MB before/after", "tracemalloc MB"
        )
    )
    for size in record["sizes"]:
        rss = f"{size['rss_mb_before']} / {size['rss_mb_after']}"
        cells = (size["runs"], size["count_s"], size["cancel_s"], size["runs_per_s"], rss)
        print(form.format(*map(str, cells), size["tracemalloc_peak_mb"]))
    print(json.dumps({"kind": "bulk_cancel", "db": record["db"], "sizes": record["sizes"]}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("bulk_cancel", args, lambda run: benchmark(args, run), report)


if __name__ == "__main__":
    sys.exit(main())
