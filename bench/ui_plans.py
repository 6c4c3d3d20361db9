"""The runs list's filters at a million runs (issue 39, item 4): the plan, the rows read
and the time of the list query and of the status counts, for every filter, every pair of
filters and the common threes.

    .venv/bin/python bench/ui_plans.py --db postgres [--proposed] [--keep]
    .venv/bin/python bench/ui_plans.py --db mariadb [--proposed] [--keep]

It creates the database ``everystep_scale_plans`` (``--database``), migrates it, fills it
with 1,000,000 runs over 180 days (as ``ui_scale_data`` does: ``COPY`` on PostgreSQL,
multi-row ``INSERT`` on MariaDB, in resumable chunks; no steps, which the list never
reads), measures, and drops it unless ``--keep`` (a kept database is reused as it is).

Each combination calls ``store.reports.list_runs`` and ``status_counts`` as the runs page
does, captures their statements, and runs each again under ``EXPLAIN (ANALYZE, BUFFERS,
FORMAT JSON)`` (PostgreSQL) or ``ANALYZE FORMAT=JSON`` (MariaDB). *Rows read* adds up the
rows every scan of the plan produced or threw away; a statement is flagged ``scans``
when it reads more than ``SCAN_MIN`` rows and ``SCAN_RATIO`` times what it returns. Then
the query changes of ``query_changes`` are measured, and what one claim and one finish
touch (``hot_path``); ``--proposed`` makes the indexes of ``PROPOSED`` by hand and
measures everything again. One line per combination goes to
``bench/results/ui_plans.jsonl``, the whole plans to
``bench/ui_scale_plans/ui_plans-<db>.json`` (not kept in git). The findings are in
docs/running/scaling.md, "Runs-list plans at a million runs".
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import ui_scale
from harness.options import add_results_argument
from harness.results import append_result, loadavg, machine_info, source_info
from harness.server import retrying
from ui_scale import BENCH, ROOT, configure, create_database

RUNS = 1_000_000
CHUNKS = 50
DAYS = 180
REPEAT = 3
SCAN_MIN = 20_000
SCAN_RATIO = 10
PLANS = BENCH / "ui_scale_plans"

RUNNERS = [f"runner-{zone}-{n:02}" for zone in "abcd" for n in range(1, 11)]
# Of all runs, 10 % are Django tasks, on one of three queues.
QUEUES = [("default", 80), ("emails", 15), ("reports", 5)]
TASK_SHARE = 0.10
# A run starts children with this chance (2 to 10 of them, within seconds), and one
# fan-out, 70 days back, started FANOUT_CHILDREN in ten minutes.
PARENT_SHARE = 0.02
FANOUT_CHILDREN = 15_000
FANOUT_KEY = "plans-fanout"
FANOUT_DAY = 110
# Statuses by age: what is still running or due is recent; history is finished, with a
# tail of old runs waiting for an event or a human (blocked).
RECENT = [("running", 4), ("scheduled", 6), ("completed", 84), ("failed", 5), ("cancelled", 1)]
OLD = [("completed", 933), ("failed", 40), ("stopped", 10), ("cancelled", 10), ("blocked", 2),
       ("scheduled", 5)]  # fmt: skip
COLUMNS = [
    "id", "name", "args", "idempotency_key", "status", "claimed_by", "claim_token",
    "created_at", "started_at", "completed_at", "updated_at", "recoveries", "due_at",
    "waiting_for", "parent_id", "queue", "awaited",
]  # fmt: skip

# -- filling -----------------------------------------------------------------------------


def _chunk_rows(number: int, origin: datetime, runs: int) -> list[tuple[Any, ...]]:
    """Chunk ``number``'s runs: its slice of the 180 days, the same rows on every pass."""
    import ui_scale_data as data

    rng = random.Random(number)
    width = timedelta(days=DAYS) / CHUNKS
    start, count = origin + width * number, runs // CHUNKS
    moments = iter(sorted(start + width * rng.random() for _ in range(count)))
    fanout_chunk = int(FANOUT_DAY * CHUNKS / DAYS)
    end = origin + timedelta(days=DAYS)
    rows: list[tuple[Any, ...]] = []
    fanout_due = number == fanout_chunk
    for created in moments:
        children = rng.randint(2, 10) if rng.random() < PARENT_SHARE else 0
        fanout = fanout_due and len(rows) >= min(1_000, count // 2)
        if fanout:
            children, fanout_due = FANOUT_CHILDREN, False
        children = min(children, count - len(rows) - 1)
        parent = _run(rng, data, created, end, None, FANOUT_KEY if fanout else None)
        rows.append(parent)
        for _ in range(children):
            # A child takes the place of one of the chunk's moments: the count stays.
            next(moments, None)
            born = created + timedelta(milliseconds=rng.randint(5, 600_000))
            rows.append(_run(rng, data, born, end, parent[0], None))
    return rows


def _run(
    rng: random.Random, data: Any, created: datetime, end: datetime, parent: Any, key: Any
) -> tuple[Any, ...]:
    weights = RECENT if end - created < timedelta(days=1) else OLD
    status = rng.choices([s for s, _ in weights], [w for _, w in weights])[0]
    started = None if status == "scheduled" and rng.random() < 0.5 else created
    final = status in ("completed", "failed", "stopped", "cancelled")
    done = created + timedelta(milliseconds=rng.randint(50, 90_000)) if final else None
    if key is None and rng.random() < data.IDEMPOTENT_SHARE:
        key = f"order-{rng.getrandbits(40)}"
    queue = None
    if rng.random() < TASK_SHARE:
        queue = rng.choices([q for q, _ in QUEUES], [w for _, w in QUEUES])[0]
    token = uuid.UUID(int=rng.getrandbits(128), version=4) if status == "running" else None
    return (
        data.uuid7_at(created, rng), rng.choices(data.NAMES, data.NAME_WEIGHTS)[0], "[]", key,
        status, rng.choice(RUNNERS) if started else None, token, created, started, done,
        done or created, 0, created if status != "scheduled" or started is None else None,
        "approval" if status == "scheduled" and started else None, parent, queue, False,
    )  # fmt: skip


def fill(connection: Any, runs: int) -> datetime:
    """Migrate and fill the database (the chunks not written yet); the origin of the
    180 days."""
    import ui_scale_data as data
    from django.core.management import call_command
    from django.db import transaction

    retrying(lambda: call_command("migrate", verbosity=0))
    origin: datetime = retrying(lambda: data.prepare(connection))
    if _origin_is_new(connection):
        origin = origin - timedelta(days=DAYS - data.DAYS)
    done = retrying(lambda: data.done_chunks(connection))
    began = time.monotonic()
    for number in range(CHUNKS):
        if number in done:
            continue
        rows = _chunk_rows(number, origin, runs)

        def write(rows: list[tuple[Any, ...]] = rows, number: int = number) -> None:
            with transaction.atomic():
                if connection.vendor == "postgresql":
                    data._copy(connection, "everystep_workflow", COLUMNS, rows)
                else:
                    data._insert(connection, "everystep_workflow", COLUMNS, rows)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO scale_chunks (number, origin, seconds) VALUES (%s, %s, 0)",
                        [number, origin.isoformat()],
                    )

        retrying(write)
        print(f"  chunk {number + 1}/{CHUNKS} ({time.monotonic() - began:.0f} s)", flush=True)
    _analyze(connection)
    print(f"filled in {time.monotonic() - began:.0f} s", flush=True)
    return origin


def _origin_is_new(connection: Any) -> bool:
    # ui_scale_data.prepare puts a new origin 90 days back; this history is 180 days long.
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM scale_chunks")
        return bool(cursor.fetchone()[0] == 0)


# -- the combinations ----------------------------------------------------------------------

FILTERS = ["workflow", "status", "runner", "parent", "queue", "created_after",
           "created_before", "q"]  # fmt: skip
WINDOW = ("created_after", "created_before")
THREES = [
    ("workflow", "status", "runner"),
    ("workflow", "status", *WINDOW),
    ("status", "runner", *WINDOW),
    ("workflow", "status", "queue"),
    ("workflow", "status", "parent"),
    ("status", "queue", *WINDOW),
    ("workflow", "runner", *WINDOW),
    ("status", "parent", "runner"),
]


def combinations() -> list[tuple[str, ...]]:
    """No filter, each filter, each pair, the common threes (the window counts as one)."""
    pairs = itertools.combinations(FILTERS, 2)
    return [(), *((f,) for f in FILTERS), *pairs, *THREES]


def probe_values(origin: datetime) -> dict[str, Any]:
    """One value per filter: sparse enough that combining two leaves few runs (what makes
    a planner walk an index a long way), never so rare that a pair finds none."""
    import ui_scale_data as data

    from everystep.models import Workflow

    fanout = Workflow.objects.get(idempotency_key=FANOUT_KEY)
    child = Workflow.objects.filter(parent=fanout).order_by("id").values_list("id", flat=True)
    moment = fanout.created_at
    return {
        "workflow": data.NAMES[10],  # about 1.5 % of the runs
        "status": "failed",  # about 4 %
        "runner": "runner-c-07",  # 1 of 40
        "parent": fanout.id,  # the 15,000-run fan-out
        "queue": "reports",  # 0.5 %
        "created_after": moment - timedelta(days=3),  # a week, 70 days back
        "created_before": moment + timedelta(days=4),
        "q": child[99].hex[:8],  # an id prefix: the key index and a primary-key range
    }


def _filters(combo: tuple[str, ...], values: dict[str, Any]) -> dict[str, Any]:
    """``list_runs`` keyword arguments, as ``ui.filters.RunsQuery.list_filters`` names them."""
    names = {"workflow": "name", "q": "search"}
    return {names.get(f, f): values[f] for f in combo}


COUNT_KEYS = ("name", "runner", "parent", "queue", "created_after", "created_before")

# -- plans -----------------------------------------------------------------------------------


def capture(call: Callable[[], Any]) -> tuple[Any, list[tuple[str, Any]]]:
    """``call()``'s value and the statements it sent, with their parameters."""
    from django.db import connection

    seen: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        value = call()
    return value, seen


def explain(sql: str, params: Any) -> dict[str, Any]:
    """One statement run under the database's ANALYZE: its plan, rows read and returned,
    the access paths it took and its time."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
            raw = cursor.fetchone()[0]
            doc = raw if isinstance(raw, list) else json.loads(raw)
            top = doc[0]["Plan"]
            scans = list(_pg_scans(top))
            ms = doc[0]["Execution Time"]
            extra = {"buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)}
        else:
            cursor.execute(f"ANALYZE FORMAT=JSON {sql}", params)
            doc = json.loads(cursor.fetchone()[0])
            scans = list(_maria_scans(doc))
            ms = doc["query_block"].get("r_total_time_ms", 0.0)
            extra = {}
        # What it gives back: the rows, or for a (capped) count the runs it counted.
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        returned = rows[0][0] if sql.lstrip().upper().startswith("SELECT COUNT(") else len(rows)
    read = sum(scan["read"] for scan in scans)
    access = "; ".join(scan["access"] for scan in scans)
    return {"read": round(read), "returned": returned, "ms": round(ms, 2), "access": access,
            **extra, "sql": " ".join(sql.split()), "params": [str(p) for p in params or []],
            "plan": doc}  # fmt: skip


_PG_SCANS = {"Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan"}


def _pg_scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    # Rows read: what each scan produced plus what its filter threw away (per loop, as
    # PostgreSQL reports them). A bitmap heap scan re-reads its index scan's rows: not
    # counted twice.
    if node["Node Type"] in _PG_SCANS:
        loops = node["Actual Loops"]
        kept = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        kept += node.get("Rows Removed by Index Recheck", 0)
        where = node.get("Index Name", node.get("Relation Name", ""))
        yield {"read": kept * loops, "access": f"{node['Node Type']} {where} ({kept * loops:,.0f})"}
    for child in node.get("Plans", []):
        yield from _pg_scans(child)


def _maria_scans(node: Any) -> Iterator[dict[str, Any]]:
    # A table's r_rows is rows read per loop, before its attached condition; a derived
    # table (<derived2>) is what its own query block produced, counted there.
    if isinstance(node, dict):
        name = node.get("table_name")
        if name is not None and not name.startswith("<") and "r_rows" in node:
            read = (node.get("r_rows") or 0) * (node.get("r_loops") or 0)
            key = node.get("key", "-")
            yield {"read": read, "access": f"{node.get('access_type')} {key} ({read:,.0f})"}
        for value in node.values():
            yield from _maria_scans(value)
    elif isinstance(node, list):
        for value in node:
            yield from _maria_scans(value)


def timed(call: Callable[[], Any]) -> float:
    """The median milliseconds of ``REPEAT`` calls."""
    times = []
    for _ in range(REPEAT):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 2)


def measure(call: Callable[[], Any]) -> dict[str, Any]:
    """A store call's statements explained, its total rows read and returned, and its
    time; ``scans``: one of them reads far more than it returns."""
    _, statements = capture(call)
    explained = [explain(sql, params) for sql, params in statements]
    for one in explained:
        one["scans"] = one["read"] > SCAN_MIN and one["read"] > SCAN_RATIO * one["returned"]
    return {
        "call_ms": timed(call),
        "read": sum(one["read"] for one in explained),
        "returned": sum(one["returned"] for one in explained),
        "sql_ms": round(sum(one["ms"] for one in explained), 2),
        "scans": any(one["scans"] for one in explained),
        "statements": explained,
    }


def run_pass(
    values: dict[str, Any], header: dict[str, Any], variant: str, results: Path
) -> dict[str, Any]:
    """Every combination measured as the runs page runs it; one result line each."""
    from everystep.store.reports import list_runs, status_counts
    from everystep.ui.views import RUNS_LIMIT

    counted: dict[tuple[Any, ...], dict[str, Any]] = {}
    plans: dict[str, Any] = {}
    print(f"-- {variant} (load {_uptime()})", flush=True)
    for combo in combinations():
        given = _filters(combo, values)
        listed = measure(lambda g=given: list_runs(**g, limit=RUNS_LIMIT + 1))
        counting = {k: given.get(k) for k in COUNT_KEYS}
        key = tuple(counting.values())
        if key not in counted:
            counted[key] = measure(lambda c=counting: status_counts(**c))
        counts = counted[key]
        label = "+".join(combo) or "(none)"
        plans[label] = {"list": listed, "counts": counts}
        print(f"{label:42} list {listed['read']:>9,} read {listed['returned']:>4} back "
              f"{listed['call_ms']:>8.1f} ms{' SCANS' if listed['scans'] else ''} | counts "
              f"{counts['read']:>9,} read {counts['call_ms']:>8.1f} ms"
              f"{' SCANS' if counts['scans'] else ''}", flush=True)  # fmt: skip
        append_result({**header, "variant": variant, "filters": list(combo),
                       "list": _summary(listed), "counts": _summary(counts)}, results)  # fmt: skip
    return plans


# -- the proposals ---------------------------------------------------------------------------

# The indexes the results propose (see docs/running/scaling.md), made here by hand to
# measure them; no migration makes them. PostgreSQL: the parent's index made partial and
# ending in id (runs without a parent, most of them, leave it); a partial index for task
# runs' queue. MariaDB has no partial indexes: a queue index, whose column no claim or
# finish changes (InnoDB leaves such an index alone on UPDATE).
PROPOSED = {
    "postgresql": [
        "CREATE INDEX everystep_wf_parent_id_id ON everystep_workflow (parent_id, id) "
        "WHERE parent_id IS NOT NULL",
        "DROP INDEX everystep_workflow_parent_id_009dc798",
        "CREATE INDEX everystep_wf_queue_status_id ON everystep_workflow (queue, status, id) "
        "WHERE queue IS NOT NULL",
    ],
    "mysql": ["CREATE INDEX everystep_wf_queue ON everystep_workflow (queue)"],
}


def make_proposed(connection: Any) -> None:
    with connection.cursor() as cursor:
        for sql in PROPOSED[connection.vendor]:
            cursor.execute(sql)
    _analyze(connection)


def _analyze(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # As ui_scale.py: index-only scans need the visibility map a bulk load leaves empty.
            cursor.execute("VACUUM (ANALYZE) everystep_workflow")
        else:
            cursor.execute("ANALYZE TABLE everystep_workflow")
            cursor.fetchall()


def query_changes(values: dict[str, Any], header: dict[str, Any], results: Path) -> None:
    """The query changes the results weigh, measured beside what the page runs."""
    from django.db import connection

    from everystep.models import Status, Workflow
    from everystep.store.reports import COUNT_CAP, id_bounds

    window = id_bounds(values["created_after"], values["created_before"])
    after = id_bounds(values["created_after"])

    def rows(sql: str, params: Any) -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def ordered(bounds: dict[str, Any]) -> list[int]:
        # Capped as today, newest first: the (status, id) index's range, stopping at the cap.
        runs = Workflow.objects.filter(**bounds).order_by("-id").values("id")
        return [runs.filter(status=s)[: COUNT_CAP + 1].count() for s in Status.values]

    def named(bounds: dict[str, Any]) -> list[Any]:
        # MariaDB told which index to take: the (status, id) range rather than every
        # entry of the status (its estimate of a status' rows is far too low).
        runs = Workflow.objects.filter(**bounds).order_by().values("id")
        table = f"FROM {connection.ops.quote_name(Workflow._meta.db_table)}"
        found = []
        for status in Status.values:
            sql, params = runs.filter(status=status)[: COUNT_CAP + 1].query.sql_with_params()
            sql = sql.replace(table, f"{table} FORCE INDEX (everystep_wf_status_holder)", 1)
            found += rows(f"SELECT COUNT(*) FROM ({sql}) capped", params)
        return found

    def family(bounds: dict[str, Any]) -> list[Any]:
        # One statement through the parent's index: the family read once, not per status.
        runs = Workflow.objects.filter(parent=values["parent"], **bounds).order_by()
        cap = len(Status.values) * (COUNT_CAP + 1)
        sql, params = runs.values("status")[:cap].query.sql_with_params()
        return rows(f"SELECT status, COUNT(*) FROM ({sql}) family GROUP BY status", params)

    changes = {
        "counts created_after, newest first": lambda: ordered(after),
        "counts created_after+created_before, newest first": lambda: ordered(window),
        "counts parent, one grouped statement": lambda: family({}),
        "counts parent+created_after+created_before, one grouped statement": lambda: family(window),
    }
    if connection.vendor == "mysql":
        changes["counts created_after, index named"] = lambda: named(after)
        changes["counts created_after+created_before, index named"] = lambda: named(window)
    print(f"-- query changes (load {_uptime()})", flush=True)
    for label, call in changes.items():
        measured = measure(call)
        print(f"{label:60} {measured['read']:>9,} read {measured['call_ms']:>8.1f} ms", flush=True)
        append_result({**header, "variant": "query change", "change": label,
                       "counts": _summary(measured)}, results)  # fmt: skip


def hot_path(header: dict[str, Any], variant: str, results: Path) -> None:
    """What a claim and a finish touch for one plain run, one task run and one child run:
    each UPDATE explained and rolled back (PostgreSQL's buffers include the indexes'
    new entries; MariaDB's ANALYZE gives its time)."""
    from django.db import transaction
    from django.utils import timezone

    from everystep.models import Workflow, finish_fields, take_fields

    now = timezone.now()
    picks = {
        "plain": Workflow.objects.filter(queue=None, parent=None, status="scheduled"),
        "task": Workflow.objects.filter(queue="default", parent=None, status="scheduled"),
        "child": Workflow.objects.filter(queue=None, parent__isnull=False, status="scheduled"),
    }
    found: dict[str, Any] = {}
    for kind, runs in picks.items():
        run_id = runs.values_list("id", flat=True).first()
        claim = lambda r=run_id: Workflow.objects.filter(id=r).update(  # noqa: E731
            **take_fields("runner-x", uuid.uuid4(), now)
        )
        finish = lambda r=run_id: Workflow.objects.filter(id=r).update(  # noqa: E731
            **finish_fields("completed", {"ok": True}, None, now)
        )
        for step, call in (("claim", claim), ("finish", finish)):
            with transaction.atomic():
                _, statements = capture(call)
                transaction.set_rollback(True)
            with transaction.atomic():
                if step == "finish":
                    claim()  # the run is running when it finishes
                one = explain_write(*statements[0])
                transaction.set_rollback(True)
            found[f"{kind} {step}"] = one
    print(f"-- hot path, {variant}: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    append_result({**header, "variant": variant, "hot_path": found}, results)


def explain_write(sql: str, params: Any) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
            raw = cursor.fetchone()[0]
            top = (raw if isinstance(raw, list) else json.loads(raw))[0]
            plan = top["Plan"]
            pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            return {"pages": pages, "dirtied": plan.get("Shared Dirtied Blocks", 0),
                    "ms": round(top["Execution Time"], 3)}  # fmt: skip
        cursor.execute(f"ANALYZE FORMAT=JSON {sql}", params)
        doc = json.loads(cursor.fetchone()[0])
        return {"ms": round(doc["query_block"].get("r_total_time_ms", 0.0), 3)}


# Kept in the plans file only: the result lines stay small.
_PLAN_ONLY = ("plan", "sql", "params")


def _summary(measured: dict[str, Any]) -> dict[str, Any]:
    statements = [
        {k: v for k, v in one.items() if k not in _PLAN_ONLY} for one in measured["statements"]
    ]
    return {**{k: v for k, v in measured.items() if k != "statements"}, "statements": statements,
            "loadavg": loadavg()}  # fmt: skip


def _uptime() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


# -- the database ---------------------------------------------------------------------------


def drop_database(database: str) -> None:
    """Drop the database this script made (the name is checked as ``create_database`` does)."""
    if not database.startswith("everystep_scale_plans"):
        raise SystemExit(f"refusing to drop {database!r}")
    ui_scale.drop_database(database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "mariadb"], required=True)
    parser.add_argument("--database", default="everystep_scale_plans")
    parser.add_argument("--keep", action="store_true", help="keep the database (reused next time)")
    parser.add_argument(
        "--proposed", action="store_true", help="then make PROPOSED's indexes and measure again"
    )
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs in the history ({RUNS})")
    add_results_argument(parser)
    parser.add_argument(
        "--plans", type=Path, default=PLANS, metavar="DIR", help="write the plans here"
    )
    args = parser.parse_args()
    if args.runs < 250 * CHUNKS:  # the fan-out's 100 children probed fit in one chunk
        parser.error(f"--runs: at least {250 * CHUNKS}")
    if not args.database.startswith("everystep_scale_plans"):
        raise SystemExit("--database must start with everystep_scale_plans")
    configure(args.db, args.database)
    import django

    django.setup()
    from django.db import connection

    create_database(args.database)
    try:
        origin = fill(connection, args.runs)
        values = probe_values(origin)
        shown = {k: str(v) for k, v in values.items()}
        header = {"kind": "ui_plans", "db": args.db, **machine_info(), "values": shown}
        header["source"] = source_info(ROOT)
        plans = {"as is": run_pass(values, header, "as is", args.results)}
        query_changes(values, header, args.results)
        hot_path(header, "as is", args.results)
        if args.proposed:
            make_proposed(connection)
            plans["proposed indexes"] = run_pass(values, header, "proposed indexes", args.results)
            hot_path(header, "proposed indexes", args.results)
        args.plans.mkdir(parents=True, exist_ok=True)
        target = args.plans / f"ui_plans-{args.db}.json"
        target.write_text(json.dumps(plans, indent=1, default=str))
        print(f"plans in {target}; load at the end: {_uptime()}")
    finally:
        if not args.keep:
            drop_database(args.database)


if __name__ == "__main__":
    main()
