"""The on-call UI at a million runs (issue 13): build a database of 1,000,000 runs and
5,000,000 steps, then time every page and filter of the UI against it.

    .venv/bin/python bench/ui_scale.py --db postgres generate
    .venv/bin/python bench/ui_scale.py --db postgres time [--requests 20]

``generate`` creates the database ``everystep_scale`` (``--database`` to name another)
on the local server, migrates it with the project's migrations and fills it; it is
resumable (see ``ui_scale_data``) and says how long it took. ``time`` requests each
page of ``PAGES`` (and runs each store query of ``QUERIES``) ``--requests`` times
through Django's test client, prints median and p95, and writes the query plans of
the statements each one made to ``bench/ui_scale_plans/``. Settings:
``everystep_bench.scale_settings``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PLANS = BENCH / "ui_scale_plans"
TARGET_MS = 200.0

# -- what is timed: update these tables as the views grow ---------------------------------
# (label, URL name, query parameters), the parameters those of the runs list on branch
# ui13 (search ``q``, ``created_after``/``created_before``, keyset ``older``/``newer``).
# Placeholders, filled by ``ui_scale_timing.context``: ``{big}`` the big run's id,
# ``{prefix}`` its first 8 hex digits, ``{key}`` an idempotency key, ``{name}`` the
# busiest workflow, ``{rare}`` the rarest, ``{runner}`` a runner, ``{deep}`` the id of
# the 600,000th newest run, ``{day_ago}`` one day before the newest run, ``{t0}`` and
# ``{t1}``: one day, 60 days before the newest run.
RUNS, RUN = "everystep:runs", "everystep:run"
DAY = {"created_after": "{t0}", "created_before": "{t1}"}
PAGES: list[tuple[str, str, dict[str, str]]] = [
    ("runs: first page", RUNS, {}),
    ("runs: status=failed", RUNS, {"status": "failed"}),
    ("runs: status=running", RUNS, {"status": "running"}),
    ("runs: status=blocked", RUNS, {"status": "blocked"}),
    ("runs: status=scheduled", RUNS, {"status": "scheduled"}),
    ("runs: status=completed", RUNS, {"status": "completed"}),
    ("runs: status=cancelled", RUNS, {"status": "cancelled"}),
    ("runs: status=stopped", RUNS, {"status": "stopped"}),
    ("runs: workflow (busiest)", RUNS, {"workflow": "{name}"}),
    ("runs: workflow (rare)", RUNS, {"workflow": "{rare}"}),
    ("runs: workflow unknown", RUNS, {"workflow": "no.such_workflow"}),
    ("runs: runner", RUNS, {"runner": "{runner}"}),
    ("runs: runner unknown", RUNS, {"runner": "runner-gone"}),
    ("runs: status+workflow (rare)", RUNS, {"status": "failed", "workflow": "{rare}"}),
    ("runs: status+runner", RUNS, {"status": "failed", "runner": "{runner}"}),
    ("runs: status+workflow+runner", RUNS, {"status": "failed", "workflow": "{name}",
                                            "runner": "{runner}"}),
    ("runs: last 24 h", RUNS, {"created_after": "{day_ago}"}),
    ("runs: one day, 60 days ago", RUNS, DAY),
    ("runs: created before, 59 days ago", RUNS, {"created_before": "{t1}"}),
    ("runs: one day + status=failed", RUNS, {**DAY, "status": "failed"}),
    ("runs: one day + workflow (busiest)", RUNS, {**DAY, "workflow": "{name}"}),
    ("runs: deep page (older than 600,000)", RUNS, {"older": "{deep}"}),
    ("runs: deep page + status=failed", RUNS, {"older": "{deep}", "status": "failed"}),
    ("runs: deep page, newer direction", RUNS, {"newer": "{deep}"}),
    ("search: full run id", RUNS, {"q": "{big}"}),
    ("search: id prefix (8 hex digits)", RUNS, {"q": "{prefix}"}),
    ("search: idempotency key", RUNS, {"q": "{key}"}),
    ("search: nothing found", RUNS, {"q": "no-such-key"}),
    ("search: id prefix + status=failed", RUNS, {"q": "{prefix}", "status": "failed"}),
    ("search: key + workflow (busiest)", RUNS, {"q": "{key}", "workflow": "{name}"}),
    ("run: big run (2,000 steps)", RUN, {}),
    ("run: big run, table page 10", RUN, {"steps": "10"}),
    ("run: big run, whole graph", RUN, {"graph": "all"}),
    ("run: big run, all steps", RUN, {"steps": "all"}),
    ("runners", "everystep:runners", {}),
]  # fmt: skip


def queries() -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    """Store statements timed on their own: a time window written on ``created_at``
    (no index) against the same window as a UUIDv7 id range, which the views use."""
    from everystep.models import Workflow

    runs = Workflow.objects.defer("args", "result", "error").order_by("-id")
    return [
        (
            "store: one day by created_at",
            lambda c: list(
                runs.filter(created_at__gte=c["t0_at"], created_at__lt=c["t1_at"])[:200]
            ),
        ),
        (
            "store: one day by id range",
            lambda c: list(runs.filter(id__gte=c["t0_id"], id__lt=c["t1_id"])[:200]),
        ),
    ]


# -- setup -------------------------------------------------------------------------------


def configure(db: str, database: str, source: Path = ROOT) -> None:
    """Settings for the scale database, ``everystep`` and ``tests`` imported from
    ``source``; call before Django is imported."""
    for key in [k for k in os.environ if k.startswith("EVERYSTEP_")]:
        del os.environ[key]
    os.environ["EVERYSTEP_TEST_DB"] = db
    os.environ["EVERYSTEP_SCALE_DB"] = database
    os.environ["DJANGO_SETTINGS_MODULE"] = "everystep_bench.scale_settings"
    for path in (str(BENCH), str(source)):  # source ends up first
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def create_database(database: str) -> None:
    """``CREATE DATABASE`` through the server's own database, unless it exists."""
    if not database.startswith("everystep_scale"):
        raise SystemExit(f"refusing to fill {database!r}: the name must start everystep_scale")
    from django.db import connections

    admin = connections["default"].settings_dict.copy()
    admin["NAME"] = "postgres" if admin["ENGINE"].endswith("postgresql") else "test"
    conn = type(connections["default"])(admin, "scale_admin")
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{database}"')
        else:
            cursor.execute(
                f"CREATE DATABASE IF NOT EXISTS `{database}` "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
    conn.close()


def retrying(action: Callable[[], Any], attempts: int = 20) -> Any:
    """``action()``, again after a dropped connection: other engineers' tests restart the
    database servers."""
    from django.db import DatabaseError, InterfaceError, connection

    for attempt in range(attempts):
        try:
            return action()
        except (DatabaseError, InterfaceError) as exc:
            if attempt == attempts - 1:
                raise
            print(f"  database error ({exc.__class__.__name__}: {exc}); retrying", flush=True)
            connection.close()
            time.sleep(3)
    return None


# -- generate ----------------------------------------------------------------------------


def generate() -> None:
    import ui_scale_data as data
    from django.core.management import call_command
    from django.db import connection

    retrying(lambda: call_command("migrate", verbosity=0))
    origin = retrying(lambda: data.prepare(connection))
    done = retrying(lambda: data.done_chunks(connection))
    print(f"origin {origin.isoformat()}; {len(done)} of {data.CHUNKS + 1} chunks already written")
    began = time.monotonic()
    for chunk in data.all_chunks(origin, done):
        took = retrying(functools.partial(data.write_chunk, connection, chunk, origin))
        print(f"  chunk {chunk.number}: {len(chunk.runs)} runs, {len(chunk.steps)} steps, "
              f"{took:.1f} s", flush=True)  # fmt: skip
    elapsed = time.monotonic() - began
    retrying(lambda: _analyze(connection))
    print(f"generation: {elapsed:.0f} s this pass; chunk write times sum to "
          f"{retrying(lambda: _written_seconds(connection)):.0f} s")  # fmt: skip
    print(_counts(connection))


def _analyze(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # VACUUM as autovacuum would in time: index-only scans (the capped status
            # counts) need the visibility map, which a bulk load leaves empty.
            cursor.execute("VACUUM (ANALYZE) everystep_workflow, everystep_step")
        else:
            cursor.execute("ANALYZE TABLE everystep_workflow, everystep_step")
            cursor.fetchall()


def _written_seconds(connection: Any) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT SUM(seconds) FROM scale_chunks")
        return float(cursor.fetchone()[0] or 0)


def _counts(connection: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM everystep_workflow")
        runs = cursor.fetchone()[0]
        cursor.execute("SELECT COUNT(*) FROM everystep_step")
        steps = cursor.fetchone()[0]
    return f"{runs:,} runs, {steps:,} steps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "mariadb"], required=True)
    parser.add_argument("--database", default="everystep_scale")
    parser.add_argument("--requests", type=int, default=20, help="requests per page (20)")
    parser.add_argument(
        "--source",
        type=Path,
        default=ROOT,
        help="tree whose everystep/ and tests/ are measured and migrate the database "
        "(default: this repository); e.g. a scratch merge with another branch",
    )
    parser.add_argument("command", choices=["generate", "time"])
    args = parser.parse_args()
    configure(args.db, args.database, args.source)
    import django

    django.setup()
    import everystep

    print(f"everystep from {Path(everystep.__file__).resolve().parent}", flush=True)
    if args.command == "generate":
        create_database(args.database)
        generate()
    else:
        from ui_scale_timing import time_all

        time_all(args.db, args.requests, args.source)


if __name__ == "__main__":
    main()
