"""Upgrades under load (issue 22): how long the previous release's writes wait while
``migrate`` takes a million runs from migration 0004 to the newest schema, with the
migrations before issue 22 (plain ``CREATE INDEX`` in atomic migrations) and with the
online ones.

    .venv/bin/python bench/upgrade.py --db postgres|mariadb [--db …] [--runs 1000000]
        [--plain-source PATH] [--label NAME] [--no-record]

For each database and each mode: a fresh database (``everystep_bench_upgrade_…``,
dropped at the end) migrated to 0004 by that mode's source tree, RUNS finished runs with
one step each (raw SQL), then ``manage.py migrate everystep`` while writers of the
previous release schedule runs and record steps (``tests/upgrade_load.py``: two threads
of each, a write every 10 ms each, every write timed from statement to commit) and a
monitor sees the index builds and the writers waiting for a lock. ``plain`` runs the
migrations of ``--plain-source`` (default: a worktree of commit f9f983c, the last with
plain ``AddIndex``, made and removed here); ``online`` those of this tree. Prints one JSON
line per run and appends it (``"kind": "upgrade"``) to ``bench/results/upgrade.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from harness.options import add_results_argument  # noqa: E402
from harness.results import append_result  # noqa: E402

from tests.upgrade_load import Monitor, Writers, connect, populate, summary  # noqa: E402

PLAIN_COMMIT = "f9f983c"
VENDORS = {"postgres": "postgresql", "mariadb": "mysql"}
SETTINGS = """\
import os

from tests.settings import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["EVERYSTEP_BENCH_UPGRADE_DB"]  # noqa: F405
"""


def server_settings(db: str) -> dict[str, Any]:
    env = {**os.environ, "EVERYSTEP_TEST_DB": db}
    code = "import json, tests.settings as s; print(json.dumps(s.DATABASES['default']))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return dict(json.loads(out.stdout))


def manage(source: Path, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(source / "manage.py"), *args],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def measure(db: str, mode: str, source: Path, runs: int, scratch: Path) -> dict[str, Any]:
    vendor = VENDORS[db]
    server = server_settings(db)
    name = f"everystep_bench_upgrade_{uuid.uuid4().hex[:8]}"
    admin = connect(vendor, server, "postgres" if vendor == "postgresql" else "test")
    charset = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if vendor == "mysql" else ""
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}{charset}")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") or key.startswith("EVERYSTEP_TEST_")
    }
    env.update(
        EVERYSTEP_TEST_DB=db,
        EVERYSTEP_BENCH_UPGRADE_DB=name,
        DJANGO_SETTINGS_MODULE="upgrade_settings",
        PYTHONPATH=os.pathsep.join([str(scratch), str(source)]),
    )
    try:
        manage(source, env, "migrate", "--verbosity", "0")
        manage(source, env, "migrate", "everystep", "0004_recoveries", "--verbosity", "0")
        conn = connect(vendor, server, name)
        started = time.monotonic()
        populate(conn, vendor, runs)
        populate_seconds = time.monotonic() - started
        writers = Writers(vendor, lambda: connect(vendor, server, name))
        writers.start()
        monitor = Monitor(vendor, connect(vendor, server, name), writers.pids)
        monitor.start()
        time.sleep(0.5)
        started = time.monotonic()
        manage(source, env, "migrate", "everystep", "--verbosity", "0")
        migrate_seconds = time.monotonic() - started
        time.sleep(0.5)
        writers.stop()
        monitor.stop()
        errors = sorted({w.error.split("\n")[0][:120] for w in writers.writes if w.error})
        return {
            "db": db,
            "mode": mode,
            "runs": runs,
            "populate_seconds": round(populate_seconds, 1),
            **summary(writers.writes, monitor, migrate_seconds),
            "write_errors": errors,
        }
    finally:
        with admin.cursor() as cursor:
            force = " WITH (FORCE)" if vendor == "postgresql" else ""
            cursor.execute(f"DROP DATABASE IF EXISTS {name}{force}")
        admin.close()


def main() -> None:
    """Measure each database in each mode, once."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", choices=sorted(VENDORS), required=True)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--plain-source", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-record", action="store_true", help="a trial: no result line")
    add_results_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="everystep-upgrade-") as tmp:
        scratch = Path(tmp)
        (scratch / "upgrade_settings.py").write_text(SETTINGS)
        plain = args.plain_source
        if plain is None:
            plain = scratch / "plain"
            subprocess.run(
                ["git", "worktree", "add", "--detach", "-q", str(plain), PLAIN_COMMIT],
                cwd=ROOT,
                check=True,
            )
        try:
            for db in args.db:
                for mode, source in (("plain", plain), ("online", ROOT)):
                    figures = measure(db, mode, source, args.runs, scratch)
                    print(json.dumps(figures), flush=True)
                    if args.no_record:
                        continue
                    append_result(
                        {
                            "kind": "upgrade",
                            "label": args.label,
                            "command": " ".join(sys.argv),
                            "machine": {
                                "nproc": os.cpu_count(),
                                "python": platform.python_version(),
                                "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                            },
                            **figures,
                        },
                        args.results,
                    )
        finally:
            if args.plain_source is None:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(plain)], cwd=ROOT, check=False
                )


if __name__ == "__main__":
    main()
