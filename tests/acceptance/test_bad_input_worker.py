"""Bad step bodies in a real worker process: BaseExceptions (the worker stays up and
keeps running other runs) and ``os._exit`` (the database stays consistent and a restart
under the same name resumes the run)."""

from __future__ import annotations

import signal

import pytest

from everystep import schedule
from everystep.models import Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import bad_workflows as bad
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.05", "--orphan-timeout", "0")


def final(*runs: Workflow) -> bool:
    return not Workflow.objects.filter(
        id__in=[run.id for run in runs], status__in=["scheduled", "running"]
    ).exists()


def outcome(run: Workflow) -> tuple[str, str | None, str | None]:
    run.refresh_from_db()
    error = run.error or {}
    return run.status, error.get("type"), error.get("message")


def test_base_exceptions_fail_their_runs_and_the_worker_carries_on(workers):
    """SystemExit, KeyboardInterrupt and a custom BaseException raised by steps, and
    SystemExit raised by a body, fail those runs with a message naming the exception;
    the worker process stays up, completes the other runs and drains cleanly."""
    bad_runs = {kind: schedule(bad.raises_base, kind) for kind in bad.BASE_EXCEPTIONS}
    exits = schedule(bad.body_exits)
    good = [schedule(wf.sequential, i, i) for i in range(3)]
    proc = workers("sturdy", "--pool", "2", *FAST)
    wait_until(lambda: final(*bad_runs.values(), exits, *good), 120, "every run to finish")
    for kind, run in bad_runs.items():
        qualified = f"{bad.BASE_EXCEPTIONS[kind].__module__}.{kind}"
        assert outcome(run) == ("failed", "everystep.errors.StepFailure", f"{qualified}: 3")
        recorded = dict(Step.objects.filter(workflow=run).values_list("step_id", "status"))
        assert recorded == {"1": "done", "2": "failed"}
    assert outcome(exits) == ("failed", "builtins.SystemExit", "4")
    assert {outcome(run)[0] for run in good} == {"completed"}

    later = schedule(wf.sequential, 7, 8)
    wait_until(lambda: final(later), 60, "a run scheduled afterwards")
    assert outcome(later)[0] == "completed"
    assert proc.proc.poll() is None, "the worker is still running"
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_os_exit_in_a_step_keeps_the_database_consistent_and_a_restart_resumes(workers, tmp_path):
    """os._exit inside a step kills the worker on the spot: the run stays running under
    its name, the body that did not return has no step row, the earlier step is as it
    was; a restart under the same name resumes and completes the run."""
    marker = tmp_path / "exited"
    run = schedule(bad.exits_once, str(marker))
    proc = workers("exiter", *FAST)
    proc.expect_alive = False
    assert proc.wait(120) == 17, proc.log()
    assert int(marker.read_text()) == proc.pid, "the step body ran in the worker"

    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.result, run.error) == (
        "running",
        "exiter",
        None,
        None,
    )
    first = list(Step.objects.filter(workflow=run).values_list())
    step_ids = Step.objects.filter(workflow=run).values_list("step_id", flat=True)
    assert list(step_ids) == ["1"], "only the step that returned is recorded"

    again = workers("exiter", *FAST)
    wait_until(lambda: final(run), 60, "the resumed run to finish")
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", ["before", "survived", "after"])
    assert list(Step.objects.filter(workflow=run, step_id="1").values_list()) == first
    assert "resumes 1 run(s) parked under its name" in again.log()
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0
