"""``async def`` workflows in real worker processes (issue 36): a worker SIGKILLed in
the middle of an async run resumes it after a restart without running its recorded
step again; a hundred I/O-bound async runs in one ``--pool 100`` worker overlap on its
event loop instead of taking a thread each; SIGTERM drains async runs at a step
boundary and requeues them."""

from __future__ import annotations

import signal

import pytest

from everystep import schedule
from everystep.models import Status, Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import async_workflows as aw
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]

FAST = ("--poll", "0.1")


def statuses(*runs: Workflow) -> list[str]:
    return list(
        Workflow.objects.filter(id__in=[run.id for run in runs]).values_list("status", flat=True)
    )


def test_a_worker_killed_mid_run_resumes_without_running_the_first_step_again(workers):
    """SIGKILL while the second step awaits its I/O; the restart runs it again, and the
    first step's body ran once."""
    run = schedule(aw.awaited_steps_slow, 3, 30.0)
    first = workers("async-killed", *FAST)
    wait_until(
        lambda: Execution.objects.filter(run_id=run.id, step="fetch-31").exists(),
        60,
        "the second step to start",
    )
    first.signal(signal.SIGKILL)
    first.wait(30)
    assert Step.objects.filter(workflow=run, step_id="1", status="done").exists()
    aw.release_slow_io(run.id)
    again = workers("async-killed", *FAST)
    wait_until(lambda: statuses(run) == [Status.COMPLETED], 60, "the run to complete")
    run.refresh_from_db()
    assert run.result == 3110
    assert Execution.objects.filter(run_id=run.id, step="fetch-3").count() == 1
    assert Execution.objects.filter(run_id=run.id, step="fetch-31").count() == 2
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def test_a_hundred_io_bound_async_runs_overlap_in_one_worker(workers):
    """100 runs each awaiting 2 s of I/O in a ``--pool 100`` worker: all of them are in
    their step at once (the worker's threads stay few), and all complete."""
    runs = [schedule(aw.slow_io, 2.0) for _ in range(100)]
    proc = workers("async-pool", "--pool", "100", *FAST)
    wait_until(
        lambda: Execution.objects.filter(run_id__in=[r.id for r in runs]).count() == 100,
        60,
        "every run to be in its step",
    )
    # Every step has started and none has finished: they overlap.
    in_flight = Workflow.objects.filter(id__in=[r.id for r in runs], status="running").count()
    done_steps = Step.objects.filter(workflow__in=runs).count()
    assert (in_flight, done_steps) == (100, 0)
    threads = proc.thread_count()
    assert threads < 40, f"{threads} threads for 100 async runs in flight"
    wait_until(lambda: statuses(*runs) == [Status.COMPLETED] * 100, 60, "every run to complete")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_sigterm_drains_async_runs_at_a_step_boundary(workers):
    """SIGTERM while async runs await a step: each finishes the step it is in, starts no
    other, and goes back to scheduled; a second worker completes them."""
    runs = [schedule(aw.awaited_steps_slow, n, 2.0) for n in (1, 2)]
    first = workers("async-drain", "--drain", "30", *FAST)
    wait_until(
        lambda: Execution.objects.filter(run_id__in=[r.id for r in runs]).count() == 4,
        60,
        "both runs to be in their second step",
    )
    first.signal(signal.SIGTERM)
    wait_until(lambda: "draining" in first.log(), 30, "the worker to start draining")
    for run in runs:
        aw.release_slow_io(run.id)
    assert first.wait(60) == 0
    assert sorted(statuses(*runs)) == [Status.SCHEDULED, Status.SCHEDULED]
    # The second step finished and was recorded; the third was not started.
    assert Step.objects.filter(workflow__in=runs, status="done").count() == 4
    again = workers("async-drain-2", *FAST)
    wait_until(lambda: statuses(*runs) == [Status.COMPLETED] * 2, 60, "the runs to complete")
    assert Execution.objects.filter(run_id__in=[r.id for r in runs]).count() == 6
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0
