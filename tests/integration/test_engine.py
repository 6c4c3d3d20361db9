"""The engine end to end in-process, on the database chosen by EVERYSTEP_TEST_DB."""

from __future__ import annotations

import pytest

from everystep import schedule
from everystep.models import Step, Workflow
from everystep.testing import crash_after, run_due
from tests.testapp import workflows as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("several")]


def steps_of(run: Workflow) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(workflow=run)}


def finished(run: Workflow) -> Workflow:
    run_due()
    run.refresh_from_db()
    return run


def test_sequential_workflow_records_positional_steps():
    """Three sequential steps get ids 1, 2, 3; outcomes are visible from body and step."""
    run = finished(schedule(wf.sequential, 2, 3))
    assert run.status == "completed"
    assert run.result == {
        "total": 5,
        "doubled": 10,
        "pair": [10, 10],
        "seen": ["1", "2", "3"],
        "peek": 10,
    }
    recorded = steps_of(run)
    assert sorted(recorded) == ["1", "2", "3", "4"]
    assert recorded["1"].name == "tests.testapp.workflows.add"
    assert recorded["1"].args == [2, 3] and recorded["1"].result == 5
    assert all(s.status == "done" and s.finished_at >= s.started_at for s in recorded.values())
    assert run.started_at is not None and run.completed_at is not None
    assert run.claimed_by == "everystep-testing" and run.claim_token is None


def test_named_steps_keep_their_position():
    """A named step uses its name as id but still consumes its position."""
    run = finished(schedule(wf.named))
    assert run.name == "named-flow"
    assert run.result == ["a", "b", "c"]
    assert sorted(steps_of(run)) == ["2", "first", "third"]


def test_parallel_branches_and_sequence_branch():
    """A fork consumes one position; branches are scopes <fork>.<index>."""
    run = finished(schedule(wf.forked))
    assert run.status == "completed"
    assert run.result == ["head", "left", "right", ["s1", "s2"], "tail"]
    assert sorted(steps_of(run)) == ["1", "3", "fan.0.1", "fan.1.right", "fan.2.1", "fan.2.2"]


def test_nested_forks():
    """Nested forks get nested scopes; results keep branch order."""
    run = finished(schedule(wf.nested))
    assert run.result == [["n00", "n01"], ["n10", ["n110", "n111"]]]
    assert sorted(steps_of(run)) == ["1.0.1.0.1", "1.0.1.1.1", "1.1.1", "1.1.2.0.1", "1.1.2.1.1"]


def test_replay_serves_recorded_steps_after_crash():
    """A crash between effect and record re-executes that step only."""
    run = schedule(wf.sequential, 1, 1)
    with crash_after(wf.double):
        run_due()
    run.refresh_from_db()
    assert run.status == "running"
    assert sorted(steps_of(run)) == ["1"]
    assert wf.CALLS["add"] == 1 and wf.CALLS["double"] == 1
    run = finished(run)
    assert run.status == "completed"
    assert run.result["doubled"] == 4
    assert wf.CALLS["add"] == 1, "the recorded step must be served, not re-run"
    assert wf.CALLS["double"] == 2, "the crashed step runs again"
    assert wf.CALLS["pair"] == 1


def test_outcomes_on_replay_include_served_steps():
    """After a resume, outcomes still list the steps served from the database."""
    run = schedule(wf.sequential, 3, 4)
    with crash_after(wf.pair):
        run_due()
    run = finished(run)
    assert run.result["seen"] == ["1", "2", "3"]
    assert run.result["peek"] == 14


def test_parallel_crash_resumes_only_the_crashed_branch():
    """A crash inside one branch re-runs only that branch's unrecorded step."""
    run = schedule(wf.forked)
    with crash_after("fan.2.2"):
        run_due()
    run = finished(run)
    assert run.status == "completed"
    assert wf.CALLS["echo:s1"] == 1 and wf.CALLS["echo:left"] == 1
    assert wf.CALLS["echo:s2"] == 2


def test_failed_step_is_reraised_on_replay_and_cleanup_is_durable():
    """A caught failure runs its cleanup step; on replay neither body runs again."""
    run = schedule(wf.cleanup_on_failure, "card declined")
    with crash_after(wf.cleanup):
        run_due()
    assert steps_of(run)["1"].status == "failed"
    assert steps_of(run)["1"].error["type"] == "builtins.ValueError"
    run = finished(run)
    assert run.status == "completed"
    assert run.result == "cleaned: card declined"
    assert wf.CALLS["explode"] == 1
    assert wf.CALLS["cleanup"] == 2


def test_uncaught_step_failure_fails_the_run():
    """An exception escaping the body fails the run with the encoded error."""
    run = finished(schedule(wf.failing))
    assert run.status == "failed"
    assert run.error["type"] == "builtins.ValueError"
    assert run.error["message"] == "boom"
    assert run.completed_at is not None


def test_changed_code_fails_with_workflow_code_error():
    """A different function at a recorded id fails the run, naming both and the ids."""
    run = schedule(wf.evolving)
    with crash_after("3"):
        run_due()
    assert sorted(steps_of(run)) == ["1", "2"]
    wf.EVOLVED["on"] = True
    run = finished(run)
    assert run.status == "failed"
    assert run.error["type"] == "everystep.errors.WorkflowCodeError"
    message = run.error["message"]
    assert "tests.testapp.workflows.add" in message
    assert "tests.testapp.workflows.double" in message
    assert "step 2" in message and str(run.id) in message
    assert wf.CALLS["double"] == 0 and wf.CALLS["echo:three"] == 1


@pytest.mark.parametrize(
    "flow, args, reason, payload",
    [
        (wf.stop_from_step, (), "customer gone", {"customer": 42}),
        (wf.stop_from_body, (7,), "over the limit", {"limit": 7}),
    ],
)
def test_terminal_stops_the_run(flow, args, reason, payload):
    """Terminal from a step or the body ends the run stopped with reason and payload."""
    run = finished(schedule(flow, *args))
    assert run.status == "stopped"
    assert run.error["type"] == "everystep.errors.Terminal"
    assert run.error["reason"] == reason
    assert run.error["payload"] == payload
    assert "echo:never" not in wf.CALLS


def test_unsafe_step_crash_blocks_the_run():
    """An unsafe step that started without an outcome blocks the run on replay."""
    run = schedule(wf.payment, 100)
    with crash_after(wf.charge):
        run_due()
    assert steps_of(run)["2"].status == "started"
    run = finished(run)
    assert run.status == "blocked"
    assert run.error["type"] == "everystep.errors.EffectUncertain"
    assert run.error["step_id"] == "2"
    assert wf.CALLS["charge"] == 1, "an uncertain step is never re-run by the engine"


def test_unsafe_step_records_started_then_done():
    """Without a crash, an unsafe step's row goes from started to done."""
    run = finished(schedule(wf.payment, 5))
    assert run.status == "completed"
    assert run.result == {"charged": 5}
    assert steps_of(run)["2"].status == "done"


def test_tuple_result_is_a_list_on_live_pass_and_replay():
    """The live pass returns what a replay would: a tuple result becomes a list."""
    run = finished(schedule(wf.returns_tuple))
    assert run.result == {"value": ["x", "x"], "is_list": True}
    Workflow.objects.filter(id=run.id).update(status="scheduled")
    run = finished(run)
    assert run.result == {"value": ["x", "x"], "is_list": True}
    assert wf.CALLS["pair"] == 1


def test_workflow_id_from_context():
    """context.current().workflow_id is the run's id, in the body and in a step."""
    run = finished(schedule(wf.workflow_id_probe))
    assert run.result == [str(run.id), str(run.id)]


@pytest.mark.parametrize("name", ["has.dot", "has space", "tab\there", "123", "", "x" * 301])
def test_bad_step_ids_fail_before_the_step_runs(name):
    """Invalid everystep_id values raise EverystepError before the step body runs."""
    run = finished(schedule(wf.bad_step_id, name))
    assert run.status == "failed"
    assert run.error["type"] == "everystep.errors.EverystepError"
    assert wf.CALLS["echo:ok"] == 0
    assert not steps_of(run)


def test_duplicate_step_id_in_scope_fails():
    """A name used twice in one scope fails before the second step runs."""
    run = finished(schedule(wf.duplicate_step_id))
    assert run.status == "failed"
    assert "used twice" in run.error["message"]
    assert wf.CALLS["echo:x"] == 1 and wf.CALLS["echo:y"] == 0


def test_unknown_workflow_fails_once():
    """A run whose name is not registered is failed with a clear reason."""
    run = Workflow.objects.create(name="no.such.workflow", args=[])
    run = finished(run)
    assert run.status == "failed"
    assert "unknown workflow 'no.such.workflow'" in run.error["message"]


def test_unrebuildable_step_error_is_the_same_on_live_pass_and_replay():
    """A step error that cannot be rebuilt reaches the body as StepFailure on both paths."""
    live = finished(schedule(wf.catches_picky))
    assert live.result == "StepFailure"
    resumed = schedule(wf.catches_picky)
    with crash_after("2"):
        run_due()
    resumed = finished(resumed)
    assert resumed.result == "StepFailure"
    assert wf.CALLS["picky"] == 2, "once per run: the replay re-raised the record"


def test_run_due_fails_a_body_that_calls_exit_as_a_worker_does():
    """A body's ``SystemExit`` does not escape run_due() into the test, nor leave the run
    ``running``: the run fails with it, its step kept."""
    run = schedule(wf.exits_after_a_step, 2)
    [passed] = run_due()
    assert passed.id == run.id and passed.status == "failed"
    assert passed.error["type"] == "builtins.SystemExit"
    assert Step.objects.filter(workflow=run).count() == 1
