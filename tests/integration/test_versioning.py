"""``patched()`` across a deploy, and ``@step(atomic=True)``: exactly-once database steps.

A deploy is simulated in-process with ``everystep.testing.deployed``; a crash with
``crash_at``. ``tests/acceptance/test_versioning_worker.py`` does the same with real
worker processes running the old and the new code.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from everystep import schedule, send, step
from everystep.engine.execute import run_pass
from everystep.errors import EverystepError
from everystep.models import Step, Workflow
from everystep.store.claims import claim_due
from everystep.testing import crash_at, deployed, run_due
from tests.testapp import versioned as v
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def executed(run: Workflow, label: str) -> int:
    return Execution.objects.filter(run_id=run.id, step=label).count()


@contextlib.contextmanager
def old_and_new(
    workflow: Callable[..., Any], new_body: Callable[..., Any]
) -> Iterator[tuple[Workflow, Workflow]]:
    """A run started under the code registered now (parked at its wait), then, with
    ``new_body`` deployed for the block, a run started under it; both are sent "go"."""
    old = schedule(workflow, 1)
    run_due()
    with deployed(workflow, new_body):
        new = schedule(workflow, 2)
        run_due()
        send(old.id, "go")
        send(new.id, "go")
        yield old, new


def steps_of(run: Workflow) -> dict[str, tuple[str, object]]:
    rows = Step.objects.filter(workflow_id=run.id).values_list("step_id", "name", "result")
    return {step_id: (name.rsplit(".", 1)[-1], result) for step_id, name, result in rows}


# -- patched() --------------------------------------------------------------------------


def test_an_old_run_keeps_the_old_branch_and_a_new_run_takes_the_new_one():
    old = schedule(v.order, 1)
    run_due()  # version 1: charged, waiting for "go"
    with deployed(v.order, v.order_patched):
        new = schedule(v.order, 2)
        run_due()  # version 2: the new run charges with tax, then waits
        assert steps_of(new)["patched tax"] == ("patched", True)
        send(old.id, "go")
        send(new.id, "go")
        run_due()
    assert fresh(old).status == fresh(new).status == "completed"
    assert fresh(old).result == ["reserved 1", "charged 1", "shipped 1"]
    assert fresh(new).result == ["reserved 2", "charged 2 with tax", "shipped 2"]
    assert steps_of(old)["patched tax"] == ("patched", False)
    assert (executed(old, "charge"), executed(old, "charge_with_tax")) == (1, 0)
    assert (executed(new, "charge"), executed(new, "charge_with_tax")) == (0, 1)
    # Ids after the patch are the old code's: the patch consumed no position.
    assert set(steps_of(old)) == {"1", "2", "3", "4", "patched tax"}


def test_without_the_patch_the_old_run_fails_with_the_step_and_both_functions():
    old = schedule(v.order, 1)
    run_due()
    with deployed(v.order, v.order_taxed):
        send(old.id, "go")
        run_due()
    failed = fresh(old)
    assert failed.status == "failed"
    assert failed.error["type"] == "everystep.errors.WorkflowCodeError"
    message = failed.error["message"]
    assert "step 2 was recorded as tests.testapp.versioned.charge" in message
    assert "now calls tests.testapp.versioned.charge_with_tax" in message


def test_a_run_stopped_before_the_patch_point_takes_the_new_branch():
    """Nothing recorded past the patch: the run has not passed it under the old code."""
    run = schedule(v.order, 3)
    with crash_at("after_record", v.reserve):  # the worker dies right after step 1
        run_due()
    with deployed(v.order, v.order_patched):
        run_due()
        send(run.id, "go")
        run_due()
    assert fresh(run).result == ["reserved 3", "charged 3 with tax", "shipped 3"]
    assert steps_of(run)["patched tax"] == ("patched", True)


@pytest.mark.parametrize("point", ["after_record", "before_finish", "after_body"])
def test_both_branches_survive_a_crash_and_replay(point):
    with old_and_new(v.order, v.order_patched) as (old, new):
        target = None if point == "before_finish" else v.ship
        with crash_at(point, target, times=2) as crash:
            run_due()
        assert len(crash.fired) == 2
        assert fresh(old).status == fresh(new).status == "running"
        run_due()  # the restarted "process" resumes both
    assert fresh(old).result == ["reserved 1", "charged 1", "shipped 1"]
    assert fresh(new).result == ["reserved 2", "charged 2 with tax", "shipped 2"]
    # The decisions were replayed, not taken again.
    assert steps_of(old)["patched tax"] == ("patched", False)
    assert steps_of(new)["patched tax"] == ("patched", True)
    assert executed(old, "charge") == executed(new, "charge_with_tax") == 1


def test_a_patch_in_a_fork_branch_is_decided_in_that_branch():
    with old_and_new(v.fanout, v.fanout_patched) as (old, new):
        run_due()
    assert fresh(old).result == ["reserved 1", "charged 1", "shipped 1"]
    assert fresh(new).result == ["reserved 2", "charged 2 with tax", "shipped 2"]
    assert steps_of(old)["1.1.patched tax"] == ("patched", False)
    assert steps_of(new)["1.1.patched tax"] == ("patched", True)


def test_deprecate_patch_replays_new_branch_runs_and_fails_old_branch_ones():
    old = schedule(v.order, 1)
    run_due()
    with deployed(v.order, v.order_patched):
        new = schedule(v.order, 2)
        run_due()
    with deployed(v.order, v.order_deprecated):
        newest = schedule(v.order, 3)
        run_due()
        for run in (old, new, newest):
            send(run.id, "go")
        run_due()
    assert fresh(new).result == ["reserved 2", "charged 2 with tax", "shipped 2"]
    assert fresh(newest).result == ["reserved 3", "charged 3 with tax", "shipped 3"]
    failed = fresh(old)
    assert failed.status == "failed"
    assert "took the old branch of patch 'tax'" in failed.error["message"]
    assert executed(old, "ship") == 0


def test_a_removed_patch_leaves_no_mark_on_a_later_patch():
    """A decision recorded by a patch call since deleted is not history past a new
    patch: a run parked before the new patch's point takes its new branch."""
    with deployed(v.order, v.order_deprecated):
        parked = schedule(v.order, 4)
        run_due()  # "patched tax" = True, reserve, charge with tax; waiting for "go"
    with deployed(v.order, v.order_express):
        send(parked.id, "go")
        run_due()
    assert fresh(parked).result == ["reserved 4", "charged 4 with tax", "shipped 4 express"]
    assert steps_of(parked)["patched tax"] == ("patched", True)
    assert steps_of(parked)["patched express"] == ("patched", True)
    assert (executed(parked, "ship"), executed(parked, "ship_express")) == (0, 1)


def test_patched_outside_a_run_is_true_and_change_ids_are_checked():
    from everystep import patched

    assert patched("anything") is True
    for bad in ["", "a.b", "a b", "123", "x\x00"]:
        with pytest.raises(EverystepError, match="patch change id"):
            patched(bad)


# -- @step(atomic=True) ------------------------------------------------------------------


@pytest.mark.parametrize("point", ["after_body", "after_record"])
def test_a_crash_before_commit_leaves_neither_the_write_nor_the_record(point):
    run = schedule(v.booking, 7)
    with crash_at(point, v.book) as crash:
        run_due()
    assert crash.fired == ["2"]
    assert fresh(run).status == "running"
    assert executed(run, "book") == 0, "the body's write was rolled back"
    assert "2" not in steps_of(run), "and so was its record"
    run_due()
    assert fresh(run).result == ["reserved 7", "booked 7", "shipped 7"]
    assert executed(run, "book") == 1, "the write exists exactly once"
    assert v.CALLS["book"] >= 2, "the body did run twice: only its writes are exactly once"


def test_a_failing_atomic_step_keeps_none_of_its_writes_and_records_its_failure():
    run = schedule(v.booking, 8, True)
    run_due()
    assert fresh(run).result == ["reserved 8", "not booked: cannot book 8", "shipped 8"]
    assert executed(run, "book") == 0
    assert Step.objects.get(workflow_id=run.id, step_id="2").status == "failed"


def test_an_atomic_step_of_a_stale_claim_does_not_run():
    run = schedule(v.booking, 9)
    (claim,) = claim_due("stale-worker", 1)
    with crash_at("after_record", v.reserve):
        assert run_pass(claim).status == "abandoned"
    # The worker is presumed dead and the run taken back: a new claim token.
    Workflow.objects.filter(id=run.id).requeue()
    calls = v.CALLS["book"]
    # The old worker wakes up and goes on with its pass: step 1 is served from the
    # record, step 2 is the atomic one.
    stale = run_pass(dataclasses.replace(claim, fresh=False))
    assert stale.status == "abandoned"
    assert v.CALLS["book"] == calls, "the atomic body did not run under a stale claim"
    assert executed(run, "book") == 0
    run_due()
    assert fresh(run).status == "completed"
    assert executed(run, "book") == 1


def test_atomic_and_unsafe_to_repeat_cannot_be_combined():
    with pytest.raises(EverystepError, match="cannot be combined with unsafe_to_repeat"):

        @step(atomic=True, unsafe_to_repeat=True)
        def both() -> None: ...


@pytest.mark.django_db(transaction=True, databases=["default", "aside"])
def test_an_atomic_step_touching_another_database_fails_the_run_with_a_clear_error():
    run = schedule(v.elsewhere, 1)
    run_due()
    failed = fresh(run)
    assert failed.status == "failed", failed.result
    assert (
        "atomic step 1 (tests.testapp.versioned.book_elsewhere) used another database"
        in (failed.error["message"])
    )
    assert "1" not in steps_of(run), "nothing was recorded for the refused step"
