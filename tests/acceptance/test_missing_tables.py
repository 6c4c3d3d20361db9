"""Issue 18: commands and a worker started against a database that has no everystep
tables (migrate never ran) say to run migrate, in one line; the worker then waits, and
starts working once migrate has run, without a restart. The database is a fresh one made
by the test (a new SQLite file, or a new PostgreSQL / MariaDB database, dropped after)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.acceptance.conftest import wait_until
from tests.workers import manage, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

SETTINGS = """\
import os

from tests.settings import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["EVERYSTEP_TEST_FRESH_DB"]  # noqa: F405
"""

MIGRATE_HINT = "everystep's tables are missing: run `python manage.py migrate`"
STILL_MISSING = "everystep's tables are still missing"


@pytest.fixture
def fresh_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a subprocess whose settings point at an empty database."""
    vendor = connection.vendor
    name = f"everystep_fresh_{uuid.uuid4().hex[:10]}"
    if vendor == "sqlite":
        name = str(tmp_path / f"{name}.sqlite3")
    else:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
    (tmp_path / "fresh_settings.py").write_text(SETTINGS)
    env = worker_env(str(tmp_path))
    env.update({"DJANGO_SETTINGS_MODULE": "fresh_settings", "EVERYSTEP_TEST_FRESH_DB": name})
    try:
        yield env
    finally:
        if vendor != "sqlite":
            force = " WITH (FORCE)" if vendor == "postgresql" else ""
            with connection.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {name}{force}")


COMMANDS = [
    ["everystep_runs"],
    ["everystep_show", "01900000-0000-7000-8000-000000000000"],
    ["everystep_requeue_runner", "gone"],
    ["everystep_prune", "--older-than", "30"],
]


def test_commands_say_to_run_migrate_in_one_line(fresh_env: dict[str, str]):
    """Each command exits 1 with one line saying to run migrate, no traceback; the replay
    check exits 2 ("could not run") with the same line."""
    for args, status in [*((args, 1) for args in COMMANDS), (["everystep_check_replay"], 2)]:
        done = manage(fresh_env, *args)
        lines = done.stderr.splitlines()
        assert (done.returncode, len(lines)) == (status, 1), (args, done.stderr)
        assert lines[0].startswith(f"CommandError: {MIGRATE_HINT}"), lines[0]
        assert "Traceback" not in done.stdout + done.stderr


def test_a_worker_waits_for_migrate_and_then_works(fresh_env: dict[str, str], workers: Any):
    """A worker on an empty database logs "run migrate" once (not per retry), keeps
    waiting, and completes a run scheduled after migrate ran, with no restart."""
    worker = workers(
        "fresh",
        "--poll",
        "0.05",
        extra_path=fresh_env["PYTHONPATH"].split(os.pathsep)[0],
        env={
            "DJANGO_SETTINGS_MODULE": "fresh_settings",
            "EVERYSTEP_TEST_FRESH_DB": fresh_env["EVERYSTEP_TEST_FRESH_DB"],
            "EVERYSTEP_TEST_LOG_LEVEL": "DEBUG",
        },
    )
    wait_until(lambda: MIGRATE_HINT in worker.log(), 60, "the missing-tables message")
    # Each later attempt is a DEBUG line only.
    wait_until(lambda: worker.log().count(STILL_MISSING) >= 3, 60, "three more attempts")
    migrated = manage(fresh_env, "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    scheduled = manage(
        fresh_env,
        "shell",
        "--no-imports",
        "-c",
        "from everystep import schedule; from tests.testapp import workflows as wf; "
        "print(schedule(wf.sequential, 2, 3).id)",
    )
    assert scheduled.returncode == 0, scheduled.stderr
    run_id = scheduled.stdout.split()[-1]
    # The run's outcome line (its steps log at DEBUG before it, also naming the run).
    outcome = re.compile(rf"run {run_id} \(\S+\) (completed|failed|stopped|blocked)")
    wait_until(lambda: outcome.search(worker.log()), 60, "the run's outcome")
    log = worker.log()
    assert f"run {run_id} (tests.testapp.workflows.sequential) completed" in log
    assert log.count(MIGRATE_HINT) == 1
    assert "database unavailable" not in log
    assert "everystep's tables are there now" in log
    worker.signal(15)
    assert worker.wait(60) == 0
