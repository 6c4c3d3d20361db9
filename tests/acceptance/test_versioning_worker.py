"""A deploy with a patched change between real worker processes: the pre-deploy check
against the live database, the old run finishing on the old branch, a new run on the new
one, and both surviving a SIGKILL mid-step."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from everystep import schedule, send
from everystep.models import Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import versioned as v
from tests.testapp.models import Execution
from tests.workers import ROOT, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.1")


def row(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def waiting(run: Workflow) -> bool:
    return row(run).waiting_for == "go"


def executed(run: Workflow, label: str) -> int:
    return Execution.objects.filter(run_id=run.id, step=label).count()


def check_replay(deploy: str) -> subprocess.CompletedProcess[str]:
    """``manage.py everystep_check_replay`` in a process running the ``deploy`` version."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "everystep_check_replay"],
        cwd=ROOT,
        env={**worker_env(), "EVERYSTEP_TEST_DEPLOY": deploy},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_patched_deploy_between_worker_processes(workers):
    old = schedule(v.order, 1)
    first = workers("v1", *FAST)
    wait_until(lambda: waiting(old), 60, "the old run to wait")
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0

    slow = {"EVERYSTEP_TEST_DEPLOY": "order_patched", "EVERYSTEP_TEST_SLOW_SHIP": "60"}
    second = workers("v2", *FAST, env=slow)
    new = schedule(v.order, 2)
    wait_until(lambda: waiting(new), 60, "the new run to wait")

    # The pre-deploy check, beside the live worker: the unpatched change fails, naming
    # the step and both functions; the patched one passes. Neither writes anything.
    before = sorted(Step.objects.values_list("workflow_id", "step_id", "status"), key=str)
    taxed = check_replay("order_taxed")
    assert taxed.returncode == 1, taxed.stdout + taxed.stderr
    assert (
        f"run {old.id} (scheduled): step 2: recorded tests.testapp.versioned.charge, "
        "the code now calls tests.testapp.versioned.charge_with_tax"
    ) in taxed.stdout
    assert str(new.id) not in taxed.stdout.replace(f"run {old.id}", "")
    patched = check_replay("order_patched")
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert "patch 'tax': 1 runs take the old branch, 1 the new" in patched.stdout
    assert sorted(Step.objects.values_list("workflow_id", "step_id", "status"), key=str) == before

    # Both runs go on; the worker is killed while both are inside their last step.
    send(old.id, "go")
    send(new.id, "go")
    wait_until(lambda: executed(old, "ship") == executed(new, "ship") == 1, 60, "both runs to ship")
    second.signal(signal.SIGKILL)
    second.wait(30)
    assert row(old).status == row(new).status == "running"

    third = workers("v2", *FAST, env={"EVERYSTEP_TEST_DEPLOY": "order_patched"})
    wait_until(
        lambda: row(old).status == row(new).status == "completed", 90, "both runs to complete"
    )
    assert row(old).result == ["reserved 1", "charged 1", "shipped 1"]
    assert row(new).result == ["reserved 2", "charged 2 with tax", "shipped 2"]
    assert (executed(old, "charge"), executed(old, "charge_with_tax")) == (1, 0)
    assert (executed(new, "charge"), executed(new, "charge_with_tax")) == (0, 1)
    assert executed(old, "ship") == executed(new, "ship") == 2, "killed once inside ship"
    decisions = dict(
        Step.objects.filter(step_id="patched tax").values_list("workflow_id", "result")
    )
    assert decisions == {old.id: False, new.id: True}
    third.signal(signal.SIGTERM)
    assert third.wait(60) == 0
