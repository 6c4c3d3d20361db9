"""Rows naming classes this process does not allow, on the database chosen by
EVERYSTEP_TEST_DB: a run's args, a step's recorded result or error, an event's payload,
a run's result or error and a published value naming an enum or exception class of a
module nobody imported. Nothing is imported; an enum comes back as its stored form and
an error as a ``StepFailure`` naming the type, and the run's outcome says which."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

import everystep
from everystep import schedule, send
from everystep.errors import StepFailure
from everystep.models import Event, Published, Step, Workflow
from everystep.serde import qualified_name
from everystep.testing import run_due
from tests.testapp import typed_workflows as typed

pytestmark = pytest.mark.django_db(transaction=True)

MARKER_MODULE = "tests.testapp.import_marker"
TINT = {"__es__": "enum", "cls": f"{MARKER_MODULE}.Tint", "name": "RED"}
MAIN_TINT = {"__es__": "enum", "cls": "unittest.__main__.Tint", "name": "RED"}
PLANTED = {"type": f"{MARKER_MODULE}.Planted", "message": "planted", "args": ["planted"]}


@pytest.fixture(autouse=True)
def not_imported() -> Iterator[None]:
    """The side-effect module and ``unittest.__main__`` are not imported before the test,
    and the test fails if either is imported by the time it ends."""
    assert MARKER_MODULE not in sys.modules
    had_main = "unittest.__main__" in sys.modules
    yield
    assert MARKER_MODULE not in sys.modules, "a stored row imported a module"
    assert ("unittest.__main__" in sys.modules) == had_main


def plant_step(run: Workflow, name: Any, **outcome: Any) -> None:
    """A recorded outcome at step ``1`` of ``run``, as a row another process wrote."""
    Step.objects.create(
        workflow=run,
        step_id="1",
        name=qualified_name(name),
        args=["planted"],
        kwargs={},
        started_at=timezone.now(),
        finished_at=timezone.now(),
        **outcome,
    )


def ended(run: Workflow) -> Workflow:
    run_due()
    run.refresh_from_db()
    return run


@pytest.mark.parametrize("tag", [TINT, MAIN_TINT], ids=["side-effect-module", "main"])
def test_an_unknown_enum_in_a_runs_args_completes_with_its_stored_form(tag: Any) -> None:
    """A run whose stored args name an unknown enum runs, its body and step get the
    stored tag as a dict, and the run completes with it."""
    run = schedule(typed.echo_value, "placeholder")
    Workflow.objects.filter(pk=run.pk).update(args=[tag])
    assert ended(run).status == "completed"
    assert everystep.result(run) == tag


def test_a_known_enum_in_a_runs_args_is_the_member() -> None:
    """Control: a member of a class the code declares comes back as the member."""
    run = schedule(typed.echo_value, typed.Size.SMALL)
    assert ended(run).status == "completed"
    assert everystep.result(run) is typed.Size.SMALL


def test_an_unknown_enum_as_a_recorded_step_result_is_served_in_its_stored_form() -> None:
    """A step's recorded result naming an unknown enum is served on replay as the tag."""
    run = schedule(typed.echo_value, "planted")
    plant_step(run, typed.pass_through, status="done", result={"kept": TINT})
    assert ended(run).status == "completed"
    assert everystep.result(run) == {"kept": TINT}


def test_an_unknown_enum_in_an_event_payload_is_its_stored_form() -> None:
    """An event payload naming an unknown enum reaches the waiting body as the tag."""
    run = schedule(typed.waits_for_payload)
    assert (ended(run).status, run.waiting_for) == ("scheduled", "payload")
    assert send(run.id, "payload", "placeholder")
    Event.objects.filter(workflow=run).update(payload=[TINT])
    assert ended(run).status == "completed"
    assert everystep.result(run) == [TINT]


def test_a_recorded_step_error_of_an_unknown_type_fails_the_run_with_step_failure() -> None:
    """A recorded failure naming an unknown type is re-raised as a StepFailure naming
    it: the body's ``except PaymentError`` does not catch it, the run fails clearly."""
    run = schedule(typed.charges, "declined")
    plant_step(run, typed.charge, status="failed", error=PLANTED)
    assert ended(run).status == "failed"
    assert run.error["type"] == "everystep.errors.StepFailure"
    assert run.error["message"] == f"{MARKER_MODULE}.Planted: planted"
    with pytest.raises(StepFailure) as info:
        everystep.result(run)
    assert info.value.original_type == f"{MARKER_MODULE}.Planted"


def test_a_recorded_step_error_of_a_declared_type_is_rebuilt_as_itself() -> None:
    """Control: a recorded CardDeclined (a loaded subclass of the PaymentError the body
    names) is rebuilt as itself and caught."""
    run = schedule(typed.charges, "declined")
    error = {"type": qualified_name(typed.CardDeclined), "message": "x", "args": ["x"]}
    plant_step(run, typed.charge, status="failed", error=error)
    assert ended(run).status == "completed"
    assert everystep.result(run) == "caught CardDeclined"


def test_result_of_a_run_whose_stored_result_or_error_names_an_unknown_type() -> None:
    """``result()`` returns a stored result's unknown enum as the tag, raises a
    StepFailure for a stored error of an unknown type; ``published()`` gives the tag."""
    done = schedule(typed.echo_value, 1)
    assert ended(done).status == "completed"
    Workflow.objects.filter(pk=done.pk).update(result={"tint": TINT})
    assert everystep.result(done) == {"tint": TINT}
    Published.objects.create(workflow=done, key="tint", value=TINT, updated_at=timezone.now())
    assert everystep.published(done) == {"tint": TINT}

    Workflow.objects.filter(pk=done.pk).update(status="failed", result=None, error=PLANTED)
    with pytest.raises(StepFailure) as info:
        everystep.result(done)
    assert info.value.original_type == f"{MARKER_MODULE}.Planted"


def test_an_enum_a_task_function_names_is_rebuilt_from_a_row() -> None:
    """A class named only by a Django @task's annotation is allowed: the scan reads task
    functions as it reads workflows and steps (a worker after a restart needs it)."""
    from everystep import stored_types
    from tests.testapp import tasks

    assert stored_types.resolve_enum(qualified_name(tasks.Tier)) is tasks.Tier
