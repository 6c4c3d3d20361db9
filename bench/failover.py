"""Failover to a promoted replica (issue 37) at scale: the scenario of
``tests/netfaults/test_failover.py`` with more runs, and its figures.

    .venv/bin/python bench/failover.py [--runs 2000] [--synchronous] [--stall S]
        [--standby-first S] [--workers 2] [--pool 4] [--pause 0.01] [--at 0.3]
        [--bound 300] [--keep-logs]

A PostgreSQL 15 primary and its streaming replica (``tests/netfaults/pgpair.py``:
clusters of their own in a temporary directory, synchronous with ``--synchronous``),
``--workers`` worker processes reaching the primary through a TCP proxy, ``--runs`` runs of
the chaos mix's sequential (5 steps) and fork (7 steps) workflows. Once ``--at`` of the runs
are completed, the primary is stopped with ``pg_ctl stop -m immediate``'s signal, the
replica promoted and the proxy switched to it (connections through it reset); with
``--stall S`` the link to the replica first stalls S seconds (the WAL senders frozen), with
``--standby-first S`` the proxy moves S seconds before the promotion. The workers are not
restarted.

Prints: runs and their outcomes, time to recover (the stop to the first run completed
after it) and to finish, step records a client saw committed and lost, records the old
primary had committed and the new one lacks (the asynchronous window, read from the old
primary opened again afterwards), step executions beyond one per recorded step, and
whether every invariant held; exits 1 if one did not. Appends one JSON line (``"kind":
"failover"``) to ``bench/results/failover.jsonl`` (``--results DIR``: elsewhere).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.options import add_results_argument
from harness.results import append_result, loadavg, plain_args, source_info

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> None:
    """The test settings, as the workers have them; this process opens no connection of
    Django's (it reads the clusters with raw connections)."""
    sys.path.insert(0, str(ROOT))
    os.environ["EVERYSTEP_TEST_DB"] = "postgres"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()


def wait_for(predicate: Any, timeout: float, workers: list[Any]) -> float | None:
    """When ``predicate()`` first held (monotonic seconds), or None by the deadline;
    a worker that died meanwhile ends the bench."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        for worker in workers:
            if worker.proc.poll() is not None:
                raise SystemExit(f"worker {worker.name} exited:\n{worker.log()[-3000:]}")
        time.sleep(0.1)
    return None


def scenario(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """Run it; the figures of ``test_failover.analyse`` and this bench's own."""
    from tests.acceptance.conftest import WorkerProcess
    from tests.netfaults import test_failover as failover
    from tests.netfaults.pgpair import PgPair
    from tests.netfaults.proxy import Proxy

    flags = ["--pool", str(args.pool), "--poll", "0.05", "--heartbeat", "0.5"]
    flags += ["--orphan-timeout", "8"]
    with PgPair(synchronous=args.synchronous) as pair:
        proxy = Proxy(upstream=("127.0.0.1", pair.primary_port), listen=("127.0.0.1", 0)).start()
        workers: list[Any] = []
        try:
            env = failover.database_env(f"failover_{uuid.uuid4().hex[:8]}", proxy.port)
            database = failover.prepare(pair, env, args.runs, args.pause)
            for number in range(args.workers):
                name = f"failover-{number}"
                workers.append(WorkerProcess(name, flags, logs / f"{name}.log", env=env))
            began = time.monotonic()

            def progressed() -> bool:
                done = failover.terminal_count(pair.primary_port, database)
                return done >= args.at * args.runs

            wait_for(progressed, args.bound, workers)
            before_s = time.monotonic() - began
            happened = failover.fail_over(pair, proxy, database, args.stall, args.standby_first)
            stopped = time.monotonic()

            def finished() -> bool:
                return failover.terminal_count(pair.replica_port, database) == args.runs

            done = wait_for(finished, args.bound, workers)
            alive = [worker.proc.poll() is None for worker in workers]
            new = failover.read_records(pair.replica_port, database)
            pair.reopen_old_primary()
            old = failover.read_records(pair.primary_port, database)
        finally:
            for worker in workers:
                worker.kill()
            proxy.stop()
    figures = failover.analyse(happened, old, new)
    figures["problems"] = failover.problems(figures, args.synchronous)
    if done is None:
        figures["problems"].append(f"not every run terminal within {args.bound:g}s")
    if not all(alive):
        figures["problems"].append(f"workers alive at the end: {alive}")
    figures.update(
        before_failover_s=round(before_s, 1),
        finish_s=None if done is None else round(done - stopped, 1),
    )
    return figures


def report(args: argparse.Namespace, f: dict[str, Any]) -> None:
    replication = "synchronous" if args.synchronous else "asynchronous"
    print(
        f"\n{f['runs']} runs (chaos.sequential and chaos.forks in turn), {args.workers} workers "
        f"x pool {args.pool}, {1000 * args.pause:g} ms per step body; {replication} "
        f"replication, stall {args.stall:g}s, standby first {args.standby_first:g}s; "
        f"failover after {f['before_failover_s']}s, at {args.at:.0%} of the runs"
    )
    rows = [
        ("runs terminal", f"{sum(f['statuses'].values())} / {f['runs']}  {f['statuses']}"),
        ("runs wrong", f"{len(f['wrong'])}  {f['wrong'][:3]}"),
        ("steps recorded twice", f"{f['recorded_twice']}"),
        ("proxy switched", f"{f['switch_s']}s after the primary's stop"),
        ("time to recover", f"{f['recovery_s']}s (the stop to the first run completed after)"),
        ("time to finish", f"{f['finish_s']}s (the stop to every run terminal)"),
        (
            "records seen, lost",
            f"{f['seen_lost']} of {f['seen_committed']} step records a client read as "
            "committed just before the stop",
        ),
        (
            "records lost (window)",
            f"{f['lost']} of {f['committed_on_old_primary']} step records on the old primary; "
            f"never run again: {len(f['lost_not_run_again'])}",
        ),
        (
            "step executions",
            f"{f['executions']} for {f['step_records']} recorded steps: "
            f"{f['re_executions']} re-executions",
        ),
        ("completed after, by", f"{f['completed_after_by']}"),
    ]
    for label, value in rows:
        print(f"  {label:<24}{value}")
    verdict = "all hold" if not f["problems"] else "FAILED: " + "; ".join(f["problems"])
    print(f"invariants: {verdict}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--runs", type=int, default=2000, help="runs (2000)")
    add("--synchronous", action="store_true", help="synchronous replication (asynchronous)")
    add("--stall", type=float, default=0.0, help="seconds replication stalls first (0)")
    add("--standby-first", type=float, default=0.0, help="proxy moves S s before promotion (0)")
    add("--workers", type=int, default=2, help="worker processes (2)")
    add("--pool", type=int, default=4, help="worker --pool (4)")
    add("--pause", type=float, default=0.01, help="seconds each step body sleeps (0.01)")
    add("--at", type=float, default=0.3, help="fail over once this share is completed (0.3)")
    add("--bound", type=float, default=300.0, help="seconds to wait for each phase (300)")
    add("--keep-logs", action="store_true", help="keep the worker logs")
    add("--label", default="current", help="names the result line (current)")
    add_results_argument(parser)
    args = parser.parse_args(argv)
    if min(args.runs, args.workers, args.pool) < 1 or not 0 < args.at < 1:
        parser.error("--runs, --workers and --pool must be positive, --at between 0 and 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the clusters run as the postgres user (runuser)")
    setup_django()
    started = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "loadavg_start": loadavg()}
    logs = Path(tempfile.mkdtemp(prefix="everystep-failover-"))
    finished = False
    try:
        figures = scenario(args, logs)
        finished = True
    finally:
        if args.keep_logs or not finished:
            print(f"worker logs kept in {logs}", file=sys.stderr)
        else:
            shutil.rmtree(logs, ignore_errors=True)
    report(args, figures)
    append_result(result_line(args, started, figures), args.results)
    return 1 if figures["problems"] else 0


def result_line(
    args: argparse.Namespace, started: dict[str, Any], figures: dict[str, Any]
) -> dict[str, Any]:
    """The result line: this bench has no database of the harness's, so the machine part
    is read here (the servers are the bench's own clusters)."""
    machine = {
        **started,
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_end": loadavg(),
    }
    return {
        "kind": "failover",
        "db": "postgres",
        "label": args.label,
        "args": plain_args(args),
        "source": source_info(ROOT),
        "machine": machine,
        **figures,
    }


if __name__ == "__main__":
    sys.exit(main())
