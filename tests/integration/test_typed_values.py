"""Values typed by the code (issue 55): a run hands its body the same typed values on the
live pass and on a replay after a crash, rebuilt from the annotations, never from a class
a row names; what cannot be stored is refused naming the fix; what a type change makes
unreadable fails clearly and is reported by the replay check. The real worker process
killed mid-run: tests/acceptance/test_typed_values_worker.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import sys
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command

import everystep
from everystep import serde, shapes
from everystep.errors import IncompatibleValue, UnstorableValue
from everystep.models import Status, Step, Workflow
from everystep.testing import crash_at, deployed, run_due
from tests.testapp import typed_values as tv
from tests.testapp.models import Execution

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus  # type: ignore[no-redef]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]

SEEN = "Order|list[LineItem]|Priority|Money|Point|Money|Card"


def executions(label: str) -> int:
    return Execution.objects.filter(step__startswith=f"{label}:").count()


def test_a_run_hands_its_body_the_same_types_live_and_after_a_crash():
    run = everystep.schedule(tv.typed_order, "t1", "-")
    everystep.send(run.id, "paid", tv.Card("card", "4242"))
    # The pass dies before the quote's body: every typed value so far is recorded.
    with crash_at("before_body", tv.make_quote) as crash:
        run_due(max_passes=3)
    assert crash.fired
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.COMPLETED, row.error
    seen = tv.types_seen(run.id)
    assert seen == [SEEN, SEEN], "the first pass and the replay were handed the same types"
    assert executions("t1") == 6, "each step's body ran once"
    quote = everystep.result(run)
    assert isinstance(quote, tv.Quote)
    assert quote == tv.Quote(
        ref="t1",
        lines=[
            tv.LineItem(sku="A-1", quantity=2, price=Decimal("2.50")),
            tv.LineItem(sku="B-2", quantity=1, price=Decimal("7.50")),
        ],
        total=Decimal("12.50"),
        paid_by="4242",
    )
    # Stored as plain JSON: nothing in the rows names a class but the Enum's tag.
    order = Step.objects.get(workflow_id=run.id, step_id="1").result
    assert order["total"] == {"amount": {"__es__": "decimal", "v": "12.50"}, "currency": "EUR"}
    assert row.result["lines"][0] == {"sku": "A-1", "quantity": 2, "price": "2.50"}
    # The published value is its JSON form, what a page or a stream shows; a reader's
    # types= rebuilds it.
    assert everystep.published(run)["order"]["ref"] == "t1"
    order = everystep.published(run, types={"order": tv.Order})["order"]
    assert isinstance(order, tv.Order) and order.priority is tv.Priority.HIGH
    assert order.tags == ("gift",)
    [last] = list(everystep.watch(run, types={"order": tv.Order}))
    assert last["order"] == order

    async def awatched() -> list[dict[str, Any]]:
        return [values async for values in everystep.awatch(run, types={"order": tv.Order})]

    assert async_to_sync(awatched)() == [last]


def test_a_task_with_typed_parameters_and_result():
    """A task's arguments are JSON, as Django requires of every backend; its function's
    annotations rebuild them, and its annotated result comes back typed."""
    lines = [tv.LineItem(sku="A-1", quantity=2, price=Decimal("2.50"))]
    enqueued = tv.typed_task.enqueue([line.model_dump(mode="json") for line in lines], "high")
    run_due()
    done = tv.typed_task.get_result(enqueued.id)
    assert done.status == TaskResultStatus.SUCCESSFUL, done.errors
    assert done.return_value == tv.Money(Decimal("5.00"))
    assert done.args == [[line.model_dump(mode="json") for line in lines], "high"]


@everystep.step
def untyped_money():  # no return annotation: a replay could not rebuild a Money
    return tv.Money(Decimal(1))


@everystep.workflow
def returns_untyped() -> str:
    untyped_money()
    return "unreachable"


@everystep.workflow
def takes_untyped(value) -> None:  # no annotation on the parameter
    pass


def test_a_value_no_annotation_names_is_refused_naming_the_fix():
    with pytest.raises(UnstorableValue, match=r"tests\.testapp\.typed_values\.Money.*-> Money"):
        serde.encode(tv.Money(Decimal(1)), "result of step 1")
    with pytest.raises(UnstorableValue, match=r"arguments of workflow .*annotate"):
        everystep.schedule(takes_untyped, tv.Money(Decimal(1)))
    assert not Workflow.objects.filter(name__endswith="takes_untyped").exists()
    run = everystep.schedule(returns_untyped)
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert "result of step 1" in row.error["message"] and "-> Money" in row.error["message"]


def test_a_row_naming_a_class_imports_nothing_and_rebuilds_from_the_annotation():
    """An Enum tag naming another module: the annotated class decides, and an unknown
    class named where nothing is annotated is read as its stored form."""
    planted = {"__es__": "enum", "cls": "os.system", "name": "HIGH"}
    assert shapes.of(tv.Priority).rebuild(planted) is tv.Priority.HIGH
    assert serde.decode(planted) == planted
    hand_written = {"__es__": "pydantic", "cls": "subprocess.Popen", "v": {}}
    with pytest.raises(IncompatibleValue, match="Money"):
        shapes.of(tv.Money).rebuild(hand_written, "the result")


# -- schema drift ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MoneyWithRate:  # a field added with a default
    amount: Decimal
    currency: str = "EUR"
    rate: float = 1.0


@dataclasses.dataclass(frozen=True)
class MoneyWithout:  # a field removed
    amount: Decimal


@dataclasses.dataclass(frozen=True)
class MoneyNeedingRate:  # a field added without a default
    amount: Decimal
    currency: str
    rate: float


class Renamed(enum.Enum):
    LOW = "low"
    URGENT = "high"  # was HIGH


class Aliased(enum.Enum):
    LOW = "low"
    URGENT = "high"
    HIGH = "high"  # the old name kept as an alias


STORED_MONEY = serde.encode(tv.Money(Decimal("1.5")), "v", frozenset({tv.Money}))
STORED_PRIORITY = serde.encode(tv.Priority.HIGH, "v", frozenset({tv.Priority}))


@pytest.mark.parametrize(
    ("new_type", "stored", "expected"),
    [
        (MoneyWithRate, STORED_MONEY, MoneyWithRate(Decimal("1.5"), "EUR", 1.0)),
        (MoneyWithout, STORED_MONEY, MoneyWithout(Decimal("1.5"))),
        (Aliased, STORED_PRIORITY, Aliased.URGENT),
    ],
    ids=["field-added-with-default", "field-removed", "enum-renamed-alias-kept"],
)
def test_a_compatible_change_rebuilds_an_old_record(new_type: Any, stored: Any, expected: Any):
    assert shapes.of(new_type).rebuild(stored) == expected


@pytest.mark.parametrize(
    ("new_type", "stored", "message"),
    [
        (MoneyNeedingRate, STORED_MONEY, "MoneyNeedingRate.rate is missing and has no default"),
        (Renamed, STORED_PRIORITY, "Renamed has no member 'HIGH'"),
    ],
    ids=["field-added-without-default", "enum-member-renamed"],
)
def test_an_incompatible_change_fails_clearly(new_type: Any, stored: Any, message: str):
    with pytest.raises(IncompatibleValue, match=message):
        shapes.of(new_type).rebuild(stored, "the result")


@everystep.step
def old_money() -> tv.Money:
    return tv.Money(Decimal(3))


@everystep.step
def new_money() -> MoneyNeedingRate:  # the same step, its return type changed
    raise AssertionError("a replay serves the record")


@everystep.workflow
def drifting() -> str:
    return str(old_money(everystep_id="money").amount)


def test_a_replay_of_a_record_the_new_type_cannot_rebuild_fails_and_is_reported():
    run = everystep.schedule(drifting)
    run_due()
    assert Workflow.objects.get(id=run.id).status == Status.COMPLETED
    Workflow.objects.filter(id=run.id).update(status=Status.RUNNING)  # a run in flight

    def new_body() -> str:
        return str(new_money(everystep_id="money").amount)

    # The step's name is recorded; the new code's step keeps it (a renamed return type).
    Step.objects.filter(workflow_id=run.id).update(name=new_money.__everystep_step__.name)  # type: ignore[attr-defined]
    with deployed(drifting, new_body):
        out = StringIO()
        with pytest.raises(SystemExit):
            call_command("everystep_check_replay", "--json", stdout=out)
        report = json.loads(out.getvalue())
        [entry] = [e for e in report["workflows"] if e["workflow"] == drifting_name()]
        [failure] = entry["failing"]
        assert failure["run_id"] == str(run.id) and failure["step_id"] == "money"
        assert "MoneyNeedingRate.rate is missing and has no default" in failure["reason"]
        # The run itself, replayed under the new code, fails as a code change does.
        Workflow.objects.filter(id=run.id).update(status=Status.SCHEDULED, claimed_by=None)
        run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert row.error["type"] == "everystep.errors.IncompatibleValue"


def drifting_name() -> str:
    return f"{drifting.__module__}.{drifting.__qualname__}"


def test_an_async_body_gets_the_same_types_live_and_after_a_crash():
    order = tv.Order("a1", tv.Money(Decimal(1)), tv.Priority.LOW, dt.date(2026, 12, 7))
    run = everystep.schedule(tv.atyped_order, "a1", order)
    everystep.send(run.id, "paid", tv.Card("card", "0001"))
    with crash_at("before_body", tv.atotal) as crash:
        run_due(max_passes=1)
    assert crash.fired
    run_due()
    assert Workflow.objects.get(id=run.id).status == Status.COMPLETED
    assert tv.types_seen(run.id) == ["Order|list[LineItem]|Card"] * 2
    assert everystep.result(run) == tv.Money(Decimal("3.00"))
    assert executions("a1") == 1


@everystep.step
def typed_priority() -> tv.Priority:
    raise AssertionError("a replay serves the record")


@everystep.step
def typed_total() -> tv.Money:
    raise AssertionError("a replay serves the record")


@everystep.workflow
def reads_planted() -> str:
    priority = typed_priority(everystep_id="priority")
    return f"{priority.name}:{typed_total(everystep_id='total').amount}"


def planted(run: Workflow, step_id: str, fn: Any, result: Any) -> None:
    Step.objects.create(
        workflow_id=run.id,
        step_id=step_id,
        name=fn.__everystep_step__.name,
        args=[],
        kwargs={},
        status="done",
        result=result,
        started_at=run.created_at,
        finished_at=run.created_at,
    )


def test_planted_rows_naming_classes_import_nothing_and_end_clearly():
    """A record of an annotated step whose row names a class of a module with an import
    side effect: the Enum member comes from the annotated class by its stored name; a
    hand-written tag where a dataclass is annotated fails the run naming the type. The
    module is never imported."""
    marker = "tests.testapp.import_marker"
    assert marker not in sys.modules
    tag = {"__es__": "enum", "cls": f"{marker}.Tint", "name": "HIGH"}
    run = everystep.schedule(reads_planted)
    planted(run, "priority", typed_priority, tag)
    planted(run, "total", typed_total, {"__es__": "pydantic", "cls": f"{marker}.Planted"})
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert row.error["type"] == "everystep.errors.IncompatibleValue"
    assert "the result recorded at total" in row.error["message"]
    assert "Money stored as 'pydantic', not an object" in row.error["message"]
    assert marker not in sys.modules, "nothing imported for a row"
    # With a stored Money beside the same tag: the member comes from the annotation.
    other = everystep.schedule(reads_planted)
    planted(other, "priority", typed_priority, tag)
    planted(other, "total", typed_total, serde.encode(tv.Money(Decimal(4)), "v", {tv.Money}))
    run_due()
    assert everystep.result(other) == "HIGH:4"
    assert marker not in sys.modules
