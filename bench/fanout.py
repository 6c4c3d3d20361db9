"""Fan-out: one parent run that starts N child runs and gathers them, against N
independent runs, over the same worker processes (issue 19).

    .venv/bin/python bench/fanout.py --db postgres|mariadb|sqlite [--children 1000]
        [--workers 3] [--pool 8] [--poll 0.05] [--repeat 1] [--wait-quiet 60]
        [--source PATH] [--label NAME] [--keep-logs]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end), each
round measures two phases, each with ``--workers`` fresh ``manage.py everystep_worker
--pool 8 --poll 0.05`` processes (names of their own), started and idle before the
clock starts (start-up is not measured), stopped after:

- **fan-out**: one run of ``everystep_bench.fanout_workflows.bench_fanout(N, file)`` is
  scheduled; its body starts N children of ``bench_three`` (3 tiny steps, the workflow
  every other benchmark runs) with ``everystep.start`` and ``everystep.gather``s them.
  Timed from just before the schedule to the parent's ``completed_at``. The body appends
  a line to ``file`` on every pass (bench only, not a step): the parent's **passes**,
  counted across worker processes; the rest comes from the rows (the children's
  ``parent``, their first start and last end, the parent's records);
- **independent**: N runs of ``bench_three`` scheduled in one transaction
  (``harness.runs.schedule_runs``), timed from just before the schedule to the last
  ``completed_at``.

Rounds alternate the phase order. Per phase: schedule → done, runs/s (runs completed /
that time), the children's span (first ``started_at`` to last ``completed_at``), the
workers' and the database server's CPU per child run; for the fan-out, the passes, how
long the first pass took to start the N children, and the time from the last child's
end to the parent's (its wake-up and its last pass, which replays N start records).
The summary gives medians and the ratio fan-out / independent. Appends one JSON line
to ``bench/results/fanout.jsonl``.

A parent still waiting ``STALL_S`` seconds after every child ended, with no due time and
no ``RunWait`` row (nothing left that could wake it), is a lost wake-up, not a slow
machine: the script then stops with exit status 2, the parent's row and its passes
(worker logs kept), instead of timing out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from harness import options, runs, server
from harness.cpu import CpuMeter, wait_quiet
from harness.results import print_header, print_problems
from harness.session import Session, run_benchmark
from harness.workers import Workers

FANOUT, INDEPENDENT = "fan-out", "independent"
WAIT_EVERY = 0.05  # how often the benchmark looks at the rows while a phase runs
# A parent that waits with every child ended and nothing left to wake it, for this long
# (above the heartbeat's 5 s sweep of waiters left asleep), is stuck, not slow.
STALL_S = 15.0


class ParentStalled(Exception):
    """The parent waits although every child has ended, with no ``RunWait`` row left and
    no due time: nothing will ever wake it (a lost wake-up in the library, not a slow
    machine), so the phase is not measured again."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--children", type=int, default=1000, help="child runs (1000)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (3)")
    parser.add_argument("--pool", type=int, default=8, help="worker --pool (8)")
    parser.add_argument("--poll", type=float, default=0.05, help="worker --poll (0.05)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (1)")
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    if min(args.children, args.workers, args.pool, args.repeat) < 1:
        parser.error("--children, --workers, --pool and --repeat must be at least 1")
    return args


# -- a phase -------------------------------------------------------------------------------


def seconds(later: datetime | None, earlier: datetime | float | None) -> float | None:
    """``later - earlier`` in seconds (``earlier``: a datetime or a Unix time)."""
    if later is None or earlier is None:
        return None
    start = earlier if isinstance(earlier, float) else earlier.timestamp()
    return round(later.timestamp() - start, 3)


def stalled(parent_id: uuid.UUID, children: int) -> str | None:
    """What the parent's row looks like, if it waits with every child ended and nothing
    to wake it (no due time, no ``RunWait`` row for the sweep to find); else None."""
    from everystep.models import FINAL_STATUSES, RunWait, Status, Workflow

    parent = Workflow.objects.filter(id=parent_id).values().first()
    if parent is None or parent["status"] != Status.SCHEDULED or parent["due_at"] is not None:
        return None
    kids = Workflow.objects.filter(parent_id=parent_id)
    if kids.count() < children or kids.exclude(status__in=FINAL_STATUSES).exists():
        return None
    if RunWait.objects.filter(waiter_id=parent_id).exists():
        return None
    shown = ("status", "due_at", "waiting_for", "claimed_by", "started_at", "updated_at")
    return ", ".join(f"{key}={parent[key]}" for key in shown)


def phase(
    args: argparse.Namespace, workers: Workers, scratch: Path, what: str, name: str
) -> dict[str, Any]:
    """One phase (``FANOUT`` or ``INDEPENDENT``) on fresh workers; its figures."""
    from django.db import transaction
    from django.db.models import Count, Max, Min
    from everystep_bench.fanout_workflows import bench_fanout
    from everystep_bench.workflows import bench_three

    import everystep
    from everystep.models import FINAL_STATUSES, Status, Step, Workflow

    runs.tidy_tables(args.db)
    quiet = wait_quiet(args.wait_quiet)
    flags = ("--pool", str(args.pool), "--poll", str(args.poll))
    fleet = workers.start_fleet(name, args.workers, *flags)
    passes_file = scratch / f"{name}-{uuid.uuid4().hex[:8]}.passes"
    meter = CpuMeter(args.db, [worker.pid for worker in fleet])
    meter.begin()

    parent_id: uuid.UUID | None = None
    looked, stuck_since = 0.0, None

    def alive() -> None:
        nonlocal looked, stuck_since
        for worker in fleet:
            worker.check_alive()
        if parent_id is None or time.monotonic() - looked < 1.0:
            return
        looked = time.monotonic()
        state = stalled(parent_id, args.children)
        stuck_since = None if state is None else stuck_since or looked
        if state is not None and stuck_since is not None and looked - stuck_since > STALL_S:
            raise ParentStalled(
                f"parent run {parent_id} still waits {looked - stuck_since:.0f}s after every "
                f"child ended, with nothing left to wake it ({state}); passes: "
                f"{passes_file.read_text().splitlines() if passes_file.exists() else []}"
            )

    timeout = max(600.0, args.children / 5)
    scheduled = time.time()
    if what == FANOUT:
        with transaction.atomic():
            parent_id = everystep.schedule(bench_fanout, args.children, str(passes_file)).pk
        ended = Workflow.objects.filter(id=parent_id, status__in=FINAL_STATUSES)
        runs.wait_for(ended.exists, timeout, WAIT_EVERY, alive)
        measured = Workflow.objects.filter(parent_id=parent_id)
    else:
        since = runs.id_floor(scheduled)
        runs.schedule_runs(bench_three, args.children)
        runs.wait_for(lambda: runs.pending_runs() == 0, timeout, WAIT_EVERY, alive)
        measured = Workflow.objects.filter(id__gte=since)
    observed = round(time.time() - scheduled, 3)
    cpu = meter.end()
    worker_cpu = cpu["worker_s"]
    exit_codes = [worker.terminate() for worker in fleet]

    span = measured.aggregate(
        last_created=Max("created_at"),  # the last child written: the starts' end
        first_started=Min("started_at"),
        last_completed=Max("completed_at"),
    )
    statuses = dict(measured.order_by().values_list("status").annotate(n=Count("id")))
    completed = statuses.get(Status.COMPLETED, 0)
    result: dict[str, Any] = {
        "phase": what,
        "children": args.children,
        "workers": args.workers,
        "runs_completed": completed,
        "statuses": statuses,
        "steps": Step.objects.filter(workflow__in=measured).count(),
        "children_span_s": seconds(span["last_completed"], span["first_started"]),
        "observed_s": observed,  # by the benchmark's polling, to within WAIT_EVERY
        "worker_cpu_ms_per_run": round(1000 * worker_cpu / max(completed, 1), 3),
        "db_cpu_ms_per_run": round(1000 * cpu["db_server_s"] / max(completed, 1), 3),
        "cpu": cpu,
        "quiet": quiet,
        "exit_code": next((code for code in exit_codes if code != 0), 0),  # None: killed
    }
    if what == INDEPENDENT:
        result["to_done_s"] = seconds(span["last_completed"], scheduled)
    else:
        assert parent_id is not None
        result.update(parent_figures(args, parent_id, passes_file, span, scheduled))
    result["runs_per_s"] = round(completed / result["to_done_s"], 1) if completed else 0.0
    return result


def parent_figures(
    args: argparse.Namespace,
    parent_id: uuid.UUID,
    passes_file: Path,
    span: dict[str, Any],
    scheduled: float,
) -> dict[str, Any]:
    """The fan-out's own figures: the parent's passes and records, how long its first
    pass took to start the children, and its wake-up after the last child ended."""
    from everystep.models import Status, Step, Workflow

    parent = Workflow.objects.get(id=parent_id)
    lines = passes_file.read_text().splitlines() if passes_file.exists() else []
    pass_times = [float(line.split()[0]) for line in lines]
    expected = args.children * args.children + 2 * args.children
    if parent.status != Status.COMPLETED or parent.result != expected:
        raise RuntimeError(
            f"the parent ended {parent.status} with result {parent.result!r} "
            f"(expected {expected}), error {parent.error!r}"
        )
    return {
        "to_done_s": seconds(parent.completed_at, scheduled),
        "passes": len(lines),
        "pass_at_s": [round(t - scheduled, 3) for t in pass_times],
        "pass_workers": sorted({line.split()[1] for line in lines}),
        "parent_records": Step.objects.filter(workflow_id=parent_id).count(),
        "parent_recoveries": parent.recoveries,
        # The first pass: from the parent's claim to the last child's insert.
        "starting_s": seconds(span["last_created"], parent.started_at),
        # The wake-up and the last pass (which replays the N start records).
        "last_child_to_parent_s": seconds(parent.completed_at, span["last_completed"]),
    }


def print_phase(round_no: int, p: dict[str, Any]) -> None:
    line = (
        f"  round {round_no}  {p['phase']:<12} {p['to_done_s']:>7.3f}s to done  "
        f"{p['runs_per_s']:>7.1f} runs/s  {p['runs_completed']} runs {p['steps']} steps, "
        f"children {p['children_span_s']}s first start -> last end  "
        f"worker CPU {p['worker_cpu_ms_per_run']:.2f} ms/run  "
        f"db CPU {p['db_cpu_ms_per_run']:.2f} ms/run  other {p['cpu']['other_s']}s"
    )
    if p["phase"] == FANOUT:
        line += (
            f"\n           passes {p['passes']} (at {p['pass_at_s']} s), starting the "
            f"children {p['starting_s']}s, last child -> parent done "
            f"{p['last_child_to_parent_s']}s, {p['parent_records']} parent records"
        )
    if not p["quiet"]["quiet"]:
        line += f"  (started while others used {p['quiet']['other_cpus']} CPU)"
    print(line, flush=True)


# -- the benchmark ---------------------------------------------------------------------------


def median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(phases: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for what in (FANOUT, INDEPENDENT):
        mine = [p for p in phases if p["phase"] == what]
        summary[what] = {
            key: median([p[key] for p in mine])
            for key in (
                "to_done_s",
                "runs_per_s",
                "children_span_s",
                "worker_cpu_ms_per_run",
                "db_cpu_ms_per_run",
            )
        }
    fan = [p for p in phases if p["phase"] == FANOUT]
    summary[FANOUT].update(
        {
            "passes": [p["passes"] for p in fan],
            "starting_s": median([p["starting_s"] for p in fan]),
            "last_child_to_parent_s": median([p["last_child_to_parent_s"] for p in fan]),
        }
    )
    independent = [p for p in phases if p["phase"] == INDEPENDENT]
    ratios = [
        f["to_done_s"] / i["to_done_s"]
        for f, i in zip(fan, independent, strict=True)  # one of each per round
        if f["to_done_s"] and i["to_done_s"]
    ]
    summary["ratio_fanout_to_independent"] = median(ratios)
    return summary


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    phases: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = [FANOUT, INDEPENDENT] if index % 2 == 0 else [INDEPENDENT, FANOUT]
        for what in order:
            name = f"fanout-{index + 1}-{'parent' if what == FANOUT else 'indep'}"
            measured = server.attempts(
                name,
                lambda what=what, name=name: phase(args, run.workers, run.scratch, what, name),
                run.workers.kill_all,
            )
            phases.append(measured)
            print_phase(index + 1, measured)
    return {"phases": phases, "summary": summarise(phases)}


def print_summary(record: dict[str, Any]) -> None:
    args, s = record["args"], record["summary"]
    print_header(record)
    n = args["children"]
    print(
        f"{n} runs of bench_three (3 steps): children of one parent (start + gather) vs "
        f"independent; {args['workers']} workers --pool {args['pool']} --poll "
        f"{args['poll']}; medians of {args['repeat']} round(s)"
    )
    head = ("", "to done s", "runs/s", "children span s", "wkr ms/run", "db ms/run")
    form = "  {:<28}{:>10}{:>8}{:>17}{:>11}{:>10}"
    print(form.format(*head))
    for what, label in ((FANOUT, f"1 parent + {n} children"), (INDEPENDENT, f"{n} independent")):
        m = s[what]
        cells = (
            label,
            m["to_done_s"],
            m["runs_per_s"],
            m["children_span_s"],
            m["worker_cpu_ms_per_run"],
            m["db_cpu_ms_per_run"],
        )
        print(form.format(*map(str, cells)))
    fan = s[FANOUT]
    print(
        f"  fan-out / independent, time to done: {s['ratio_fanout_to_independent']}x; "
        f"the parent's passes per round: {fan['passes']}; its first pass started the "
        f"children in {fan['starting_s']}s; last child -> parent done "
        f"{fan['last_child_to_parent_s']}s"
    )
    print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run_benchmark("fanout", args, lambda run: benchmark(args, run), print_summary)
    except ParentStalled as exc:
        print(f"fanout.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
