"""Chaos: worker processes killed, frozen and restarted, the database server restarted,
while 10,000 runs with known outcomes go through; then the invariants.

    .venv/bin/python bench/chaos.py --db postgres|mariadb|sqlite [--runs 10000]
        [--workers 3] [--pool 4] [--interval 3] [--heartbeat 1] [--orphan-timeout 8]
        [--stop-seconds S] [--db-restarts 2] [--pause 0.01] [--seed N] [--keep-logs]

On a fresh database of its own: ``--runs`` runs of the chaos mix
(``tests/testapp/chaos.py``: sequential, nested forks, a failure in a fork, a
``Terminal`` stop, an ``unsafe_to_repeat`` step, in turn) are scheduled, then
``--workers`` ``manage.py everystep_worker`` processes start with a short heartbeat and
orphan timeout. Every ``--interval`` seconds a random worker gets SIGKILL (and is started
again at once, alternately under the same name and a new one) or, except on SQLite,
SIGSTOP (SIGCONT once it has been frozen longer than the orphan timeout and its runs were
taken over). When a third
and two thirds of the runs are terminal (``--db-restarts``), the database server is
stopped, a worker is killed and started again while it is down, and the server is
started again (PostgreSQL, MariaDB; SQLite has no server). A worker that exits on its
own is started again after two seconds and counted apart. The disturbances
stop once every run has been claimed at least once; then every run must become terminal
within ``--drain-timeout`` seconds. Blocked runs are checked, settled with their known
charge, and must then complete. Prints the figures, appends one JSON line (``"kind":
"chaos"``) to ``bench/results/chaos.jsonl``, and exits 1 if an invariant does not hold.
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from chaos_fleet import Chaos, guarded
from harness import options
from harness.cpu import machine_busy_seconds
from harness.results import append_result, print_header, result_record
from harness.server import server_started
from harness.session import Session, session

TICK = 0.25
PROGRESS_EVERY = 10.0


# -- the phases ------------------------------------------------------------------------------


def unclaimed() -> int:
    from everystep.models import Workflow

    return Workflow.objects.filter(status="scheduled", started_at__isnull=True).count()


def disturb_until_all_claimed(fleet: Chaos) -> float:
    """The chaos phase; returns when the last disturbance ended."""
    from tests.testapp import chaos

    args, runs = fleet.args, fleet.args.runs
    thresholds = [runs * (i + 1) / (args.db_restarts + 1) for i in range(args.db_restarts)]
    if args.db == "sqlite":
        thresholds = []
    next_disturbance = time.time() + args.interval
    next_print = time.time() + PROGRESS_EVERY
    while True:
        time.sleep(TICK)
        fleet.watch_exits()
        for slot in fleet.slots:
            fleet.maybe_cont(slot)
        done, left = guarded(chaos.terminal_count), guarded(unclaimed)
        if done is None or left is None:
            continue
        if thresholds and done >= thresholds[0] and fleet.calm():
            if fleet.restart_database():
                thresholds.pop(0)
        elif time.time() >= next_disturbance:
            fleet.disturb()
            next_disturbance = time.time() + args.interval
        if time.time() >= next_print:
            print_progress(fleet, done)
            next_print = time.time() + PROGRESS_EVERY
        if left == 0 and not thresholds:
            break
    return settle_fleet(fleet)


def settle_fleet(fleet: Chaos) -> float:
    """Thaw a frozen worker, start the ones waiting to be; when the last of it happened."""
    for slot in fleet.slots:
        fleet.maybe_cont(slot, force=True)
    while not fleet.calm():
        time.sleep(TICK)
        fleet.watch_exits()
    return time.time()


def wait_terminal(expected: int, timeout: float, count: Callable[[], int]) -> float | None:
    """When (seconds since the epoch) ``count()`` reached ``expected``; None if it had
    not by the deadline."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if guarded(count) == expected:
            return time.time()
        time.sleep(TICK)
    return None


def settle_and_finish(timeout: float) -> dict[str, Any]:
    """Settle the blocked runs with their known charge; they must then complete."""
    from everystep.models import Workflow
    from tests.testapp import chaos

    began = time.time()
    settled = chaos.settle_blocked()
    done = Workflow.objects.filter(id__in=settled, status__in=["completed", "failed", "stopped"])
    reached = wait_terminal(len(settled), timeout, done.count)
    return {
        "settled": len(settled),
        "settled_s": None if reached is None else round(reached - began, 1),
    }


def print_progress(fleet: Chaos, done: int) -> None:
    kinds = Counter(entry["kind"] for entry in fleet.log)
    print(
        f"  {time.time() - fleet.began:6.0f}s  terminal {done}/{fleet.args.runs}  "
        f"kills {kinds['kill']}  stops {kinds['stop']}  db restarts {kinds['db-restart']}  "
        f"exits {kinds['exited']}",
        flush=True,
    )


# -- the record ----------------------------------------------------------------------------


def cpu_seconds() -> tuple[float, float]:
    """(the machine's busy CPU seconds, this process's and its waited-for children's)."""
    ours = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return machine_busy_seconds(), sum(u.ru_utime + u.ru_stime for u in ours)


def cpu_delta(before: tuple[float, float], wall: float) -> dict[str, float]:
    """CPUs busy over the run: the harness and its workers, and everything else (the
    database server, and any other session on the machine)."""
    machine, own = (after - first for after, first in zip(cpu_seconds(), before, strict=True))
    return {
        "wall_s": round(wall, 1),
        "bench_and_workers_cpus": round(own / wall, 2),
        "other_cpus": round((machine - own) / wall, 2),
    }


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("django", "psycopg", "mysqlclient"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def problem_summary(lines: list[str], top: int = 15) -> dict[str, int]:
    """The workers' WARNING+ lines by message, ids and numbers blanked: a chaos run logs
    thousands (every requeue, every refused late write)."""
    counts: Counter[str] = Counter()
    for line in lines:
        message = line.split(" ", 4)[-1]  # after "name: date time pid"
        counts[re.sub(r"[0-9a-f-]{32,36}|\d+(\.\d+)?", "#", message)[:120]] += 1
    return dict(counts.most_common(top))


def foreign_restart(expected: float | None) -> bool:
    """Whether the server started at another time than after the harness's last restart
    (another session on the machine restarted it: its re-executions are not ours).
    MariaDB reports its start to within 10 s only."""
    now = server_started()
    return expected is not None and now is not None and abs(now - expected) > 15


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    from tests.testapp import chaos, chaos_checks

    chaos.schedule_mix(args.runs, args.pause)
    cpu_before = cpu_seconds()
    fleet = Chaos(args, run.workers, random.Random(args.seed))
    fleet.server_started = server_started()
    fleet.start_fleet()
    calm_at = disturb_until_all_claimed(fleet)
    drained = wait_terminal(args.runs, args.drain_timeout, chaos.terminal_count)
    before = chaos_checks.analyse(fleet.events)
    settling = settle_and_finish(args.drain_timeout)
    after = chaos_checks.analyse(fleet.events)
    for slot in fleet.slots:
        # A worker the last disturbance started may still be importing Django: SIGTERM
        # before its handler exists kills it (-15), which says nothing about the drain.
        if slot.proc:
            slot.proc.wait_ready()
    exit_codes = [slot.proc.terminate() if slot.proc else None for slot in fleet.slots]
    found = chaos_checks.problems(before) + [
        f"after settling: {p}" for p in chaos_checks.problems(after)
    ]
    if any(code != 0 for code in exit_codes):
        found.append(f"workers did not all exit 0 after SIGTERM: {exit_codes}")
    if foreign_restart(fleet.server_started):
        found.append("the database server restarted besides the harness's restarts: run again")
    return {
        "figures": before,
        "after_settling": {**settling, **after},
        "problems": found,
        "chaos_s": round(calm_at - fleet.began, 1),
        "drain_s": None if drained is None else round(drained - calm_at, 1),
        "stop_seconds": fleet.stop_seconds(),
        "self_exits": fleet.self_exits,
        "exit_codes": exit_codes,
        "events": fleet.log,
        "cpu": cpu_delta(cpu_before, time.time() - fleet.began),
        "versions": versions(),
        "command": " ".join(["bench/chaos.py", *sys.argv[1:]]),
    }


def report(record: dict[str, Any]) -> None:
    print_header(record)
    a, f, s = record["args"], record["figures"], record["after_settling"]
    kinds = Counter(entry["kind"] for entry in record["events"])
    outage_kills = sum(1 for e in record["events"] if e.get("during_outage"))
    print(
        f"{f['runs']} runs ({f['runs'] // 5} of each workflow), {a['workers']} workers x pool "
        f"{a['pool']}, heartbeat {a['heartbeat']:g}s, orphan timeout {a['orphan_timeout']:g}s, "
        f"{1000 * a['pause']:g} ms per step body"
    )
    print(
        f"disturbances: {f['kills']} SIGKILL ({outage_kills} while the database was down), "
        f"{f['stops']} SIGSTOP (>= {record['stop_seconds']:g}s each), {f['restarts']} database "
        f"restarts; workers that exited on their own: {kinds['exited']} (started again)"
    )
    rows = [
        ("runs terminal", f"{f['terminal']} / {f['runs']}  {f['statuses']}"),
        ("runs with a wrong result", f"{f['wrong']}  (after settling: {s['wrong']})"),
        ("runs lost", f"{f['lost']}  (after settling: {s['lost']})"),
        ("steps recorded twice", f"{f['recorded_twice']}"),
        (
            "step executions",
            f"{f['executions']} for {f['recorded_steps']} recorded steps: "
            f"{f['re_executions']} re-executions",
        ),
        (
            "in flight when interrupted",
            f"{f['in_flight_interrupted']} executions (re-executions must not exceed it); "
            f"re-executions no interruption explains: {f['re_executions_unexplained']}",
        ),
        ("unsafe bodies run twice", f"{f['unsafe_executed_twice']}"),
        (
            "blocked runs",
            f"{f['blocked']} of {f['unsafe_interrupted']} unsafe steps interrupted; wrongly "
            f"blocked {f['blocked_wrong']}; settled {s['settled']}, completed in "
            f"{s['settled_s']}s, now {s['statuses']}",
        ),
        (
            "time to drain",
            f"{record['drain_s']}s after the last disturbance (chaos phase {record['chaos_s']}s)",
        ),
        ("exit codes at the end", f"{record['exit_codes']} (SIGTERM)"),
        ("CPUs busy", f"{record['cpu']}"),
    ]
    for label, value in rows:
        print(f"  {label:<28}{value}")
    examples = ("wrong_examples", "lost_examples", "blocked_examples", "unexplained_examples")
    for line in [line for key in examples for line in f[key]][:10]:
        print(f"    {line}")
    print(f"worker log lines at WARNING or above, by message: {record['worker_problems']}")
    verdict = "all hold" if not record["problems"] else "FAILED: " + "; ".join(record["problems"])
    print(f"invariants: {verdict}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    add = parser.add_argument
    add("--runs", type=int, default=10_000, help="runs of the chaos mix (10000)")
    add("--workers", type=int, default=3, help="worker processes (3)")
    add("--pool", type=int, default=4, help="worker --pool (4)")
    add("--interval", type=float, default=3.0, help="seconds between disturbances (3)")
    add("--heartbeat", type=float, default=1.0, help="worker --heartbeat (1)")
    add("--orphan-timeout", type=float, default=8.0, help="worker --orphan-timeout (8)")
    add("--stop-seconds", type=float, help="SIGSTOP at least this long (orphan timeout + 3 beats)")
    add("--db-restarts", type=int, default=2, help="database server restarts (2; not SQLite)")
    add("--pause", type=float, default=0.01, help="seconds each step body sleeps (0.01)")
    add("--seed", type=int, default=None, help="random seed of the disturbances")
    add("--drain-timeout", type=float, default=300.0, help="seconds to wait for the drain")
    add("--keep-logs", action="store_true", help="keep the worker logs")
    args = parser.parse_args(argv)
    if args.orphan_timeout <= 2 * args.heartbeat:
        parser.error("--orphan-timeout must exceed twice --heartbeat")
    if min(args.runs, args.workers, args.pool) < 1 or args.interval <= 0:
        parser.error("--runs, --workers, --pool and --interval must be positive")
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with session(args, "everystep-chaos-") as current:
        parts = benchmark(args, current)
        problems = current.workers.problems()
        record = result_record("chaos", args, current.info, problems, **parts)
    record["worker_problems"] = problem_summary(record["worker_problems"])
    report(record)
    append_result(record, args.results)
    return 1 if record["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
