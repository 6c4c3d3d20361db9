"""``everystep_worker --reload``: a real worker process of a project of its own, whose
code is edited while it runs."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from everystep.models import Runner, Status, Workflow
from tests.code_trees import make_tree, on_code, wait_until, worker
from tests.integration.test_runner_logging import runner, stopped

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = """\
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def first_task(x):
    return x + 1
"""

ADDED = """

@task
def added_task(x):
    return x * 7
"""

ENQUEUE_ADDED = """
from deployapp.tasks import added_task
print(json.dumps([added_task.enqueue(6).id]))
"""


def test_a_task_added_while_the_worker_runs_completes_its_first_run(tmp_path: Path):
    """The worker watches the project's code: a task added to tasks.py and enqueued at
    once by a process on the new code runs on the restarted worker; the parent process
    stays, and SIGTERM to it drains the worker and exits 0."""
    tree = make_tree(tmp_path / "project", new=False)
    tasks = tree / "deployapp" / "tasks.py"
    tasks.write_text(TASKS)
    log = tmp_path / "worker.log"
    with worker(tree, "reloading", log, "--reload") as proc:
        wait_until(lambda: Runner.objects.filter(name="reloading").exists(), "the worker")
        boot = Runner.objects.get(name="reloading").boot_id
        tasks.write_text(TASKS + ADDED)
        [run_id] = on_code(tree, ENQUEUE_ADDED)
        wait_until(
            lambda: Workflow.objects.get(id=run_id).status in {Status.COMPLETED, Status.FAILED},
            "the added task's run",
        )
        run = Workflow.objects.get(id=run_id)
        assert (run.status, run.result) == (Status.COMPLETED, 42), log.read_text()
        assert Runner.objects.get(name="reloading").boot_id != boot  # a new process
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    text = log.read_text()
    assert "tasks.py changed: draining, then restarting" in text, text
    assert "restarting the worker on the changed code" in text


def test_the_runners_worker_role_reloads_too(tmp_path: Path):
    """``EVERYSTEP_RELOAD=true`` on the runner's worker role: an edit of the project's
    settings module restarts the worker (a new process, its probes answering again), and
    SIGTERM to the runner drains it and exits 0."""
    proc, log = runner(tmp_path, "INFO", "--reload", "worker")
    try:
        (tmp_path / "logsite_settings.py").write_text(
            (tmp_path / "logsite_settings.py").read_text() + "\n# edited\n"
        )
        wait_until(lambda: "restarting the worker on the changed code" in log.read_text(), "reload")
        wait_until(lambda: log.read_text().count("starting: pool") >= 2, "the new worker")
        assert proc.poll() is None
    finally:
        lines = stopped(proc, log)
    assert any("logsite_settings.py changed: draining, then restarting" in line for line in lines)
