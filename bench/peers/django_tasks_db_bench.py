"""Django ``@task`` on everystep's backend beside django-tasks-db's ``db_worker``, in one run.

The same machine, database server, Django, backport and N for both, measured in one
invocation so the ratios hold even on a day the machine is slow. Run it with the venv
that ``bench/peers/setup-django-tasks-db.sh`` makes (the project's ``.venv`` does not
have django-tasks-db, and must not)::

    bash bench/peers/setup-django-tasks-db.sh
    /tmp/django-tasks-db-venv/bin/python bench/peers/django_tasks_db_bench.py
        [--db postgres|mariadb|sqlite] [--tasks 2000] [--concurrency 1 4] [--repeat 3]
        [--samples 50] [--source PATH] [--label NAME] [--results DIR] [--wait-quiet 60]
        [--body hash|orm] [--processes]

One benchmark database (``everystep_test_bench_…``, dropped at the end) holds both
backends' tables (settings ``everystep_bench.django_tasks_db_settings``: TASKS
``default`` = everystep's backend, ``dtdb`` = ``django_tasks_db.DatabaseBackend``).
Before every phase both backends' tables are emptied (and ``VACUUM ANALYZE``d on
PostgreSQL), so each phase starts from the same empty tables. Three kinds of task, the
bodies in ``everystep_bench/django_tasks_db_tasks.py`` (a SHA-256 over 4 KiB; with
``--body orm`` also one ORM insert, as most task bodies write something):

- ``everystep-step``: everystep's ``durable`` task, its work in one ``@step``;
- ``everystep-plain``: everystep's ``plain`` task (no step): like for like with
- ``django-tasks-db``: the same ``plain`` task, ``plain.using(backend="dtdb")``.

Each round (``--repeat``; the order of the kinds reverses every other round):

1. **enqueue**: no worker running; ``--tasks`` calls of ``task.enqueue(i)`` in this one
   process, each in its own transaction (autocommit, as from a view): tasks/s and this
   process's CPU per enqueue;
2. **execution**, for each ``--concurrency`` C: the worker side started and idle first
   (everystep: ONE ``manage.py everystep_worker --pool C``; django-tasks-db: C
   ``manage.py db_worker --backend dtdb`` processes, since one runs one task at a time),
   then ``--tasks`` enqueued in ONE transaction (its enqueue rate is reported too), then
   timed until every task finished. tasks/s from the rows, as ``compare.py``: completed
   ÷ (last finish - first start) (everystep: ``started_at``/``completed_at`` of the runs;
   django-tasks-db: ``started_at``/``finished_at`` of ``DBTaskResult``); ``steady``: the
   middle 80 % of finishes ÷ their time span, free of start-up and tail effects; also the
   wall time from the commit, and the workers' and the database server's CPU per task.

Then **pickup** latency per kind: one idle worker with its defaults; ``--samples`` times,
one task enqueued in a transaction, from its commit (``time.time()`` here) to the start
of its body (``time.time()`` in the worker, returned in the task's result), p50/p95;
between samples an idle gap drawn uniformly from 0.2 s to 0.2 s + the longest poll
interval, so each commit lands at a random phase of the worker's poll.

``--processes`` (issue 56): everystep's side at C is ``everystep_worker --processes C
--pool 1`` (C worker processes under one supervisor, as C db_workers are C processes),
and its pickup worker ``--processes`` the largest C; the workers' CPU counts the
children's.

Settings: everystep's worker defaults (``--pool 4``, ``--poll 0.2``, LISTEN/NOTIFY on
PostgreSQL), but ``--pool C`` in the execution phases; db_worker's defaults
(``--interval 1``, a random start-up delay below 1 s, INFO log lines per task, which go
to a file here), ``--backend dtdb``. The result line (kind ``tasks``) goes to
``bench/results/tasks.jsonl`` (``--results DIR`` for a smoke run).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Run as a script, this folder comes first on sys.path: a file here named like a package
# (a django_tasks.py) would shadow it. bench/ is what the harness needs.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
from harness import options  # noqa: E402
from harness.cpu import CpuMeter, process_tree, wait_quiet  # noqa: E402
from harness.results import print_header, print_problems  # noqa: E402
from harness.runs import percentile, wait_for  # noqa: E402
from harness.server import attempts  # noqa: E402
from harness.session import ROOT, Session, run_benchmark  # noqa: E402
from harness.workers import WorkerProcess, worker_env  # noqa: E402

SETTINGS = "everystep_bench.django_tasks_db_settings"
DTDB = "dtdb"  # the TASKS alias of django-tasks-db's backend
STEP, PLAIN, PEER = "everystep-step", "everystep-plain", "django-tasks-db"
# ``--body orm``: every kind's body also inserts one row (``written``).
BODY = {"orm": False}
# --processes: the largest C, else 0 (everystep's side is one process with a pool).
SHAPE = {"processes": 0}
KINDS = (STEP, PLAIN, PEER)
READY_TIMEOUT = 60.0


# -- the kinds of task ---------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One kind of task: its ``Task`` (bound to its backend) and its rows."""

    name: str

    @property
    def everystep(self) -> bool:
        return self.name != PEER

    def task(self) -> Any:
        from everystep_bench import django_tasks_db_tasks as tasks

        orm = BODY["orm"]
        if self.name == STEP:
            return tasks.durable_written if orm else tasks.durable
        body = tasks.written if orm else tasks.plain
        return body if self.name == PLAIN else body.using(backend=DTDB)

    def _rows(self) -> tuple[Any, str, str, Any, Any]:
        """(queryset of its rows, start field, finish field, success, pending statuses)."""
        if self.everystep:
            from everystep.models import Status, Workflow

            runs = Workflow.objects.filter(queue__isnull=False)
            return (
                runs,
                "started_at",
                "completed_at",
                Status.COMPLETED,
                [Status.SCHEDULED, Status.RUNNING],
            )
        from django_tasks_db.compat import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        return (
            DBTaskResult.objects.all(),
            "started_at",
            "finished_at",
            TaskResultStatus.SUCCESSFUL,
            [TaskResultStatus.READY, TaskResultStatus.RUNNING],
        )

    def pending(self) -> int:
        rows, _, _, _, waiting = self._rows()
        return int(rows.filter(status__in=waiting).count())

    def finished(self, result_id: str) -> bool:
        rows, _, _, _, waiting = self._rows()
        return bool(rows.filter(id=result_id).exclude(status__in=waiting).exists())

    def count(self) -> int:
        rows, *_ = self._rows()
        return int(rows.count())

    def span(self) -> dict[str, Any]:
        """Completed tasks, tasks/s from the first start to the last finish, and over
        the middle 80 % of finishes (``steady``); the statuses of all."""
        from django.db.models import Count

        rows, start, finish, success, _ = self._rows()
        done = rows.filter(status=success)
        pairs = list(done.values_list(start, finish))
        statuses = dict(rows.order_by().values_list("status").annotate(n=Count("id")))
        out: dict[str, Any] = {"completed": len(pairs), "statuses": statuses}
        if self.everystep:
            from everystep.models import Step

            out["steps"] = Step.objects.count()
        if not pairs:
            return {**out, "span_s": None, "tasks_per_s": 0.0, "steady_tasks_per_s": 0.0}
        first = min(p[0] for p in pairs)
        ends = sorted(p[1] for p in pairs)
        seconds = (ends[-1] - first).total_seconds()
        low, high = len(ends) // 10, len(ends) - 1 - len(ends) // 10
        middle = (ends[high] - ends[low]).total_seconds()
        return {
            **out,
            "first_start": first,
            "last_finish": ends[-1],
            "span_s": round(seconds, 3),
            "tasks_per_s": round(len(pairs) / seconds, 1) if seconds > 0 else None,
            "steady_tasks_per_s": round((high - low) / middle, 1) if middle > 0 else None,
        }


def tidy(db: str) -> None:
    """Both backends' tables emptied (and vacuumed on PostgreSQL): each phase starts
    from the same empty tables."""
    from django.db import connection
    from django_tasks_db.models import DBTaskResult

    from everystep.models import Step, Workflow
    from tests.testapp.models import Execution

    Step.objects.all().delete()
    Workflow.objects.all().delete()
    DBTaskResult.objects.all().delete()
    Execution.objects.all().delete()
    if db == "postgres":
        with connection.cursor() as cursor:
            cursor.execute(
                "VACUUM ANALYZE everystep_workflow, everystep_step, "
                f"{connection.ops.quote_name(DBTaskResult._meta.db_table)}"
            )


def own_cpu() -> float:
    # Not /proc's ticks (10 ms): a few milliseconds of enqueues must register.
    return time.process_time()


def enqueue_many(kind: Kind, count: int, one_transaction: bool) -> dict[str, Any]:
    """``count`` enqueues of ``kind``'s task from this process: tasks/s and CPU µs each."""
    from django.db import transaction

    task = kind.task()
    cpu0, began = own_cpu(), time.perf_counter()
    if one_transaction:
        with transaction.atomic():
            for i in range(count):
                task.enqueue(i)
    else:
        for i in range(count):
            task.enqueue(i)
    seconds, cpu = time.perf_counter() - began, own_cpu() - cpu0
    return {
        "enqueued": count,
        "seconds": round(seconds, 3),
        "tasks_per_s": round(count / seconds, 1),
        "cpu_us_per_task": round(1e6 * cpu / count, 1),
    }


# -- django-tasks-db's worker --------------------------------------------------------------


class DbWorker(WorkerProcess):
    """One ``manage.py db_worker --backend dtdb`` of the measured tree, logging to its
    own file; ``Workers`` keeps it so the session's ``finally`` kills it."""

    def __init__(self, source: Path, name: str, log_path: Path, log_level: str) -> None:
        self.name = name
        self.log_path = log_path
        command = [
            sys.executable,
            str(source / "manage.py"),
            "db_worker",
            "--backend",
            DTDB,
            "--worker-id",
            name,
        ]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=source,
                env=worker_env(source, log_level, {}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until it has logged its start, slept its start-up delay (below 1 s), and its
        CPU use has settled."""

        def started() -> bool:
            return "Starting worker" in self.log_path.read_text(errors="replace")

        wait_for(started, timeout, 0.05, self.check_alive)
        time.sleep(1.05)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self.cpu_seconds()
            time.sleep(0.3)
            self.check_alive()
            if self.cpu_seconds() - before <= 0.03:
                return
        raise TimeoutError(f"db_worker {self.name} kept busy for {timeout:.0f}s after start")


def start_side(run: Session, kind: Kind, concurrency: int, label: str) -> list[WorkerProcess]:
    """Idle workers for ``kind`` with ``concurrency`` tasks in flight at most: one
    everystep worker ``--pool concurrency``, or ``concurrency`` db_workers; ``0``: the
    defaults (everystep's pool, one db_worker)."""
    if kind.everystep:
        processes = SHAPE["processes"] and (concurrency or SHAPE["processes"])
        if processes:
            return [run.workers.start_group(label, processes, "--pool", "1")]
        flags = ("--pool", str(concurrency)) if concurrency else ()
        return run.workers.start_fleet(label, 1, *flags)
    fleet = []
    for number in range(1, max(concurrency, 1) + 1):
        name = label if concurrency <= 1 else f"{label}-w{number}"
        taken = {worker.name for worker in run.workers.started}
        base, suffix = name, 1
        while name in taken:  # a phase measured again: a log of its own
            suffix += 1
            name = f"{base}-{suffix}"
        worker = DbWorker(
            run.workers.source, name, run.scratch / f"{name}.log", run.workers.log_level
        )
        run.workers.started.append(worker)
        fleet.append(worker)
    for worker in fleet:
        worker.wait_ready()
    return fleet


def stop(fleet: list[WorkerProcess]) -> list[int | None]:
    return [worker.terminate() for worker in fleet]


def kill(fleet: list[WorkerProcess]) -> None:
    for worker in fleet:
        worker.kill()


# -- phases --------------------------------------------------------------------------------


def enqueue_phase(args: argparse.Namespace, kind: Kind) -> dict[str, Any]:
    """No worker: ``--tasks`` enqueues, each its own transaction."""
    tidy(args.db)
    quiet = wait_quiet(args.wait_quiet)
    measured = enqueue_many(kind, args.tasks, one_transaction=False)
    rows = kind.count()
    if rows != args.tasks:
        raise RuntimeError(f"{kind.name}: {rows} rows after {args.tasks} enqueues")
    return {"phase": "enqueue", "kind": kind.name, **measured, "quiet": quiet}


def execution_phase(
    args: argparse.Namespace, run: Session, kind: Kind, concurrency: int, round_no: int
) -> dict[str, Any]:
    """Idle workers, ``--tasks`` enqueued in one transaction, until all finished."""
    from django.utils import timezone

    fleet: list[WorkerProcess] = []

    def measure() -> dict[str, Any]:
        tidy(args.db)
        fleet[:] = start_side(run, kind, concurrency, f"{kind.name}-c{concurrency}-r{round_no}")
        quiet = wait_quiet(args.wait_quiet)
        meter = CpuMeter(args.db, [pid for worker in fleet for pid in process_tree(worker.pid)])
        meter.begin_workers()
        enqueued = enqueue_many(kind, args.tasks, one_transaction=True)
        committed = timezone.now()
        meter.begin()

        def alive() -> None:
            for worker in fleet:
                worker.check_alive()

        wait_for(lambda: kind.pending() == 0, max(600.0, args.tasks / 5), 0.05, alive)
        cpu = meter.end()
        exit_codes = stop(fleet)
        span = kind.span()
        done = max(span["completed"], 1)
        wall = (span.pop("last_finish") - committed).total_seconds() if "last_finish" in span else 0
        span.pop("first_start", None)
        return {
            "phase": "execution",
            "kind": kind.name,
            "concurrency": concurrency,
            "processes": len(fleet)
            if not kind.everystep
            else (SHAPE["processes"] and concurrency) or 1,
            **span,
            "wall_from_commit_s": round(wall, 3),
            "enqueue_one_transaction": enqueued,
            "worker_cpu_ms_per_task": round(1000 * cpu["worker_s"] / done, 3),
            "db_cpu_ms_per_task": round(1000 * cpu["db_server_s"] / done, 3),
            "cpu": cpu,
            "quiet": quiet,
            "exit_codes": exit_codes,
        }

    def cleanup() -> None:
        kill(fleet)

    return attempts(f"{kind.name} C={concurrency}", measure, cleanup)


def pickup_phase(
    args: argparse.Namespace, run: Session, kind: Kind, longest_poll: float
) -> dict[str, Any]:
    """One idle worker with its defaults; ``--samples`` single tasks, commit → body start."""
    from django.db import transaction

    fleet: list[WorkerProcess] = []

    def one(i: int) -> tuple[float, float]:
        task = kind.task()
        with transaction.atomic():
            result = task.enqueue(i)
        committed = time.time()
        wait_for(lambda: kind.finished(result.id), 60, 0.01, fleet[0].check_alive)
        done = task.get_result(result.id)
        value = done.return_value
        if value["digest"] != fingerprint(i):
            raise RuntimeError(f"{kind.name}: wrong result {value!r} for {i}")
        claim = done.started_at.timestamp() - committed
        return value["started"] - committed, claim

    def measure() -> dict[str, Any]:
        tidy(args.db)
        fleet[:] = start_side(run, kind, 0, f"pickup-{kind.name}")
        one(-1)  # warm-up: imported, connected, the task resolved once
        quiet = wait_quiet(args.wait_quiet)
        bodies, claims = [], []
        for i in range(args.samples):
            time.sleep(random.uniform(0.2, 0.2 + longest_poll))
            body, claim = one(i)
            bodies.append(1000 * body)
            claims.append(1000 * claim)
        exit_codes = stop(fleet)
        return {
            "phase": "pickup",
            "kind": kind.name,
            "samples": args.samples,
            "p50_ms": round(percentile(bodies, 0.5), 1),
            "p95_ms": round(percentile(bodies, 0.95), 1),
            "p99_ms": round(percentile(bodies, 0.99), 1),
            "max_ms": round(max(bodies), 1),
            "mean_ms": round(statistics.fmean(bodies), 1),
            "claim_p50_ms": round(percentile(claims, 0.5), 1),
            "quiet": quiet,
            "exit_codes": exit_codes,
        }

    return attempts(f"pickup {kind.name}", measure, lambda: kill(fleet))


def fingerprint(i: int) -> str:
    from everystep_bench.django_tasks_db_tasks import fingerprint as work

    return str(work(i))


def check_results(kind: Kind, sample: int = 20) -> None:
    """A few finished tasks' results read back through their backend: the work was done."""
    rows, *_ = kind._rows()
    task = kind.task()
    for row in rows.order_by("?")[:sample]:
        result = task.get_result(str(row.id))
        i = result.args[0]
        if result.return_value["digest"] != fingerprint(i):
            raise RuntimeError(f"{kind.name}: task {row.id} returned {result.return_value!r}")


# -- settings as used ----------------------------------------------------------------------


def settings_used(args: argparse.Namespace) -> dict[str, Any]:
    """The defaults each side ran with, read from the installed code."""
    from django_tasks_db.management.commands.db_worker import Command

    from everystep.options import BY_NAME

    parsed = Command().create_parser("manage.py", "db_worker").parse_args(["--backend", DTDB])
    return {
        "everystep_worker": {
            "pool_default": BY_NAME["pool_size"].default,
            "poll_s": BY_NAME["poll"].default,
            "notify": BY_NAME["notify"].default and args.db == "postgres",
            "execution_flags": "--processes C --pool 1" if SHAPE["processes"] else "--pool C",
        },
        "db_worker": {
            "interval_s": parsed.interval,
            "startup_delay": parsed.startup_delay,
            "reload": parsed.reload,
            "verbosity": parsed.verbosity,
            "flags": f"--backend {DTDB} --worker-id NAME",
        },
    }


def versions() -> dict[str, str]:
    found = {}
    for name in ("django", "django-tasks", "django-tasks-db", "psycopg", "mysqlclient"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


# -- the benchmark -------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    used = settings_used(args)
    longest_poll = max(used["everystep_worker"]["poll_s"], used["db_worker"]["interval_s"])
    rounds: list[list[dict[str, Any]]] = []
    for round_no in range(1, args.repeat + 1):
        kinds = [Kind(name) for name in (KINDS if round_no % 2 else KINDS[::-1])]
        phases: list[dict[str, Any]] = []
        for kind in kinds:
            phase = attempts(
                f"enqueue {kind.name}", lambda k=kind: enqueue_phase(args, k), lambda: None
            )
            phases.append(phase)
            print_phase(round_no, phase)
        for concurrency in args.concurrency:
            for kind in kinds:
                phase = execution_phase(args, run, kind, concurrency, round_no)
                check_results(kind)
                phases.append(phase)
                print_phase(round_no, phase)
        rounds.append(phases)
    pickup = []
    for name in KINDS:
        phase = pickup_phase(args, run, Kind(name), longest_poll)
        pickup.append(phase)
        print_phase(0, phase)
    tidy(args.db)
    return {
        "settings_used": used,
        "versions": versions(),
        "rounds": rounds,
        "pickup": pickup,
        "summary": summarise(args, rounds, pickup, used["everystep_worker"]["pool_default"]),
    }


def summarise(
    args: argparse.Namespace,
    rounds: list[list[dict[str, Any]]],
    pickup: list[dict[str, Any]],
    default_pool: int,
) -> dict[str, Any]:
    """Medians over the rounds, and the median of the per-round ratios everystep ÷
    django-tasks-db (above 1: everystep has more tasks/s; for latency, below 1:
    everystep picks up sooner)."""

    def pick(phases: list[dict[str, Any]], phase: str, kind: str, c: int | None = None) -> Any:
        for p in phases:
            if p["phase"] == phase and p["kind"] == kind and p.get("concurrency") == c:
                return p
        return None

    def median(values: list[float | None]) -> float | None:
        kept = [v for v in values if v is not None]
        return round(statistics.median(kept), 3) if kept else None

    def ratios(get: Callable[[list[dict[str, Any]]], tuple[Any, Any]]) -> float | None:
        pairs = [get(phases) for phases in rounds]
        return median([a / b for a, b in pairs if a and b])

    summary: dict[str, Any] = {"enqueue": {}, "execution": {}, "ratios": {}}
    for kind in KINDS:
        summary["enqueue"][kind] = {
            "tasks_per_s": median([pick(r, "enqueue", kind)["tasks_per_s"] for r in rounds]),
            "cpu_us_per_task": median(
                [pick(r, "enqueue", kind)["cpu_us_per_task"] for r in rounds]
            ),
        }
    for c in args.concurrency:
        for kind in KINDS:
            rows = [pick(r, "execution", kind, c) for r in rounds]
            summary["execution"][f"{kind} C={c}"] = {
                key: median([row[key] for row in rows])
                for key in (
                    "tasks_per_s",
                    "steady_tasks_per_s",
                    "wall_from_commit_s",
                    "worker_cpu_ms_per_task",
                    "db_cpu_ms_per_task",
                )
            }
    ratio = summary["ratios"]
    for kind in (STEP, PLAIN):
        ratio[f"enqueue {kind}"] = ratios(
            lambda r, k=kind: (
                pick(r, "enqueue", k)["tasks_per_s"],
                pick(r, "enqueue", PEER)["tasks_per_s"],
            )
        )
        for c in args.concurrency:
            for key in ("tasks_per_s", "steady_tasks_per_s"):
                ratio[f"execution {kind} C={c} {key}"] = ratios(
                    lambda r, k=kind, c=c, key=key: (
                        pick(r, "execution", k, c)[key],
                        pick(r, "execution", PEER, c)[key],
                    )
                )
        # One process each with its defaults: everystep's pool against one db_worker.
        if default_pool in args.concurrency and 1 in args.concurrency:
            name = f"execution {kind} one process each (pool {default_pool} vs 1 db_worker)"
            ratio[name] = ratios(
                lambda r, k=kind: (
                    pick(r, "execution", k, default_pool)["tasks_per_s"],
                    pick(r, "execution", PEER, 1)["tasks_per_s"],
                )
            )
        latency = {p["kind"]: p for p in pickup}
        for key in ("p50_ms", "p95_ms"):
            peer = latency[PEER][key]
            ratio[f"pickup {kind} {key}"] = round(latency[kind][key] / peer, 4) if peer else None
    return summary


# -- reporting -----------------------------------------------------------------------------


def print_phase(round_no: int, p: dict[str, Any]) -> None:
    where = f"round {round_no}" if round_no else "pickup "
    if p["phase"] == "enqueue":
        print(
            f"  {where}  enqueue    {p['kind']:<16} {p['tasks_per_s']:>8.1f} tasks/s  "
            f"{p['cpu_us_per_task']:>7.1f} µs CPU/task (autocommit, {p['enqueued']} tasks)",
            flush=True,
        )
    elif p["phase"] == "execution":
        tx = p["enqueue_one_transaction"]
        print(
            f"  {where}  execution  {p['kind']:<16} C={p['concurrency']} "
            f"({p['processes']} proc)  {p['tasks_per_s'] or 0:>7.1f} tasks/s  steady "
            f"{p['steady_tasks_per_s'] or 0:>7.1f}  {p['completed']} done in {p['span_s']}s "
            f"(commit→last {p['wall_from_commit_s']}s)  worker CPU "
            f"{p['worker_cpu_ms_per_task']:.2f} ms/task  db CPU {p['db_cpu_ms_per_task']:.2f} "
            f"ms/task  other {p['cpu']['other_s']}s  enqueue in 1 tx {tx['tasks_per_s']}/s",
            flush=True,
        )
    else:
        print(
            f"  {where}  pickup     {p['kind']:<16} p50 {p['p50_ms']} ms  p95 {p['p95_ms']} ms"
            f"  max {p['max_ms']} ms  (claim p50 {p['claim_p50_ms']} ms, {p['samples']} samples)",
            flush=True,
        )


def report(record: dict[str, Any]) -> None:
    print_header(record)
    used, v, s = record["settings_used"], record["versions"], record["summary"]
    es, dw = used["everystep_worker"], used["db_worker"]
    print(
        f"django {v['django']}, django-tasks {v['django-tasks']}, django-tasks-db "
        f"{v['django-tasks-db']}; {record['args']['tasks']} tasks, medians of "
        f"{len(record['rounds'])} round(s)"
    )
    print(
        f"everystep_worker: pool {es['pool_default']} (C in execution), poll {es['poll_s']} s, "
        f"notify {es['notify']}; db_worker: interval {dw['interval_s']} s, start-up delay "
        f"{dw['startup_delay']}, one task at a time per process (C processes)"
    )
    print("\nenqueue, one process, autocommit      tasks/s   CPU µs/task")
    for kind, row in s["enqueue"].items():
        print(f"  {kind:<34} {row['tasks_per_s']!s:>8}   {row['cpu_us_per_task']!s:>8}")
    print(
        "\nexecution                              tasks/s    steady   commit→last s  "
        "worker ms/task  db ms/task"
    )
    for name, row in s["execution"].items():
        print(
            f"  {name:<34} {row['tasks_per_s']!s:>8}  {row['steady_tasks_per_s']!s:>8}  "
            f"{row['wall_from_commit_s']!s:>12}  {row['worker_cpu_ms_per_task']!s:>13}  "
            f"{row['db_cpu_ms_per_task']!s:>10}"
        )
    print("\npickup (commit → body start)           p50 ms    p95 ms")
    for p in record["pickup"]:
        print(f"  {p['kind']:<34} {p['p50_ms']!s:>8}  {p['p95_ms']!s:>8}")
    print(
        "\nratios everystep ÷ django-tasks-db (tasks/s: above 1 = everystep faster; "
        "latency: below 1 = everystep sooner)"
    )
    for name, value in s["ratios"].items():
        print(f"  {name:<66} {value}")
    print()
    print_problems(record)


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=options.DATABASES, default="postgres", help="(postgres)")
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("EVERYSTEP_BENCH_SOURCE", ROOT)),
        help="tree whose everystep/, tests/ and manage.py are measured (this repository)",
    )
    parser.add_argument("--label", default="current", help="names the result line (current)")
    options.add_results_argument(parser)
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per phase (2000)")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 4],
        help="tasks in flight per execution phase: everystep --pool C in one process, "
        "C db_worker processes (1 4)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument("--samples", type=int, default=50, help="pickup samples per kind (50)")
    parser.add_argument(
        "--body",
        choices=("hash", "orm"),
        default="hash",
        help="the task body: a SHA-256 over 4 KiB, or that and one ORM insert (hash)",
    )
    parser.add_argument(
        "--processes",
        action="store_true",
        help="everystep at C: --processes C --pool 1 (C processes, as C db_workers)",
    )
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    BODY["orm"] = args.body == "orm"
    SHAPE["processes"] = max(args.concurrency) if args.processes else 0
    if min(args.tasks, args.repeat, args.samples, *args.concurrency) < 1:
        parser.error("--tasks, --repeat, --samples and --concurrency must be at least 1")
    args.settings_module = SETTINGS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("django_tasks_db") is None:
        raise SystemExit(
            "django_tasks_db is not installed in this interpreter: run "
            "bash bench/peers/setup-django-tasks-db.sh and use /tmp/django-tasks-db-venv/bin/python"
        )
    return run_benchmark("tasks", args, lambda run: benchmark(args, run), report)


if __name__ == "__main__":
    sys.exit(main())
