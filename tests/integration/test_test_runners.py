"""A user's own tests of runs that publish pass in Django's test runner and in
pytest-django, on SQLite and PostgreSQL, and leave no test database behind (issue 54).

The project is ``tests/projects/publishing``: a sync and an async workflow that publish
from their body and from a step, and tests as a user writes them, in a ``TestCase`` (a
transaction per test) and a ``TransactionTestCase``, driven by ``run_due()``. Before, on
SQLite the async run stayed ``running`` under a ``TestCase`` with no error (its value was
written on another connection, which waited for the test's write lock), and on
PostgreSQL ``manage.py test`` failed at teardown ("database … is being accessed by other
users": the connection of the thread that sends the NOTIFY) and left its database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

PROJECT = Path(__file__).resolve().parents[1] / "projects" / "publishing"

# Once per Django (the SQLite lane and the compat tier on Django 6): the test runs the
# project on SQLite and on PostgreSQL itself.
pytestmark = [pytest.mark.backends("sqlite")]

RUNNERS = {
    "django": ["manage.py", "test", "--pattern", "probe_*.py", "--noinput"],
    "pytest": ["-m", "pytest", "-c", "probe.ini", "--rootdir", ".", "-p", "no:cacheprovider"],
}


def run_project(
    runner: str, database: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], str]:
    test_db = f"test_publishing_{uuid.uuid4().hex[:10]}"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DJANGO_", "EVERYSTEP_TEST_DB"))
    }
    env.update(PUBLISHING_DB=database, PUBLISHING_TEST_DB=test_db, PUBLISHING_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, *RUNNERS[runner]],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, test_db


def postgres() -> psycopg.Connection:
    """The PostgreSQL server the project's tests ran on, in autocommit."""
    return psycopg.connect(
        host=os.environ.get("EVERYSTEP_TEST_PG_HOST", "127.0.0.1"),
        port=os.environ.get("EVERYSTEP_TEST_PG_PORT", "5432"),
        user=os.environ.get("EVERYSTEP_TEST_PG_USER", "postgres"),
        password=os.environ.get("EVERYSTEP_TEST_PG_PASSWORD", ""),
        dbname="postgres",
        autocommit=True,
    )


def left_behind(name: str) -> bool:
    """Whether the test database ``name`` still exists; dropped if so (the failure is
    reported, the server is not left with it)."""
    with postgres() as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            return True
    return False


# The PostgreSQL cases use that server from a SQLite session: they hold its room
# (tests/exclusive.py), so no test that restarts it runs meanwhile in the other lane.
@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.servers("postgres"))]
)
@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_projects_tests_that_publish_pass_and_remove_their_database(runner, database, tmp_path):
    done, test_db = run_project(runner, database, tmp_path)
    # A SQLite test database is a file under tmp_path (checked below); only the
    # PostgreSQL case touches that server, so only it holds the server's room.
    left = database == "postgres" and left_behind(test_db)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    # pytest runs the TestCase classes too, and its own four tests.
    expected = "8 passed" if runner == "pytest" else "Ran 4 tests"
    assert expected in output, output
    assert not left, f"{runner} left {test_db} behind"
    assert not list(tmp_path.iterdir()), "nothing written next to the project"
