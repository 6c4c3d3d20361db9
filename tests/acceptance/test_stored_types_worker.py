"""Rows naming classes of modules nobody imported, run by a real worker process: an
enum of a module with an import side effect and of ``unittest.__main__`` in a run's args,
an error type of that module in a recorded failed step. The module is never imported
(its marker file never appears), each run ends clearly, and the worker stays up and
completes a normal run afterwards."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from django.utils import timezone

import everystep
from everystep import schedule
from everystep.models import Step, Workflow
from everystep.serde import qualified_name
from tests.acceptance.conftest import wait_until
from tests.testapp import typed_workflows as typed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.05", "--orphan-timeout", "0")
MARKER_MODULE = "tests.testapp.import_marker"
SETTINGS = """\
from tests.settings import *  # noqa: F403

EVERYSTEP_WORKFLOW_MODULES = ["tests.testapp.typed_workflows"]
"""


def final(*runs: Workflow) -> bool:
    return not Workflow.objects.filter(
        id__in=[run.id for run in runs], status__in=["scheduled", "running"]
    ).exists()


TAGS = {
    "side-effect": {"__es__": "enum", "cls": f"{MARKER_MODULE}.Tint", "name": "RED"},
    "main": {"__es__": "enum", "cls": "unittest.__main__.Tint", "name": "RED"},
}


def planted_runs() -> dict[str, Workflow]:
    """Runs whose rows name classes of modules no process may import for them."""
    runs = {}
    for name, tag in TAGS.items():
        runs[name] = schedule(typed.echo_value, 0)
        Workflow.objects.filter(pk=runs[name].pk).update(args=[tag])
    runs["error"] = schedule(typed.charges, "declined")
    Step.objects.create(
        workflow=runs["error"],
        step_id="1",
        name=qualified_name(typed.charge),
        args=["declined"],
        kwargs={},
        status="failed",
        error={"type": f"{MARKER_MODULE}.Planted", "message": "planted", "args": ["planted"]},
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    return runs


def test_rows_naming_unimported_modules_import_nothing_in_a_worker(workers, tmp_path: Path):
    """A worker runs the planted runs without importing the named modules: the enum
    runs complete with the stored tags, the error run fails with a StepFailure naming
    the type; the worker is still up and completes a normal run afterwards."""
    marker = tmp_path / "imported"
    (tmp_path / "typed_settings.py").write_text(SETTINGS)
    runs = planted_runs()
    proc = workers(
        "typed",
        *FAST,
        extra_path=str(tmp_path),
        env={
            "DJANGO_SETTINGS_MODULE": "typed_settings",
            "EVERYSTEP_TEST_IMPORT_MARKER": str(marker),
        },
    )
    wait_until(lambda: final(*runs.values()), 120, "the planted runs to end")
    for name, tag in TAGS.items():
        runs[name].refresh_from_db()
        assert runs[name].status == "completed", proc.log()
        assert everystep.result(runs[name]) == tag
    error_run = runs["error"]
    error_run.refresh_from_db()
    assert error_run.status == "failed"
    assert error_run.error["type"] == "everystep.errors.StepFailure"
    assert error_run.error["message"] == f"{MARKER_MODULE}.Planted: planted"

    later = schedule(typed.charges, "declined")
    wait_until(lambda: final(later), 60, "a normal run scheduled afterwards")
    later.refresh_from_db()
    assert (later.status, later.result) == ("completed", "caught CardDeclined")
    assert not marker.exists(), "the worker imported the module a row named"
    assert "Ran 0 tests" not in proc.log(), "the worker started a nested unittest runner"
    assert proc.log().count(f"'{MARKER_MODULE}.Tint'") == 1, "one warning for the name"
    assert proc.proc.poll() is None, "the worker is still running"
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
