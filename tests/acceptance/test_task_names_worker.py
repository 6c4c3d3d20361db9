"""What a task run's name can make a real worker process import (security issue 50,
items 2 and 6): nothing. Rows naming a Django module, the settings package's wsgi, a
module that registers a workflow or exits on import, or a module ``__getattr__`` fail
once; no marker file shows an import; the worker stays alive, logging, and runs a real
task. A module that exits on import at start-up stops the process with an error naming
it; a task that kills its worker is failed at the recovery limit."""

from __future__ import annotations

import signal
import subprocess
from functools import partial
from pathlib import Path

import pytest

from everystep.models import Status, Workflow
from everystep.store.runs import create_run
from tests.acceptance.conftest import wait_until
from tests.testapp import tasks
from tests.workers import manage, worker_env

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus  # type: ignore[no-redef]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.1")

NAMES = [
    "django.contrib.humanize.templatetags.humanize.intcomma",
    "django.core.management.call_command",
    "tests.testapp.site.wsgi.application",
    "tests.testapp.unloaded_workflows.sneaky",
    "tests.testapp.unloaded_tasks.forgotten",
    "tests.testapp.lazy_attributes.anything",
    "tests.testapp.exits_on_import.job",
]


def test_task_run_names_make_a_worker_import_nothing_and_it_carries_on(workers, tmp_path: Path):
    """Each row fails once with a reason, no module is imported (no marker file), and
    the same worker then runs a real task and logs it."""
    markers = tmp_path / "markers"
    markers.mkdir()
    runs = [create_run(name, [[1], {}], None, queue="default") for name in NAMES]
    proc = workers("names", *FAST, env={"EVERYSTEP_TEST_MARKER_DIR": str(markers)})

    def all_failed() -> bool:
        return all(Workflow.objects.get(id=run.id).status == Status.FAILED for run in runs)

    wait_until(all_failed, 60, "every named run to fail")
    for run in runs:
        row = Workflow.objects.get(id=run.id)
        assert "not a task everystep can run" in row.error["message"], run.name
        assert row.recoveries == 0, "failed once, by the worker that claimed it"
    assert sorted(p.name for p in markers.iterdir()) == [], "no module imported"
    ok = tasks.add.enqueue(4, 5)
    wait_until(lambda: tasks.add.get_result(ok.id).is_finished, 60, "the real task")
    assert tasks.add.get_result(ok.id).status == TaskResultStatus.SUCCESSFUL
    assert proc.proc.poll() is None, "the worker is alive"
    wait_until(lambda: f"run {ok.id}" in proc.log(), 30, "the worker to log the task's run")
    assert "unloaded.sneaky" not in proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_a_module_exiting_on_import_at_start_up_is_a_named_error():
    """SystemExit from a module start-up imports stops the worker with an
    ImproperlyConfigured naming the module, not a silent exit."""
    env = dict(
        worker_env(),
        DJANGO_SETTINGS_MODULE="tests.testapp.site.settings",
        EVERYSTEP_TEST_WORKFLOW_MODULES="tests.testapp.exits_on_import",
    )
    done = manage(env, "everystep_worker", "--name", "exits", timeout=60)
    assert done.returncode == 1
    assert "ImproperlyConfigured" in done.stderr
    assert "importing 'tests.testapp.exits_on_import'" in done.stderr
    assert "EVERYSTEP_WORKFLOW_MODULES" in done.stderr and "SystemExit(3)" in done.stderr


def test_a_task_that_kills_its_worker_is_failed_at_the_recovery_limit(workers):
    """A task body that ends its worker's process is taken back on each restart under
    the same name, then failed once past EVERYSTEP_MAX_RECOVERIES."""
    from tests.testapp import killer_tasks

    result = killer_tasks.kill_worker.enqueue()
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.testapp.site.settings",
        "EVERYSTEP_TEST_WORKFLOW_MODULES": "tests.testapp.killer_tasks",
        "EVERYSTEP_TEST_MAX_RECOVERIES": "2",
    }
    args = (*FAST, "--heartbeat", "0.2", "--orphan-timeout", "1")
    for _ in range(6):
        proc = workers("killed", *args, env=env)
        proc.expect_alive = False  # its task is to die
        wait_until(partial(_died_or_failed, proc.proc, result.id), 60, "a death or the failure")
        if Workflow.objects.get(id=result.id).status == Status.FAILED:
            break
        assert proc.wait(30) == 1, "os._exit(1) in the task body"
    run = Workflow.objects.get(id=result.id)
    assert (run.status, run.recoveries) == (Status.FAILED, 3)
    assert "EVERYSTEP_MAX_RECOVERIES = 2" in run.error["message"]
    assert proc.proc.poll() is None, "the worker that failed it is alive"
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def _died_or_failed(process: subprocess.Popen[bytes], run_id: object) -> bool:
    return process.poll() is not None or (Workflow.objects.get(id=run_id).status == Status.FAILED)
