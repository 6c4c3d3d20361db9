"""A real worker process in the modes a fresh ``startproject`` runs in: ``DEBUG = True``
(Django logs every query), on every database, beside a test process that does not."""

from __future__ import annotations

import signal

import pytest

from everystep import schedule, send
from everystep.models import Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import wait_workflows as ww
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]

DEBUG = {"EVERYSTEP_TEST_DEBUG": "1"}


def statuses(runs: list[Workflow]) -> set[str]:
    return set(
        Workflow.objects.filter(id__in=[run.id for run in runs]).values_list("status", flat=True)
    )


def test_a_debug_worker_runs_steps_sleeps_and_events_then_drains(workers):
    """DEBUG = True: plain runs, a sleep and an event all complete; SIGTERM exits 0."""
    plain = [schedule(wf.three_steps, i) for i in range(20)]
    napper = schedule(ww.napper, 1.0)
    waiting = schedule(ww.approval, 1, None)
    proc = workers("debug-0", "--pool", "4", "--poll", "0.1", env=DEBUG)
    wait_until(lambda: statuses(plain) == {"completed"}, 120, "the plain runs")
    wait_until(
        lambda: Step.objects.filter(workflow=waiting, status="started").exists(),
        60,
        "the run to wait for its event",
    )
    send(waiting.id, "approval", {"by": "ops"})
    wait_until(lambda: statuses([napper, waiting]) == {"completed"}, 120, "the waits to end")
    assert Step.objects.filter(workflow__in=plain).count() == 60
    proc.signal(signal.SIGTERM)
    assert proc.wait(90) == 0
    assert "Traceback" not in proc.log()
