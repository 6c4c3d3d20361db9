"""Workflows no worker would import (issue 33): outside the test environment, scheduling
one (defined outside every installed app's ``workflows`` module) is refused at once,
naming the module and the fixes, instead of a run a worker fails later with "unknown
workflow"; listed in ``EVERYSTEP_WORKFLOW_MODULES``, the same workflow is scheduled and a
real worker completes it. The schedules run in ``manage.py shell`` subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from everystep.models import Workflow
from tests import workers
from tests.acceptance.conftest import wait_until
from tests.workers import worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FLOWS = """\
from everystep import workflow


@workflow
def doubled(n: int) -> int:
    return 2 * n
"""
LISTED = """\
from tests.settings import *  # noqa: F403

EVERYSTEP_WORKFLOW_MODULES = ["late_flows"]
"""
MISSING = """\
from tests.settings import *  # noqa: F403

EVERYSTEP_WORKFLOW_MODULES = ["late_flows", "no_such_flows"]
"""
SCHEDULE = (
    "from everystep import schedule; from late_flows import doubled; "
    "print(schedule(doubled, 21).id)"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory on the subprocesses' path: a module of workflows that no installed
    app imports, and settings modules that list it (or a module that does not exist)."""
    (tmp_path / "late_flows.py").write_text(FLOWS)
    (tmp_path / "listed_settings.py").write_text(LISTED)
    (tmp_path / "missing_settings.py").write_text(MISSING)
    return tmp_path


def manage(project: Path, settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS…`` with ``project`` on the path and ``settings`` as the settings."""
    env = {**worker_env(str(project)), "DJANGO_SETTINGS_MODULE": settings}
    return workers.manage(env, *args)


def test_scheduling_a_workflow_no_worker_imports_is_refused_naming_the_fixes(project: Path):
    """Outside tests, schedule() of a workflow of a module that workers do not import
    exits with an EverystepError naming the workflow, the module and both fixes; no run
    is written."""
    done = manage(project, "tests.settings", "shell", "--no-imports", "-c", SCHEDULE)
    assert done.returncode != 0, done.stdout
    assert (
        "everystep.errors.EverystepError: cannot schedule workflow late_flows.doubled: it is "
        "defined in module 'late_flows', which workers do not import, so a worker would fail "
        'the run with "unknown workflow". Define it in an installed app\'s workflows.py (or '
        "import it from there), or add 'late_flows' to the setting EVERYSTEP_WORKFLOW_MODULES"
    ) in done.stderr
    assert not Workflow.objects.filter(name="late_flows.doubled").exists()


def test_a_workflow_module_listed_in_the_setting_is_scheduled_and_a_worker_runs_it(
    project: Path, workers: Any
):
    """With its module in EVERYSTEP_WORKFLOW_MODULES, the workflow is scheduled from a
    shell and a real worker started with the same settings completes the run."""
    done = manage(project, "listed_settings", "shell", "--no-imports", "-c", SCHEDULE)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    assert Workflow.objects.get(id=run_id).status == "scheduled"
    worker = workers(
        "first-day",
        "--poll",
        "0.05",
        extra_path=str(project),
        env={"DJANGO_SETTINGS_MODULE": "listed_settings"},
    )

    def finished() -> bool:
        return Workflow.objects.get(id=run_id).status not in ("scheduled", "running")

    wait_until(finished, 60, "the run's outcome")
    run = Workflow.objects.get(id=run_id)
    assert (run.name, run.status, run.result) == ("late_flows.doubled", "completed", 42)
    worker.signal(15)
    assert worker.wait(60) == 0


def test_a_listed_module_that_cannot_be_imported_stops_django_naming_the_setting(
    project: Path,
):
    """A module in EVERYSTEP_WORKFLOW_MODULES that cannot be imported fails Django's start
    with the import error itself, noted with the setting that names it."""
    done = manage(project, "missing_settings", "check")
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'no_such_flows'" in done.stderr
    assert "(importing 'no_such_flows', named in EVERYSTEP_WORKFLOW_MODULES)" in done.stderr
