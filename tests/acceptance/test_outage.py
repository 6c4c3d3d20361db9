"""A worker started while the database is down waits for it, logging each attempt, and
then works as usual (it used to die at once in a chaos run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import DatabaseError, connections

from everystep import schedule
from everystep.models import Workflow
from tests.acceptance.conftest import database_server, wait_until
from tests.testapp import workflows as wf
from tests.workers import ROOT, worker_env

# The server stops, or the SQLite directory every pytest worker shares moves away.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.exclusive,
    pytest.mark.tiers("pooler"),
]


@contextmanager
def database_down() -> Iterator[None]:
    """The test database unreachable: the server stopped (PostgreSQL, MariaDB), or the
    SQLite file's directory moved away (opening the file then fails)."""
    connections.close_all()
    if os.environ.get("EVERYSTEP_TEST_DB", "sqlite") == "sqlite":
        here = Path(os.environ["EVERYSTEP_TEST_SQLITE_DIR"])
        away = here.with_name(here.name + ".away")
        here.rename(away)
        try:
            yield
        finally:
            away.rename(here)
    else:
        database_server("stop")
        try:
            yield
        finally:
            database_server("start")
            answering()
    connections.close_all()


def answering(timeout: float = 60.0) -> None:
    """Until this process's own queries work again: through PgBouncer the first ones can
    still fail for a moment after the server is back (its server_login_retry)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1")
            return
        except DatabaseError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def runner_worker(name: str, log: Path) -> subprocess.Popen[bytes]:
    """The runner image's ``worker`` role, run from this checkout's venv."""
    runner = Path(sys.executable).with_name("everystep-runner")
    command = [str(runner), "--project-dir", str(ROOT), "--settings-module", "tests.settings"]
    command += ["--name", name, "--poll", "0.1", "worker"]
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=worker_env(), stdout=out, stderr=out)


@pytest.mark.parametrize("how", ["manage.py", "everystep-runner"])
def test_a_worker_started_during_an_outage_waits_for_the_database(workers, tmp_path, how):
    run = schedule(wf.sequential, 2, 3)
    log = tmp_path / "runner.log"
    with database_down():
        if how == "manage.py":
            proc = workers("patient", "--poll", "0.1")
            popen, read = proc.proc, proc.log
        else:
            popen, read = runner_worker("patient", log), log.read_text
        try:
            wait_until(
                lambda: read().count("database unavailable") >= 3 or popen.poll() is not None,
                90,
                "three retry attempts",
            )
            assert popen.poll() is None, f"the worker must wait, not exit:\n{read()}"
            assert "Traceback" not in read()
        except BaseException:
            popen.kill()
            raise
    try:
        wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 120, "the run")
        assert "database reachable again" in read()
    finally:
        stop(popen, read)


def stop(popen: subprocess.Popen[bytes], read: Callable[[], str]) -> None:
    """SIGTERM, and a clean exit within a minute; if not, the stacks of its threads."""
    popen.send_signal(signal.SIGTERM)
    try:
        code = popen.wait(60)
    except subprocess.TimeoutExpired:
        popen.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER (worker_env): the stacks
        popen.wait(10)
        pytest.fail(f"the worker did not exit within 60 s of SIGTERM; its log:\n{read()[-8000:]}")
    assert code == 0, read()[-4000:]
