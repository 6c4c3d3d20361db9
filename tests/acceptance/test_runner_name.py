"""One live worker process per runner name (issues 33 and 40), with real worker
subprocesses: a second process under a live worker's name exits 1 naming the holder, and
takes none of its runs; a restart after SIGKILL waits for the dead beat, then catches up."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db.models import Count

from everystep import schedule
from everystep.models import Runner, Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import workflows as wf
from tests.testapp.models import Execution
from tests.workers import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.05")
# The holder beats five times a second; the newcomer watches it for two of its beats but
# never less than five seconds (worker/naming.py's MIN_WATCH): a live holder cannot look
# silent on a busy machine.
HOLDER = ("--heartbeat", "0.2", "--orphan-timeout", "0", *FAST)
NEWCOMER = ("--heartbeat", "2", "--orphan-timeout", "0", *FAST)


def beating(name: str) -> Runner:
    return wait_until(lambda: Runner.objects.filter(name=name).first(), 60, f"{name}'s row")


def test_a_second_worker_under_a_live_name_exits_1_naming_its_host_and_pid(workers):
    """The second process is refused with exit 1 and one line naming the live holder's
    host and pid; the holder keeps its row and goes on."""
    holder = workers("twin", *HOLDER)
    row = beating("twin")
    second = workers("twin", *NEWCOMER)
    second.expect_alive = False
    assert second.wait(60) == 1
    log = second.log()
    (line,) = [line for line in log.splitlines() if line.startswith("CommandError:")]
    assert f"host {socket.gethostname()}, pid {holder.pid}" in line
    assert "Traceback" not in log
    after = Runner.objects.get(name="twin")
    assert (after.boot_id, after.pid) == (row.boot_id, holder.pid)
    run = schedule(wf.sequential, 1, 1)
    wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 60, "a run")
    holder.signal(signal.SIGTERM)
    assert holder.wait(60) == 0


def test_a_refused_worker_takes_none_of_the_live_workers_runs_in_flight(workers):
    """Issue 40: a worker runs 4 runs whose long steps are executing; a second process
    started under its name is refused before its catchup, so every step body of those
    runs executes exactly once and every run completes under the first worker."""
    runs = [schedule(wf.slow, 3) for _ in range(4)]
    holder = workers("shared", "--pool", "4", *HOLDER)
    wait_until(
        lambda: Execution.objects.filter(step="long").count() == 4, 60, "4 long steps running"
    )
    second = workers("shared", "--pool", "4", *NEWCOMER)
    second.expect_alive = False
    assert second.wait(60) == 1
    ids = [run.id for run in runs]
    wait_until(
        lambda: Workflow.objects.filter(id__in=ids, status="completed").count() == 4,
        90,
        "the 4 runs to complete",
    )
    per_body = Execution.objects.values("run_id", "step").annotate(n=Count("id"))
    assert len(per_body) == 12
    assert {row["n"] for row in per_body} == {1}, "a step body executed twice"
    assert set(Execution.objects.values_list("pid", flat=True)) == {holder.pid}
    assert Step.objects.filter(workflow_id__in=ids).count() == 12
    holder.signal(signal.SIGTERM)
    assert holder.wait(60) == 0


def test_a_restart_after_sigkill_takes_the_name_at_once_and_catches_up(workers):
    """The killed worker's row is still fresh when the restart starts, but its process, on
    this host, is gone: the restart takes the name without watching the row (with a
    heartbeat of 60 s the watch would last two minutes) and resumes the run parked under
    it."""
    run = schedule(wf.slow, 1)
    doomed = workers("lazarus", *HOLDER)
    wait_until(
        lambda: Execution.objects.filter(run_id=run.id, step="long").exists(), 60, "the long step"
    )
    doomed.signal(signal.SIGKILL)
    doomed.wait(30)
    Runner.objects.filter(name="lazarus").update(heartbeat=60)  # a slow holder's row
    again = workers("lazarus", "--heartbeat", "60", "--orphan-timeout", "0", *FAST)
    wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 60, "the run")
    log = again.log()
    assert "watching its heartbeat" not in log
    assert f"takes the runner name over from host {socket.gethostname()} pid {doomed.pid}" in log
    assert "resumes 1 run(s) parked under its name" in log
    assert Execution.objects.filter(run_id=run.id, step="first").count() == 1
    assert Runner.objects.get(name="lazarus").pid == again.pid
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def _runner(tmp_path: Path, url: str, *args: str) -> list[str]:
    """The command line of `everystep-runner` with the example project on ``url``."""
    project = ("--project-dir", str(ROOT / "image" / "example_project"))
    settings = ("--settings-module", "mysite.settings", "--database-url", url)
    return [sys.executable, "-m", "everystep_runner", *project, *settings, *args]


@pytest.mark.backends("sqlite")
def test_the_runner_worker_role_refuses_a_live_name_with_exit_1(tmp_path: Path):
    """The image's default `worker` role, under a name a live runner beats under, exits 1
    (not the 2 of a configuration error) with one line naming the holder's pid."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVERYSTEP_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"HOME": str(tmp_path), "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)})
    db = tmp_path / "runner.sqlite3"
    url = f"sqlite:///{db}"
    run = functools.partial(
        subprocess.run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run(_runner(tmp_path, url, "migrate", "-v", "0")).returncode == 0
    named = ("--name", "twin", "--heartbeat", "0.2", "--poll", "0.05")
    log = (tmp_path / "holder.log").open("w")
    holder = subprocess.Popen(
        _runner(tmp_path, url, *named), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:

        def holder_row() -> object:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                query = "SELECT pid FROM everystep_runner WHERE name = 'twin'"
                return conn.execute(query).fetchone()

        assert wait_until(holder_row, 60, "the holder's row") == (holder.pid,)
        second = run(_runner(tmp_path, url, *named))
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1, second.stderr
        assert f"pid {holder.pid}" in lines[-1] and "is in use by a live worker" in lines[-1]
        assert "Traceback" not in second.stderr
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(60)
        log.close()
