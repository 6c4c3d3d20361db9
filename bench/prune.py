"""The prune at a long history: rows it reads and deletes, statements per batch (issue 51).

    .venv/bin/python bench/prune.py --db postgres|mariadb|sqlite [--history 1000000]
        [--steps 3] [--days 90] [--older-than 45] [--batch-size 1000]
        [--fill-batch 100000] [--quick] [--wait-quiet 60] [--source PATH] [--label NAME]
        [--results DIR]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end):

1. **Fill**: ``--history`` finished runs with ``--steps`` steps each, spread over the past
   ``--days`` (90) days, by ``history_fill.py`` (the generator ``history.py`` uses:
   ``INSERT … SELECT``, then the statistics and a checkpoint). ``--quick``: 2,000 runs.
2. **Prune**: after waiting for a quiet machine, ``manage.py everystep_prune --older-than
   D --batch-size N`` through ``call_command``, in this process, from the tree under
   ``--source`` (``D`` 45 days: about half the history). Every statement it sends is
   counted (``connection.execute_wrapper``), and each call of the command's
   ``prune_batch`` is measured alone: its statements, its time and, where the database
   can say, the rows it read. So the batches that deleted runs are told apart from the
   call that finds nothing left (the last call) and from the rest of the command (its
   audit entry, the audit prune).

What "rows read" is, per database:

- PostgreSQL: ``pg_stat_user_tables`` deltas of the runs table (``everystep_workflow``):
  ``seq_tup_read + idx_tup_fetch``; and ``n_tup_del`` of the runs and the steps (rows
  deleted: each step once if it equals the steps that went). The statistics are flushed
  (``pg_stat_force_next_flush()``) and the snapshot cleared before each reading, outside
  the statement count.
- MariaDB: ``Handler_read%`` deltas of ``SHOW SESSION STATUS`` (every table of the
  session, not the runs alone), less what one ``SHOW`` itself reads.
- SQLite: statements only.

Runs and steps deleted are counted (``COUNT(*)``) before and after on every database.
``time`` is the command's wall time less the readings' (one prune, no median). Statements
are what Django's cursors execute: transaction control (``BEGIN``, ``COMMIT``, savepoints)
is not among them. Prints a report and appends one JSON line (``"kind": "prune"``) to
``bench/results/prune.jsonl``.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import options
from harness.cpu import wait_quiet
from harness.results import print_header
from harness.session import Session, run_benchmark
from history_fill import DAY_MS, fill_history

RUNS, STEPS = "everystep_workflow", "everystep_step"
COMMAND_MODULE = "everystep.management.commands.everystep_prune"
VERB = re.compile(r"^\s*(\w+)")
TABLE = re.compile(r'\b(?:FROM|UPDATE|INTO)\s+[`"]?(\w+)', re.IGNORECASE)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    options.add_wait_quiet_argument(parser, "prune")
    parser.add_argument("--history", type=int, default=1_000_000, help="finished runs (1e6)")
    parser.add_argument("--steps", type=int, default=3, help="step rows per history run (3)")
    parser.add_argument("--days", type=int, default=90, help="history spread over (90) days")
    parser.add_argument(
        "--older-than", type=float, default=45.0, help="the prune's --older-than DAYS (45)"
    )
    parser.add_argument("--batch-size", type=int, default=1000, help="the prune's (1000)")
    parser.add_argument(
        "--fill-batch", type=int, default=100_000, help="runs per INSERT … SELECT (100000)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: --history 2000")
    args = parser.parse_args(argv)
    if args.quick:
        args.history = 2_000
    if min(args.history, args.steps, args.days, args.batch_size, args.fill_batch) < 1:
        parser.error("--history, --steps, --days, --batch-size, --fill-batch must be positive")
    if not args.older_than > 0:  # NaN too
        parser.error("--older-than must be positive")
    if args.history > args.days * DAY_MS:
        parser.error("at most one run per millisecond of --days")
    return args


# -- counting statements and reading the database's counters ---------------------------------


@dataclass
class Statements:
    """``connection.execute_wrapper``: every statement sent while ``on``."""

    on: bool = False
    sent: list[str] = field(default_factory=list)

    def __call__(self, execute: Callable[..., Any], sql: str, *rest: Any) -> Any:
        if self.on:
            self.sent.append(sql)
        return execute(sql, *rest)


def _rows(sql: str) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall()) if cursor.description else []


def postgres_counters() -> dict[str, int]:
    """The runs' and steps' table statistics, this backend's pending ones flushed first."""
    _rows("SELECT pg_stat_force_next_flush()")  # flushed when this statement ends
    _rows("SELECT pg_stat_clear_snapshot()")
    found = _rows(
        "SELECT relname, seq_scan, seq_tup_read, COALESCE(idx_scan, 0), "
        "COALESCE(idx_tup_fetch, 0), n_tup_del FROM pg_stat_user_tables "
        f"WHERE relname IN ('{RUNS}', '{STEPS}')"
    )
    counters: dict[str, int] = {}
    for table, seq_scan, seq_read, idx_scan, idx_fetch, deleted in found:
        key = "runs" if table == RUNS else "steps"
        counters |= {
            f"{key}_seq_scans": seq_scan,
            f"{key}_seq_rows_read": seq_read,
            f"{key}_index_scans": idx_scan,
            f"{key}_index_rows_fetched": idx_fetch,
            f"{key}_rows_read": seq_read + idx_fetch,
            f"{key}_deleted": deleted,
        }
    return counters


def mariadb_counters() -> dict[str, int]:
    """The session's handler counters (every table): rows read and deleted."""
    found = _rows(
        "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%' "
        "OR Variable_name = 'Handler_delete'"
    )
    counters = {name.lower(): int(value) for name, value in found}
    counters["handler_rows_read"] = sum(
        value for name, value in counters.items() if name.startswith("handler_read")
    )
    return counters


def no_counters() -> dict[str, int]:
    return {}


COUNTERS = {"postgresql": postgres_counters, "mysql": mariadb_counters, "sqlite": no_counters}


@dataclass
class Readings:
    """The database's counters, read outside the statement count; ``cost`` is what one
    reading adds to the counters themselves (MariaDB's ``SHOW`` reads rows)."""

    statements: Statements
    read: Callable[[], dict[str, int]]
    cost: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    taken: int = 0

    def now(self) -> dict[str, int]:
        """The counters now, and (``_taken``) how many readings came before."""
        was, self.statements.on = self.statements.on, False
        began = time.monotonic()
        try:
            return {**self.read(), "_taken": self.taken}
        finally:
            self.taken += 1
            self.seconds += time.monotonic() - began
            self.statements.on = was

    def calibrate(self) -> None:
        first = self.now()
        self.cost = delta(first, self.now())

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """The counters' change since ``before``, less what the readings between read."""
        after = self.now()
        readings = after["_taken"] - before["_taken"]
        return {k: v - readings * self.cost.get(k, 0) for k, v in delta(before, after).items()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after if key != "_taken"}


def shapes(sent: list[str]) -> list[str]:
    """``VERB table`` of each statement, in order (``SELECT everystep_workflow``)."""
    out = []
    for sql in sent:
        verb, table = VERB.match(sql), TABLE.search(sql)
        out.append(f"{verb[1].upper() if verb else '?'} {table[1] if table else ''}".strip())
    return out


# -- the prune -------------------------------------------------------------------------------


def measured_calls(readings: Readings, calls: list[dict[str, Any]]) -> Callable[[], None]:
    """Wrap the command's ``prune_batch`` so each call is measured; the undo."""
    import importlib

    module = importlib.import_module(COMMAND_MODULE)
    original = getattr(module, "prune_batch")  # noqa: B009 (any tree's command module)
    statements = readings.statements

    def prune_batch(*args: Any, **kwargs: Any) -> Any:
        before, first = readings.now(), len(statements.sent)
        began = time.monotonic()
        result = original(*args, **kwargs)
        seconds = time.monotonic() - began
        calls.append(
            {
                "runs": result[0],
                "steps": result[1],
                "seconds": seconds,
                "statements": statements.sent[first:],
                "read": readings.since(before),
            }
        )
        return result

    setattr(module, "prune_batch", prune_batch)  # noqa: B010

    def undo() -> None:
        setattr(module, "prune_batch", original)  # noqa: B010

    return undo


def counts() -> dict[str, int]:
    from everystep.models import Step, Workflow

    return {"runs": Workflow.objects.count(), "steps": Step.objects.count()}


def run_prune(args: argparse.Namespace) -> dict[str, Any]:
    """``everystep_prune`` once, every statement and batch call measured."""
    from django.core.management import call_command
    from django.db import connection

    statements = Statements()
    readings = Readings(statements, COUNTERS[connection.vendor])
    readings.calibrate()
    calls: list[dict[str, Any]] = []
    before_counts = counts()
    quiet = wait_quiet(args.wait_quiet)
    undo = measured_calls(readings, calls)
    out = io.StringIO()
    try:
        with connection.execute_wrapper(statements):
            before = readings.now()
            statements.on = True
            began = time.monotonic()
            call_command(
                "everystep_prune",
                older_than=str(args.older_than),
                batch_size=args.batch_size,
                stdout=out,
            )
            wall = time.monotonic() - began
            statements.on = False
            total = readings.since(before)
    finally:
        undo()
    return summarise(
        calls,
        statements.sent,
        total,
        wall - readings.seconds,
        {"before": before_counts, "after": counts(), "quiet": quiet, "said": out.getvalue()},
    )


def summarise(
    calls: list[dict[str, Any]],
    sent: list[str],
    total: dict[str, int],
    seconds: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    deleting = [call for call in calls if call["runs"]]
    empty = [call for call in calls if not call["runs"]]
    in_batches = sum(len(call["statements"]) for call in deleting)
    batches = len(deleting)
    before, after = extra["before"], extra["after"]
    return {
        "runs_deleted": before["runs"] - after["runs"],
        "steps_deleted": before["steps"] - after["steps"],
        "counts": {"before": before, "after": after},
        "batches": batches,
        "calls": len(calls),
        "statements": len(sent),
        "statements_in_batches": in_batches,
        "statements_per_batch": round(in_batches / batches, 2) if batches else None,
        "statements_per_batch_all": round(len(sent) / batches, 2) if batches else None,
        "statements_outside_calls": len(sent) - sum(len(c["statements"]) for c in calls),
        "first_batch": call_summary(deleting[0]) if deleting else None,
        "last_call": call_summary(empty[-1]) if empty else None,
        "batches_read": summed([call["read"] for call in deleting]),
        "batch_read_max": maxed([call["read"] for call in deleting]),
        "read": total,
        "seconds": round(seconds, 2),
        "batch_seconds": round(sum(call["seconds"] for call in deleting), 2),
        "quiet": extra["quiet"],
        "command_said": extra["said"].strip().splitlines(),
    }


def call_summary(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "runs": call["runs"],
        "steps": call["steps"],
        "ms": round(1000 * call["seconds"], 2),
        "statements": shapes(call["statements"]),
        "read": call["read"],
    }


def summed(readings: list[dict[str, int]]) -> dict[str, int]:
    return {key: sum(r.get(key, 0) for r in readings) for key in (readings[0] if readings else {})}


def maxed(readings: list[dict[str, int]]) -> dict[str, int]:
    return {key: max(r.get(key, 0) for r in readings) for key in (readings[0] if readings else {})}


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    fill = fill_history(args)
    print(f"pruning --older-than {args.older_than} --batch-size {args.batch_size} …", flush=True)
    return {"history": fill, "prune": run_prune(args)}


# -- the report ------------------------------------------------------------------------------


def print_summary(record: dict[str, Any]) -> None:
    args, fill, p = record["args"], record["history"], record["prune"]
    print_header(record)
    print(
        f"history: {fill['runs']:,} runs, {fill['tables']['steps']:,} steps over "
        f"{args['days']} days, filled in {fill['fill_s']} s"
    )
    print(
        f"everystep_prune --older-than {args['older_than']} --batch-size {args['batch_size']}: "
        f"{p['seconds']} s (batches {p['batch_seconds']} s)"
        + ("" if p["quiet"]["quiet"] else f", others used {p['quiet']['other_cpus']} CPU")
    )
    print(
        f"  deleted {p['runs_deleted']:,} runs, {p['steps_deleted']:,} steps in "
        f"{p['batches']} batches ({p['calls']} calls)"
    )
    print(
        f"  statements: {p['statements']} in all, {p['statements_per_batch']} per batch "
        f"({p['statements_per_batch_all']} with the rest), "
        f"{p['statements_outside_calls']} outside the batch calls"
    )
    for title, call in (("first batch", p["first_batch"]), ("last call", p["last_call"])):
        if call:
            print(f"  {title}: {call['ms']} ms, read {call['read']}")
            print(f"    {', '.join(call['statements'])}")
    print(f"  read, whole command: {p['read']}")
    print(f"  read, batches summed: {p['batches_read']}; one batch at most {p['batch_read_max']}")
    deleted = p["read"].get("steps_deleted")
    if deleted is not None:
        once = "once" if deleted == p["steps_deleted"] else "NOT once"
        print(f"  step rows deleted (n_tup_del) {deleted:,} for {p['steps_deleted']:,}: {once}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("prune", args, lambda run: benchmark(args, run), print_summary)


if __name__ == "__main__":
    sys.exit(main())
