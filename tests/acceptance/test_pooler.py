"""Workers behind PgBouncer in transaction mode (``.ci/pgbouncer``, 127.0.0.1:6432).

Whatever tier runs them, these workers connect through the pooler (the test settings'
``EVERYSTEP_TEST_PGBOUNCER``); `make pgbouncer` runs the whole worker and acceptance
suite that way too. A LISTEN made through the pooler is stranded on a server connection
the worker no longer holds: the worker must notice, say so once, and poll; with
``EVERYSTEP_LISTEN_DATABASE`` naming a direct alias it must wake at once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections

from everystep import schedule
from everystep.models import Runner, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import workflows as wf
from tests.workers import ROOT, worker_env

pytestmark = [
    pytest.mark.backends("postgres"),
    pytest.mark.django_db(transaction=True),
    pytest.mark.tiers("pooler"),
]

PORT = "6432"
# psql on PgBouncer's admin console: unaligned rows, fields split by a space.
ADMIN = ("psql", "-h", "127.0.0.1", "-p", PORT, "-U", "postgres", "-tA", "-F", " ")
UNREACHED = "notifications do not reach this worker's LISTEN"


@pytest.fixture(autouse=True)
def _pooler() -> None:
    ready = subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", PORT], check=False)
    if ready.returncode != 0:
        pytest.fail(f"PgBouncer is not running on 127.0.0.1:{PORT}: `.ci/pgbouncer start`")


def pooled(listen_direct: bool) -> dict[str, str]:
    return {
        "EVERYSTEP_TEST_PGBOUNCER": "1",
        "EVERYSTEP_TEST_PGBOUNCER_PORT": PORT,
        "EVERYSTEP_TEST_LISTEN_DIRECT": "1" if listen_direct else "0",
    }


def transactions_through_pooler() -> int:
    """Transactions PgBouncer has carried to the test database (its admin console)."""
    database = connections["default"].settings_dict["NAME"]
    out = subprocess.run(
        [*ADMIN, "-c", "SHOW STATS", "pgbouncer"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # SHOW STATS: database, total_xact_count, …
    return sum(int(row.split()[1]) for row in out.splitlines() if row.split()[:1] == [database])


def completed(run: Workflow) -> bool:
    return Workflow.objects.get(id=run.id).status == "completed"


def test_listen_through_the_pooler_is_reported_once_and_the_worker_polls(workers):
    proc = workers("pooled-poller", "--poll", "0.5", env=pooled(listen_direct=False))
    wait_until(lambda: UNREACHED in proc.log(), 60, "the worker to report its LISTEN")
    run = schedule(wf.three_steps, 1)
    wait_until(lambda: completed(run), 30, "the run to complete by polling")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert proc.log().count(UNREACHED) == 1
    assert "EVERYSTEP_LISTEN_DATABASE" in proc.log()


def test_behind_the_pooler_a_direct_listen_wakes_the_worker(workers):
    before = transactions_through_pooler()
    proc = workers("pooled-listener", "--poll", "60", env=pooled(listen_direct=True))
    wait_until(lambda: Runner.objects.filter(name="pooled-listener").exists(), 60, "the start")
    time.sleep(1.0)  # the first (empty) claim passes and the worker goes idle
    run = schedule(wf.three_steps, 1)
    # Far below the 60 s poll: only the NOTIFY, heard on the direct alias, explains it.
    wait_until(lambda: completed(run), 20, "the run to complete")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert UNREACHED not in proc.log()
    # The worker's own statements went through the pooler.
    assert transactions_through_pooler() > before


def test_the_runner_image_takes_a_listen_database_url(tmp_path: Path):
    """The runner's own settings: database_url through the pooler, listen_database_url
    straight to PostgreSQL; the runner wakes at once and says nothing about its LISTEN."""
    name = connections["default"].settings_dict["NAME"]
    env = {
        **worker_env(),
        "EVERYSTEP_TEST_PGBOUNCER": "0",  # the URLs alone decide
        "EVERYSTEP_PROJECT_DIR": str(ROOT),
        "EVERYSTEP_SETTINGS_MODULE": "tests.settings",
        "EVERYSTEP_DATABASE_URL": f"postgres://postgres@127.0.0.1:{PORT}/{name}",
        "EVERYSTEP_LISTEN_DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{name}",
        "EVERYSTEP_NAME": "pooled-runner",
        "EVERYSTEP_POLL": "60",
    }
    log = tmp_path / "runner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "everystep_runner", "worker"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: Runner.objects.filter(name="pooled-runner").exists() or proc.poll(),
                60,
                "the runner to start",
            )
            before = transactions_through_pooler()
            time.sleep(1.0)
            run = schedule(wf.three_steps, 1)
            wait_until(lambda: completed(run), 20, "the run to complete")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert UNREACHED not in log.read_text()
    assert transactions_through_pooler() > before
