"""Progress (issue 38): what ``publish`` costs, and what publish-heavy runs cost the runs
beside them that do not publish.

    .venv/bin/python bench/progress.py --db postgres|mariadb|sqlite
        [--only beside alone] [--runs 1000] [--repeat 3] [--publish-workers 2]
        [--publish-pool 4] [--publishes 1000] [--count 10000] [--parallel 8]

On a fresh database of its own, one worker process per role (each loads this module's
workflows, so they are started by ``serve_worker`` rather than ``manage.py``):

- **beside** (each of ``--repeat`` rounds): one ``--pool`` worker executes ``--runs`` runs
  of ``bench_three`` (3 one-line steps, as ``compare.py``) scheduled at once, alone; then
  the same while ``--publish-workers`` workers x ``--publish-pool`` threads execute runs
  whose one step writes a key ``--publishes`` times in a loop, kept topped up until the
  plain runs are done. The loop writes in one of three ways (``--modes``):
  ``publish`` (``everystep.publish``), ``write`` (the same upsert, no NOTIFY: the floor)
  and ``notify-each`` (PostgreSQL: the upsert and a NOTIFY in one transaction, what a
  publish would cost if it notified in its own transaction, which batching avoids). Per
  phase: plain runs/s (first claim to last completion, from the rows), claim -> completed
  p50/p99, and writes/s from scheduling the plain runs to their end (the keys' write
  counts);
- **alone** (each of ``--repeat`` rounds): one step publishing ``--count`` times
  (publishes/s from the step's own clock), without and with a ``watch`` in this process;
  then ``--parallel`` such runs at once (total publishes/s over first claim to last
  completion), in each mode, and the ``publish`` mode again with one ``awatch`` per run
  (this process's CPU in the phase is then the watchers').

On PostgreSQL a LISTEN connection of this process counts the NOTIFYs on
``everystep_published`` in each phase, beside the writes: the batching. Prints a report
and appends one line (``"kind": "progress"``: every phase, and medians per kind) to
``bench/results/progress.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import options, runs
from harness.cpu import CpuMeter, wait_quiet
from harness.results import print_header, print_problems
from harness.session import Session, run_benchmark
from harness.workers import WorkerProcess, worker_env

PUBLISHER = "bench_progress.publisher"
MODES = ("publish", "write", "notify-each")
LAUNCH = "import sys, progress; sys.exit(progress.serve_worker(sys.argv[1:]))"
BOUND = 600.0  # seconds a phase's runs may take
_defined: dict[str, Any] = {}


# -- the workflows (defined after Django is set up, in the bench and in its workers) ------


def workflows() -> dict[str, Any]:
    """``bench_three`` and the publishing workflow, registered in this process once."""
    if _defined:
        return _defined
    from django.db import transaction
    from everystep_bench.workflows import bench_three

    from everystep import conf, context, publish, registry, step, workflow
    from everystep.store import published
    from everystep.store.wake import notify_published

    @step
    def publish_loop(count: int, how: str) -> dict[str, Any]:
        run_id = context.current().workflow_id  # type: ignore[union-attr]
        began = time.perf_counter()
        for i in range(1, count + 1):
            if how == "publish":
                publish("done", i)
            elif how == "write":
                published.write(run_id, "done", i)
            else:  # the NOTIFY in the value's own transaction
                with transaction.atomic(using=conf.database()):
                    published.write(run_id, "done", i)
                    notify_published()
        return {"count": count, "seconds": time.perf_counter() - began}

    @workflow(name=PUBLISHER)
    def publisher(count: int, how: str) -> dict[str, Any]:
        return publish_loop(count, how)

    _defined.update(plain=bench_three, publisher=publisher)
    _defined["plain_name"] = registry.workflow_def(bench_three).name  # type: ignore[union-attr]
    return _defined


def serve_worker(argv: list[str]) -> int:
    """A worker process's main: ``manage.py everystep_worker`` with these workflows."""
    import django
    from django.core.management import execute_from_command_line

    django.setup()
    workflows()
    execute_from_command_line(["manage.py", "everystep_worker", *argv])
    return 0


class ProgressWorker(WorkerProcess):
    """A worker of the measured tree started through ``serve_worker``."""

    def __init__(self, current: Session, name: str, flags: list[str], log_level: str) -> None:
        self.name, self.log_path = name, current.scratch / f"{name}.log"
        env = worker_env(current.workers.source, log_level, {})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCH, "--name", name, *flags],
                cwd=current.workers.source,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid
        current.workers.started.append(self)  # killed by the session's finally


def start_workers(current: Session, name: str, count: int, pool: int, args: Any) -> list[Any]:
    fleet = [
        ProgressWorker(
            current, f"{name}-{n}", ["--pool", str(pool), "--poll", str(args.poll)], args.log_level
        )
        for n in range(1, count + 1)
    ]
    for worker in fleet:
        worker.wait_ready()
    return fleet


# -- counting ------------------------------------------------------------------------------


class NotifyCounter:
    """NOTIFYs on ``everystep_published`` that reach a LISTEN connection of this process
    (PostgreSQL; ``count`` stays None elsewhere)."""

    def __init__(self, db: str) -> None:
        self.count: int | None = None
        self.stop = threading.Event()
        if db != "postgres":
            return
        import psycopg
        from django.db import connection

        s = connection.settings_dict
        self.conn = psycopg.connect(
            host=s["HOST"], port=s["PORT"], user=s["USER"], password=s["PASSWORD"],
            dbname=s["NAME"], autocommit=True,
        )  # fmt: skip
        self.conn.execute("LISTEN everystep_published")
        self.count = 0
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        while not self.stop.is_set():
            for _ in self.conn.notifies(timeout=0.2):
                self.count += 1  # type: ignore[operator]

    def now(self, settle: float = 0.0) -> int | None:
        """The count so far; ``settle``: first wait for notifications still on their way
        (when nothing sends any more)."""
        time.sleep(settle)
        return self.count

    def close(self) -> None:
        if self.count is not None:
            self.stop.set()
            self.thread.join()
            self.conn.close()


def writes_so_far() -> int:
    """Every write of every published key (the rows' write counts)."""
    from django.db.models import Sum

    from everystep.models import Published

    return Published.objects.aggregate(n=Sum("version"))["n"] or 0


def plain_figures(since: Any) -> dict[str, Any]:
    """runs/s and claim -> completed p50/p99 of the ``bench_three`` runs since ``since``."""
    from everystep.models import Workflow

    rows = Workflow.objects.filter(id__gte=since, name=workflows()["plain_name"])
    rows = rows.filter(status="completed").values_list("started_at", "completed_at")
    begun, done = zip(*rows, strict=True)
    span = (max(done) - min(begun)).total_seconds()
    own = [(end - start).total_seconds() * 1000 for start, end in zip(begun, done, strict=True)]
    return {
        "completed": len(own),
        "span_s": round(span, 3),
        "runs_per_s": round(len(own) / span, 1),
        "p50_ms": round(runs.percentile(own, 0.5), 1),
        "p99_ms": round(runs.percentile(own, 0.99), 1),
    }


def tidy(db: str) -> None:
    """Empty the run tables and the published values (vacuumed on PostgreSQL: a phase's
    many writes to a few rows leave dead versions the next one would walk)."""
    from django.db import connection

    from everystep.models import Published

    Published.objects.all().delete()
    runs.tidy_tables(db)
    if db == "postgres":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Published._meta.db_table}")


def unfinished(name: str) -> int:
    from everystep.models import Workflow

    return Workflow.objects.filter(name=name, status__in=("scheduled", "running")).count()


def wait(predicate: Callable[[], bool], what: str, fleet: list[Any]) -> None:
    def alive() -> None:
        for worker in fleet:
            worker.check_alive()

    try:
        runs.wait_for(predicate, BOUND, 0.05, alive)
    except TimeoutError:
        raise SystemExit(f"gave up after {BOUND:.0f}s waiting for {what}") from None


def schedule_publishers(count: int, publishes: int, how: str) -> list[Any]:
    """``count`` publishing runs, inserted as ``runs.schedule_runs`` does: ``schedule()``
    refuses a workflow registered after Django started, as this module's are (only the
    workers started by ``serve_worker`` know them)."""
    from django.db import transaction

    from everystep import serde
    from everystep.models import Workflow
    from everystep.store.wake import notify_due

    args = serde.encode([publishes, how], "arguments")
    with transaction.atomic():
        rows = Workflow.objects.bulk_create(
            [Workflow(name=PUBLISHER, args=args) for _ in range(count)]
        )
        notify_due()
    return rows


# -- beside: plain runs alone, and beside publishing runs --------------------------------------


def plain_phase(args: Any, plain: Any, publishers: list[Any], how: str | None, counter: Any):
    """``args.runs`` plain runs, alone (``how`` None) or beside publishing runs."""
    tidy(args.db)
    quiet = wait_quiet(args.wait_quiet)
    slots = len(publishers) * args.publish_pool
    fleet = [plain, *publishers]
    if how is not None:  # publishing in every slot before the plain runs start
        schedule_publishers(2 * slots, args.publishes, how)
        wait(lambda: writes_so_far() > 0, "the first publishes", fleet)
        time.sleep(0.5)
    meter = CpuMeter(args.db, [worker.pid for worker in fleet])
    meter.begin_workers()
    meter.begin()
    notifies, writes, began = counter.now(), writes_so_far(), time.monotonic()
    since = runs.id_floor()
    runs.schedule_runs(workflows()["plain"], args.runs)

    def plain_done() -> bool:
        if how is not None and unfinished(PUBLISHER) < 2 * slots:  # keep them busy
            schedule_publishers(slots, args.publishes, how)
        return unfinished(workflows()["plain_name"]) == 0

    wait(plain_done, "the plain runs", fleet)
    took = time.monotonic() - began
    writes, notifies = writes_so_far() - writes, (counter.now() or 0) - (notifies or 0)
    # (the publishers go on: both ends are read at once, not after a settling pause)
    cpu = meter.end()
    wait(lambda: unfinished(PUBLISHER) == 0, "the publishing runs", fleet)
    return {
        "beside": how or "nothing",
        **plain_figures(since),
        "writes": writes,
        "writes_per_s": round(writes / took, 1),
        "notifies": notifies if counter.count is not None else None,
        "cpu": cpu,
        "quiet": quiet,
    }


def beside(args: Any, current: Session, counter: NotifyCounter) -> list[dict[str, Any]]:
    plain = start_workers(current, "plain", 1, args.pool, args)[0]
    publishers = start_workers(current, "publisher", args.publish_workers, args.publish_pool, args)
    phases = []
    for number in range(args.repeat):
        for how in [None, *args.modes]:
            phase = plain_phase(args, plain, [] if how is None else publishers, how, counter)
            phases.append({"round": number + 1, **phase})
            print(f"  round {number + 1}: {brief(phase)}", flush=True)
    for worker in [plain, *publishers]:
        worker.terminate()
    return phases


def brief(phase: dict[str, Any]) -> str:
    return (
        f"beside {phase['beside']:<12} {phase['runs_per_s']:>7.1f} runs/s, "
        f"p50/p99 {phase['p50_ms']:.0f}/{phase['p99_ms']:.0f} ms, "
        f"{phase['writes_per_s']:.0f} writes/s, NOTIFYs {phase['notifies']}"
    )


# -- alone: publishes/s of a step, watched or not ----------------------------------------------


def sync_watch(run_id: Any, seen: list[dict[str, Any]]) -> threading.Thread:
    from everystep import watch

    def follow() -> None:
        seen.extend(watch(run_id, timeout=BOUND))

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread


def async_watch(run_ids: list[Any], seen: list[dict[str, Any]]) -> threading.Thread:
    from everystep import awatch

    async def follow(run_id: Any) -> None:
        async for values in awatch(run_id, timeout=BOUND):
            seen.append(values)

    async def every() -> None:
        await asyncio.gather(*(follow(run_id) for run_id in run_ids))

    thread = threading.Thread(target=asyncio.run, args=(every(),), daemon=True)
    thread.start()
    return thread


def publish_phase(
    args: Any, fleet: list[Any], counter: NotifyCounter, how: str, parallel: int, watcher: str
) -> dict[str, Any]:
    """``parallel`` runs each writing ``args.count`` times, ``watcher`` following them."""
    from django.db.models import Max, Min

    from everystep import serde
    from everystep.models import Workflow

    tidy(args.db)
    quiet = wait_quiet(args.wait_quiet)
    meter = CpuMeter(args.db, [worker.pid for worker in fleet])
    meter.begin_workers()
    meter.begin()
    notifies = counter.now()
    scheduled = schedule_publishers(parallel, args.count, how)
    seen: list[dict[str, Any]] = []
    ids = [run.id for run in scheduled]
    follower = None
    if watcher == "watch":
        follower = sync_watch(ids[0], seen)
    elif watcher == "awatch":
        follower = async_watch(ids, seen)
    wait(lambda: unfinished(PUBLISHER) == 0, "the publishing runs", fleet)
    if follower is not None:
        follower.join(BOUND)
    cpu = meter.end()  # the bench's share is the watchers'
    notifies = (counter.now(settle=0.3) or 0) - (notifies or 0)
    done = Workflow.objects.filter(id__in=ids, status="completed")
    span = done.aggregate(first=Min("started_at"), last=Max("completed_at"))
    span_s = (span["last"] - span["first"]).total_seconds()
    results = [serde.decode(row) for row in done.values_list("result", flat=True)]
    per_step = [r["count"] / r["seconds"] for r in results]
    finals = sum(1 for values in seen if values.get("done") == args.count)
    return {
        "mode": how,
        "runs": parallel,
        "watcher": watcher,
        "completed": done.count(),
        "writes": writes_so_far(),
        "per_step_per_s": round(statistics.mean(per_step), 1),
        "total_per_s": round(parallel * args.count / span_s, 1),
        "notifies": notifies if counter.count is not None else None,
        "watch_yields": len(seen),
        "watch_final_values": finals,
        "cpu": cpu,
        "quiet": quiet,
    }


def alone(args: Any, current: Session, counter: NotifyCounter) -> list[dict[str, Any]]:
    fleet = start_workers(current, "alone", 1, max(args.parallel, 1), args)
    plan = [("publish", 1, "none"), ("publish", 1, "watch")]
    plan += [(how, args.parallel, "none") for how in args.modes]
    plan += [("publish", args.parallel, "awatch")]
    phases = []
    for number in range(args.repeat):
        for how, parallel, watcher in plan:
            phase = publish_phase(args, fleet, counter, how, parallel, watcher)
            phases.append({"round": number + 1, **phase})
            print(f"  round {number + 1}: {brief_alone(phase)}", flush=True)
    fleet[0].terminate()
    return phases


def brief_alone(p: dict[str, Any]) -> str:
    return (
        f"{p['mode']:<12} x{p['runs']:<3} watcher {p['watcher']:<7} "
        f"{p['per_step_per_s']:>8.0f}/s per step, {p['total_per_s']:>8.0f}/s in all, "
        f"writes {p['writes']}, NOTIFYs {p['notifies']}, watch yields {p['watch_yields']} "
        f"(final {p['watch_final_values']})"
    )


# -- report ----------------------------------------------------------------------------------


BESIDE_KEYS = ("runs_per_s", "p50_ms", "p99_ms", "writes_per_s", "notifies")
ALONE_KEYS = ("per_step_per_s", "total_per_s", "writes", "notifies", "watch_yields")


def summary(
    phases: list[dict[str, Any]], kind: Callable[[dict[str, Any]], str], keys: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """Medians over the rounds, per ``kind`` of phase."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for phase in phases:
        kinds.setdefault(kind(phase), []).append(phase)
    return {
        kind: {
            key: statistics.median(p[key] for p in group)
            for key in keys
            if all(p[key] is not None for p in group)
        }
        for kind, group in kinds.items()
    }


def beside_kind(phase: dict[str, Any]) -> str:
    return str(phase["beside"])


def alone_kind(phase: dict[str, Any]) -> str:
    return f"{phase['mode']} x{phase['runs']}, watcher {phase['watcher']}"


def benchmark(args: argparse.Namespace) -> Callable[[Session], dict[str, Any]]:
    def measure(current: Session) -> dict[str, Any]:
        workflows()
        counter = NotifyCounter(args.db)
        try:
            parts: dict[str, Any] = {}
            if "beside" in args.only:
                parts["beside"] = beside(args, current, counter)
                parts["beside_median"] = summary(parts["beside"], beside_kind, BESIDE_KEYS)
            if "alone" in args.only:
                parts["alone"] = alone(args, current, counter)
                parts["alone_median"] = summary(parts["alone"], alone_kind, ALONE_KEYS)
            return parts
        finally:
            counter.close()

    return measure


def report(record: dict[str, Any]) -> None:
    a = record["args"]
    print_header(record)
    if "beside_median" in record:
        print(
            f"{a['runs']} runs of bench_three (--pool {a['pool']}) beside "
            f"{a['publish_workers']} workers x {a['publish_pool']} threads of runs writing a "
            f"key {a['publishes']} times; medians of {a['repeat']} rounds"
        )
        print(
            f"  {'beside':<14}{'runs/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'writes/s':>10}{'NOTIFYs':>9}"
        )
        for kind, m in record["beside_median"].items():
            print(
                f"  {kind:<14}{m['runs_per_s']:>9.1f}{m['p50_ms']:>9.1f}{m['p99_ms']:>9.1f}"
                f"{m['writes_per_s']:>10.0f}{m.get('notifies', '-'):>9}"
            )
    if "alone_median" in record:
        print(
            f"steps writing a key {a['count']} times, one worker --pool {a['parallel']}; "
            f"medians of {a['repeat']} rounds"
        )
        print(f"  {'':<30}{'/s per step':>12}{'/s in all':>10}{'NOTIFYs':>9}{'yields':>8}")
        for kind, m in record["alone_median"].items():
            print(
                f"  {kind:<30}{m['per_step_per_s']:>12.0f}{m['total_per_s']:>10.0f}"
                f"{m.get('notifies', '-'):>9}{m['watch_yields']:>8g}"
            )
    print_problems(record)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    options.add_worker_phase_arguments(parser)
    add = parser.add_argument
    add("--only", nargs="+", choices=("beside", "alone"), default=["beside", "alone"])
    add("--modes", nargs="+", choices=MODES, help="how the loops write (all; no notify-each "
        "but on PostgreSQL)")  # fmt: skip
    add("--runs", type=int, default=1000, help="plain runs per phase (1000)")
    add("--pool", type=int, default=8, help="the plain worker's --pool (8)")
    add("--poll", type=float, default=0.05, help="every worker's --poll (0.05)")
    add("--repeat", type=int, default=3, help="rounds of the phases (3)")
    add("--publish-workers", type=int, default=2, help="workers of publishing runs (2)")
    add("--publish-pool", type=int, default=4, help="their --pool (4)")
    add("--publishes", type=int, default=1000, help="writes per publishing run, beside (1000)")
    add("--count", type=int, default=10000, help="writes per step, alone (10000)")
    add("--parallel", type=int, default=8, help="runs at once, alone (8)")
    args = parser.parse_args(argv)
    if args.modes is None:
        args.modes = list(MODES if args.db == "postgres" else MODES[:2])
    if "notify-each" in args.modes and args.db != "postgres":
        parser.error("--modes notify-each needs --db postgres")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_benchmark("progress", args, benchmark(args), report)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
