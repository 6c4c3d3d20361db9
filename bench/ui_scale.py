"""The on-call UI at a million runs (issue 13): build a database of 1,000,000 runs and
5,000,000 steps, then time every page and filter of the UI against it.

    .venv/bin/python bench/ui_scale.py --db postgres generate
    .venv/bin/python bench/ui_scale.py --db postgres time [--requests 20]
    .venv/bin/python bench/ui_scale.py --db postgres drop

``generate`` creates the database ``everystep_scale`` (``--database`` to name another)
on the local server, migrates it with the project's migrations and fills it; it is
resumable (see ``ui_scale_data``) and says how long it took. ``time`` requests each
page of ``ui_scale_timing.PAGES`` (and runs each store query of ``queries()``) ``--requests`` times
through Django's test client, prints median and p95, and writes the query plans of
the statements each one made to ``bench/ui_scale_plans/`` (not kept in git). Settings:
``everystep_bench.scale_settings``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness.options import add_results_argument
from harness.server import retrying
from ui_scale_data import RUNS
from ui_scale_timing import PLANS, time_all

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
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


def drop_database(database: str) -> None:
    """``DROP DATABASE`` through the server's own database (a name ``create_database``
    would fill)."""
    if not database.startswith("everystep_scale"):
        raise SystemExit(f"refusing to drop {database!r}")
    from django.db import connections

    connections["default"].close()
    admin = connections["default"].settings_dict.copy()
    admin["NAME"] = "postgres" if admin["ENGINE"].endswith("postgresql") else "test"
    conn = type(connections["default"])(admin, "scale_admin")
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        else:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
    conn.close()
    print(f"dropped {database}")


# -- generate ----------------------------------------------------------------------------


def generate(runs: int) -> None:
    import ui_scale_data as data
    from django.core.management import call_command
    from django.db import connection

    retrying(lambda: call_command("migrate", verbosity=0))
    origin = retrying(lambda: data.prepare(connection))
    done = retrying(lambda: data.done_chunks(connection))
    print(f"origin {origin.isoformat()}; {len(done)} of {data.CHUNKS + 1} chunks already written")
    began = time.monotonic()
    for chunk in data.all_chunks(origin, done, runs):
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
    parser.add_argument(
        "--runs", type=int, default=RUNS, help=f"generate: runs besides the big one ({RUNS})"
    )
    add_results_argument(parser)
    parser.add_argument("--plans", type=Path, default=PLANS, metavar="DIR", help="time: plans")
    parser.add_argument("command", choices=["generate", "time", "drop"])
    args = parser.parse_args()
    configure(args.db, args.database, args.source)
    import django

    django.setup()
    import everystep

    print(f"everystep from {Path(everystep.__file__).resolve().parent}", flush=True)
    if args.command == "generate":
        create_database(args.database)
        generate(args.runs)
    elif args.command == "time":
        time_all(args.db, args.requests, args.source, args.results, args.plans)
    else:
        drop_database(args.database)


if __name__ == "__main__":
    main()
