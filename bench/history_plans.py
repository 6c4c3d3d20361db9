"""The queries ``history.py`` times with a history in the tables, and their plans:
each query called N times, the statements it sends captured, each explained and timed
on its own (``history.write_plans`` writes them to ``bench/plans/<db>-history-<N>.txt``).

The store functions are imported from the module that holds them (``everystep.store``
has no facade), which the tree at ``/tmp/everystep-before`` (07d4a10) has too."""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import runs
from harness.session import BENCH
from history_fill import NAME_PREFIX, RUNNER_PREFIX, RUNNERS

PROBE_NAME, PROBE_RUNNER = f"{NAME_PREFIX}19", f"{RUNNER_PREFIX}3"  # the rarest name
COMMON_NAME = f"{NAME_PREFIX}00"  # the most frequent
PROBE_WORKER = "plan-probe"
PLANS = BENCH / "plans"


@dataclass
class Statement:
    sql: str
    params: Any
    explain: str = ""
    access: str = ""
    sql_ms: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {"sql": " ".join(self.sql.split()), "access": self.access, "sql_ms": self.sql_ms}


@dataclass
class Probe:
    name: str
    call: Callable[[], Any]
    writes: bool = False
    hot: bool = False  # the worker's prepared statements: PostgreSQL's generic plan too
    statements: list[Statement] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return round(statistics.median(self.call_ms), 3)


def idle_probe() -> Probe:
    """An idle worker's poll with nothing due: it asks when the next run is due."""
    from everystep.store.claims import next_due

    return Probe("next_due (idle poll)", next_due, True, hot=True)


def execute_one() -> None:
    """What a worker sends for one run of 3 steps: the claim (of one run), each step's
    fenced record, the fenced finish (carrying the last record where the database
    writes both in one statement, as a worker's pass does)."""
    from django.db import connection
    from django.utils import timezone

    from everystep.store.claims import claim_due

    record_step, step_values, finish_run, merges_records = fenced_writers()
    for claim in claim_due(PROBE_WORKER, 1):
        records = [
            step_values(
                step_id=str(number),
                name="everystep_bench.workflows.bench_add",
                args=[number, 1],
                kwargs={},
                status="done",
                started_at=timezone.now(),
                result=number + 1,
            )
            for number in (1, 2, 3)
        ]
        last = records.pop() if merges_records(connection) else None
        for values in records:
            record_step(claim, values)
        finish_run(claim, "completed", result=4, step=last)


def fenced_writers() -> tuple[Callable[..., Any], ...]:
    """``record_step``, ``step_values``, ``finish_run`` and ``merges_records``: in
    ``store/step_records.py`` and ``store/outcome.py`` now, all in ``store/fenced.py`` in
    the tree at 07d4a10 (``--source /tmp/everystep-before``)."""
    try:
        from everystep.store import outcome, step_records
    except ImportError:
        from everystep.store import fenced  # type: ignore[attr-defined]

        outcome = step_records = fenced
    return (
        step_records.record_step,
        step_records.step_values,
        outcome.finish_run,
        outcome.merges_records,
    )


def exists_step(run_id: uuid.UUID) -> Callable[[], Any]:
    """Whether a run has a step row: the subquery the runs list uses."""
    from django.db import connection

    from everystep.models import Workflow

    value = Workflow._meta.pk.get_db_prep_value(run_id, connection)

    def call() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM everystep_step s WHERE s.workflow_id = %s)",
                [value],
            )
            return cursor.fetchone()

    return call


def probes(args: argparse.Namespace, history_id: uuid.UUID, fresh_id: uuid.UUID) -> list[Probe]:
    """The worker's statements (with their generic plans), then the UI's and the
    metrics' reads."""
    from everystep.store.claims import claim_due
    from everystep.store.runners import requeue_orphans

    return [
        Probe("claim_due(limit=pool)", lambda: claim_due(PROBE_WORKER, args.pool), True, True),
        Probe("one run: claim, 3 step INSERTs, finish", execute_one, writes=True, hot=True),
        Probe("EXISTS step, history run", exists_step(history_id)),
        Probe("EXISTS step, fresh run", exists_step(fresh_id)),
        *report_probes(),
        Probe("requeue_orphans(60)", lambda: requeue_orphans(60.0), True),
        *count_probes(),
    ]


def report_probes() -> list[Probe]:
    """The UI runs list by each filter, and the metrics gauges."""
    from everystep.store.reports import list_runs, queue_stats

    filters: list[tuple[str, dict[str, Any]]] = [
        ("limit=200", {}),
        ("status=failed", {"status": "failed"}),
        (f"name={PROBE_NAME}", {"name": PROBE_NAME}),
        (f"name={COMMON_NAME}", {"name": COMMON_NAME}),
        (f"runner={PROBE_RUNNER}", {"runner": PROBE_RUNNER}),
        ("status, name, runner", {"status": "failed", "name": PROBE_NAME, "runner": PROBE_RUNNER}),
    ]
    return [
        *(
            Probe(f"list_runs({label})", functools.partial(list_runs, limit=200, **given))
            for label, given in filters
        ),
        Probe("queue_stats()", queue_stats),
    ]


def count_probes() -> list[Probe]:
    """The UI runs page's status counts: all runs, the rarest and the busiest name."""
    from everystep.store.reports import status_counts

    return [
        Probe("status_counts() [UI runs page]", status_counts),
        Probe(f"status_counts(name={PROBE_NAME})", lambda: status_counts(name=PROBE_NAME)),
        Probe(f"status_counts(name={COMMON_NAME})", lambda: status_counts(name=COMMON_NAME)),
    ]


def rolled_back(call: Callable[[], Any]) -> Any:
    """``call()`` in a transaction (a savepoint inside one) that is rolled back."""
    from django.db import transaction

    with transaction.atomic():
        try:
            return call()
        finally:
            transaction.set_rollback(True)


def capture(call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SELECT/INSERT/UPDATE/DELETE statements ``call()`` sends, with parameters."""
    from django.db import connection
    from everystep_bench.counting import statement_kind

    seen: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        call()
    kinds = {"select", "insert", "update", "delete", "with"}
    return [(sql, params) for sql, params in seen if statement_kind(sql) in kinds]


def execute(sql: str, params: Any) -> list[Any]:
    """Run a captured statement again: native ``?`` placeholders (everystep's SQLite hot
    path) on the driver's connection, the rest through Django's cursor."""
    from django.db import connection

    if connection.vendor == "sqlite" and params and "%s" not in sql:
        connection.ensure_connection()
        return list(connection.connection.execute(sql, params).fetchall())
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def explain(sql: str, params: Any) -> str:
    from django.db import DatabaseError, connection

    vendor = connection.vendor
    try:
        if vendor == "postgresql":
            rows = rolled_back(lambda: execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params))
            return "\n".join(row[0] for row in rows)
        if vendor == "mysql":
            rows = rolled_back(lambda: execute(f"EXPLAIN {sql}", params))
            table = "\n".join(
                f"  id={r[0]} {r[1]} table={r[2]} type={r[3]} key={r[5]} key_len={r[6]} "
                f"ref={r[7]} rows={r[8]} extra={r[9]}"
                for r in rows
            )
            analysed = rolled_back(lambda: execute(f"ANALYZE FORMAT=JSON {sql}", params))
            return f"EXPLAIN:\n{table}\nANALYZE FORMAT=JSON:\n{analysed[0][0]}"
        rows = execute(f"EXPLAIN QUERY PLAN {sql}", params)
        depth: dict[int, int] = {0: -1}
        lines = []
        for node, parent, _, detail in rows:
            depth[node] = depth.get(parent, -1) + 1
            lines.append("  " * depth[node] + str(detail))
        return "\n".join(lines)
    except DatabaseError as exc:
        return f"(could not explain: {exc})"


def generic_plan(sql: str, params: Any) -> str:
    """PostgreSQL: the plan of ``sql`` as a prepared statement with a generic plan, which
    the worker's driver (psycopg prepares a statement on its 5th execution) may get."""
    from django.db import DatabaseError

    numbered = iter(range(1, sql.count("%s") + 1))
    prepared = re.sub("%s", lambda _: f"${next(numbered)}", sql)
    # A statement without parameters (the idle poll's) is executed without an argument
    # list: ``EXECUTE name()`` is a syntax error, and Django passes ``None`` for params.
    marks = f"({', '.join(['%s'] * len(params))})" if params else ""

    def run() -> list[Any]:
        execute("SET LOCAL plan_cache_mode = force_generic_plan", None)
        execute(f"PREPARE everystep_probe AS {prepared}", None)
        try:
            return execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE everystep_probe{marks}", params)
        finally:
            execute("DEALLOCATE everystep_probe", None)

    try:
        return "\n".join(row[0] for row in rolled_back(run))
    except DatabaseError as exc:
        return f"(could not explain: {exc})"


_PG_ACCESS = re.compile(
    r"(Seq Scan|Index Only Scan|Index Scan|Bitmap Index Scan|Bitmap Heap Scan)"
    r"( Backward)?(?: using (\S+))? on (\S+)"
)


def access_paths(plan: str, vendor: str) -> str:
    """One line: how each table is reached (index or scan), from the plan text."""
    found: list[str] = []
    if vendor == "postgresql":
        for kind, backward, index, table in _PG_ACCESS.findall(plan):
            found.append(f"{kind}{backward} {index or table}" + (f" on {table}" if index else ""))
        if re.search(r"(^|-> +)Sort ", plan, re.MULTILINE):
            found.append("Sort")
    elif vendor == "mysql":
        for line in plan.split("ANALYZE FORMAT=JSON:")[0].splitlines()[1:]:
            cells = dict(cell.split("=", 1) for cell in line.split() if "=" in cell)
            table, kind = cells.get("table", "None"), cells.get("type", "?")
            if table == "None":  # no table: SELECT EXISTS (…) itself
                continue
            # <derived2>, <subquery3>: a temporary result, scanned whole by design
            scan = " FULL SCAN" if kind == "ALL" and not table.startswith("<") else ""
            found.append(f"{table}: {kind} {cells.get('key')}{scan}")
            if "filesort" in line:
                found.append("filesort")
    else:
        found = [line.strip() for line in plan.splitlines() if line.strip()]
    return "; ".join(found)


def timed(call: Callable[[], Any], writes: bool) -> float:
    """Milliseconds ``call()`` took; a write is rolled back afterwards (not timed)."""

    def clock() -> float:
        began = time.perf_counter()
        call()
        return 1000 * (time.perf_counter() - began)

    return float(rolled_back(clock) if writes else clock())


def measure(probe: Probe, repeat: int) -> None:
    """Time the call ``repeat`` times; capture, explain and time its statements."""
    from django.db import connection

    vendor = connection.vendor
    probe.call_ms = [timed(probe.call, probe.writes) for _ in range(repeat + 1)][1:]  # warm-up
    captured = capture(lambda: rolled_back(probe.call) if probe.writes else probe.call())
    for sql, params in captured:
        statement = Statement(sql, params, explain(sql, params))
        statement.access = access_paths(statement.explain, vendor)
        if vendor == "postgresql" and probe.hot:
            generic = generic_plan(sql, params)
            statement.explain += f"\n-- generic plan (a prepared statement's):\n{generic}"
            statement.access += f" || generic plan: {access_paths(generic, vendor)}"
        again = functools.partial(execute, sql, params)
        times = [timed(again, probe.writes) for _ in range(repeat)]
        statement.sql_ms = round(statistics.median(times), 3)
        probe.statements.append(statement)


def record_plans(args: argparse.Namespace) -> list[Probe]:
    """Measure every probe with a few runs scheduled and the history runners' heartbeats
    a day old; remove those again."""
    from datetime import timedelta

    from django.utils import timezone
    from everystep_bench.workflows import bench_three

    from everystep.models import Runner, Workflow

    def measured(probe: Probe) -> Probe:
        measure(probe, args.plan_repeat)
        print(f"  {probe.name:<40} {probe.median_ms:>9.3f} ms", flush=True)
        return probe

    done = [measured(idle_probe())]
    since = runs.id_floor()
    runs.schedule_runs(bench_three, 5)
    fresh_id = Workflow.objects.filter(id__gte=since).order_by("id").values_list("id", flat=True)[0]
    # The newest run of the rarest name (PROBE_NAME is the highest name); a tiny history
    # (the smoke run's) may hold none of it, and then a run of the rarest name it has.
    history_id = (
        Workflow.objects.filter(name__startswith=NAME_PREFIX)
        .order_by("-name", "-id")
        .values_list("id", flat=True)[0]
    )
    stale = timezone.now() - timedelta(days=1)
    Runner.objects.bulk_create(
        Runner(
            name=f"{RUNNER_PREFIX}{i}",
            boot_id=uuid.uuid4(),
            pool_size=8,
            started_at=stale,
            last_seen=stale,
        )
        for i in range(RUNNERS)
    )
    try:
        done += [measured(probe) for probe in probes(args, history_id, fresh_id)]
    finally:
        Runner.objects.filter(name__startswith=RUNNER_PREFIX).delete()
        runs.clear_runs(since=since)
    return done
