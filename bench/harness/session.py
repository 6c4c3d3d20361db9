"""Which source tree is measured, and a fresh database for one benchmark run.

The source tree (``--source``, default: the repository this ``bench/`` belongs to) is
put first on ``sys.path`` and on the workers' ``PYTHONPATH``, so ``everystep`` and the
``tests`` project are imported from it, not from the editable install; ``bench/`` comes
next for ``everystep_bench`` (``DJANGO_SETTINGS_MODULE=everystep_bench.settings``). To
measure an older commit: ``git worktree add /tmp/everystep-before <commit>`` and pass
``--source /tmp/everystep-before``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import results
from harness.workers import Workers

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
SETTINGS = "everystep_bench.settings"


def configure(db: str, source: Path, scratch: Path, settings: str = SETTINGS) -> None:
    """Point the settings at a fresh, uniquely named database and put ``source`` first on
    ``sys.path``; call before Django is imported. Worker subprocesses inherit
    ``settings`` (``DJANGO_SETTINGS_MODULE``)."""
    for key in [k for k in os.environ if k.startswith("EVERYSTEP_")]:
        if not key.startswith("EVERYSTEP_TEST_") or key in {
            "EVERYSTEP_TEST_SUBPROCESS",
            "EVERYSTEP_TEST_CONN_MAX_AGE",
        }:
            del os.environ[key]
    os.environ["EVERYSTEP_TEST_DB"] = db
    os.environ["EVERYSTEP_TEST_DB_SUFFIX"] = f"bench_{uuid.uuid4().hex[:8]}"
    os.environ["EVERYSTEP_TEST_SQLITE_DIR"] = str(scratch)
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    for path in (str(BENCH), str(source)):  # source ends up first
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def setup_django(source: Path) -> None:
    """``django.setup()``, refusing to go on if ``everystep`` is not imported from ``source``."""
    import django

    django.setup()
    import everystep

    where = Path(everystep.__file__).resolve()
    if not where.is_relative_to(source.resolve()):
        raise SystemExit(f"everystep imported from {where}, not from --source {source}")


def create_database() -> str:
    """Create ``everystep_test_bench_…`` with migrations; the name to restore afterwards."""
    from django.db import connection

    original = str(connection.settings_dict["NAME"])
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return original


def drop_database(original_name: str) -> None:
    """Drop the benchmark database, if it got as far as being created."""
    from django.db import DatabaseError, connection

    name = str(connection.settings_dict["NAME"])
    if "everystep_test_bench_" not in name:  # still the server's own database
        return
    if connection.vendor == "sqlite" and not os.path.exists(name):
        return
    error: Exception | None = None
    for _ in range(10):  # someone may restart the server meanwhile
        try:
            if connection.vendor == "postgresql":
                _end_other_sessions(name)
            connection.creation.destroy_test_db(original_name, verbosity=0)
            return
        except DatabaseError as exc:
            error = exc
            connection.close()
            time.sleep(2)
    print(f"could not drop database {name} ({error}): drop it by hand", file=sys.stderr)


def _end_other_sessions(name: str) -> None:
    """Connections left by threads of this process that have ended (an embedded
    worker's pool) would make PostgreSQL refuse the drop."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
    connection.close()


def install_interrupts() -> None:
    """SIGTERM and SIGINT (even when a background shell ignores it) reach ``finally``."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)


@dataclass
class Session:
    """What a benchmark run has while its database exists."""

    scratch: Path  # worker logs and other scratch files
    workers: Workers
    info: dict[str, Any]  # results.machine_info() at the start


@contextmanager
def session(args: argparse.Namespace, prefix: str) -> Iterator[Session]:
    """Set up Django on a fresh benchmark database (``args.db``, ``args.source``; the
    settings module ``args.settings_module`` if set) and drop it afterwards, whatever
    happens; worker logs are kept (and their folder printed) with ``args.keep_logs`` or
    when the benchmark did not finish."""
    install_interrupts()
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    configure(args.db, args.source, scratch, getattr(args, "settings_module", SETTINGS))
    setup_django(args.source)
    workers = Workers(args.source, scratch, getattr(args, "log_level", "INFO"))
    original = create_database()
    finished = False
    try:
        yield Session(scratch, workers, results.machine_info())
        finished = True
    finally:
        workers.kill_all()  # workers hold connections: PostgreSQL refuses to drop a db in use
        drop_database(original)
        if getattr(args, "keep_logs", False) or not finished:
            print(f"worker logs kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run_benchmark(
    kind: str,
    args: argparse.Namespace,
    benchmark: Callable[[Session], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
) -> int:
    """A benchmark script's main: ``benchmark(session)`` on a fresh database, then its
    result line reported (``report``) and appended to ``<args.results>/<kind>.jsonl``."""
    with session(args, f"everystep-{kind}-") as current:
        parts = benchmark(current)
        record = results.result_record(
            kind, args, current.info, current.workers.problems(), **parts
        )
    report(record)
    results.append_result(record, getattr(args, "results", results.RESULTS))
    return 0
