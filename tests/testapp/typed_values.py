"""Typed values through a workflow (issue 55): a dataclass, a pydantic model, a list of
models and an Enum through steps, a ``parallel()`` fork, a child's ``result()``, an event
and a published value, and a Django task whose parameters and result are typed.

The body writes what it was handed as an ``Execution`` row (``<label>:types``) on every
pass, so a test compares what the first pass and the pass after a restart saw; every
step body logs its execution, so a test counts them across worker processes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import os
from decimal import Decimal
from pathlib import Path
from typing import Literal, NamedTuple, TypedDict

import pydantic
from asgiref.sync import sync_to_async
from django.utils import timezone

from everystep import parallel, publish, result, start, step, wait_for, workflow
from tests.testapp.models import Execution
from tests.testapp.tasks import second
from tests.testapp.wait_workflows import executed

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclasses.dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str = "EUR"


@dataclasses.dataclass
class Order:
    ref: str
    total: Money
    priority: Priority
    placed: dt.date
    tags: tuple[str, ...] = ()


class LineItem(pydantic.BaseModel):
    sku: str
    quantity: int
    price: Decimal


class Quote(pydantic.BaseModel):
    ref: str
    lines: list[LineItem]
    total: Decimal
    paid_by: str


@dataclasses.dataclass
class Card:
    kind: Literal["card"]
    last4: str


@dataclasses.dataclass
class Transfer:
    kind: Literal["transfer"]
    iban: str


class Point(NamedTuple):
    x: int
    y: int = 0


class Summary(TypedDict):
    count: int
    biggest: Money


@step
def make_order(ref: str) -> Order:
    executed(f"{ref}:make_order")
    return Order(ref, Money(Decimal("12.50")), Priority.HIGH, dt.date(2026, 12, 7), ("gift",))


@step
def price_lines(order: Order) -> list[LineItem]:
    executed(f"{order.ref}:price_lines")
    return [
        LineItem(sku="A-1", quantity=2, price=Decimal("2.50")),
        LineItem(sku="B-2", quantity=1, price=Decimal("7.50")),
    ]


@step
def priority_of(order: Order) -> Priority:
    executed(f"{order.ref}:priority_of")
    return order.priority


@step
def summary_of(ref: str, lines: list[LineItem]) -> Summary:
    executed(f"{ref}:summary_of")
    biggest = max(line.price for line in lines)
    return {"count": len(lines), "biggest": Money(biggest)}


@step
def corner(ref: str) -> Point | None:
    executed(f"{ref}:corner")
    return Point(3)


@step
def doubled(money: Money) -> Money:
    executed("doubled")
    return Money(money.amount * 2, money.currency)


@workflow
def typed_child(order: Order) -> Money:
    """A child whose argument and result are typed: ``result()`` in the parent hands back
    a ``Money``."""
    return doubled(order.total)


@step
def make_quote(order: Order, lines: list[LineItem], paid: Card | Transfer) -> Quote:
    executed(f"{order.ref}:make_quote")
    total = sum((line.price * line.quantity for line in lines), Decimal(0))
    paid_by = paid.last4 if isinstance(paid, Card) else paid.iban
    return Quote(ref=order.ref, lines=lines, total=total, paid_by=paid_by)


def seen(*values: object) -> None:
    """Log the types the body was handed on this pass (a body's own write: it happens on
    every pass, which is the point), as one ``Execution`` row of the run."""
    from everystep.context import current

    context = current()
    assert context is not None
    Execution.objects.create(
        run_id=context.workflow_id,
        step="|".join(type_name(value) for value in values)[:64],
        pid=os.getpid(),
        started_at=timezone.now(),
    )


def types_seen(run_id: object) -> list[str]:
    """What ``seen`` logged for a run, one entry per pass, in order."""
    rows = Execution.objects.filter(run_id=run_id, step__contains="|").order_by("id")
    return list(rows.values_list("step", flat=True))


def type_name(value: object) -> str:
    if isinstance(value, list) and value:
        return f"list[{type(value[0]).__name__}]"
    return type(value).__name__


@workflow
def typed_order(ref: str, gate: str) -> Quote:
    """Every kind of typed value through one run; waits in a step on ``gate`` (a worker
    can be killed there) after logging what it was handed."""
    order = make_order(ref)
    lines = price_lines(order)
    priority, summary, point = parallel(
        lambda: priority_of(order), lambda: summary_of(ref, lines), lambda: corner(ref)
    )
    child_total = result(start(typed_child, order))
    paid = wait_for("paid", type=Card | Transfer)
    publish("order", order)
    seen(order, lines, priority, summary["biggest"], point, child_total, paid)
    if Path(gate).name != "-":
        second(ref, gate)
    return make_quote(order, lines, paid)


@task
def typed_task(lines: list[LineItem], priority: Priority, *, extra: Money | None = None) -> Money:
    """A Django task whose parameters and result are typed. Its arguments are JSON, as
    Django requires of every backend's (``model_dump(mode="json")``, an Enum's value);
    the annotations hand the function a list of models and the member."""
    assert all(isinstance(line, LineItem) for line in lines) and isinstance(priority, Priority)
    total = sum((line.price * line.quantity for line in lines), Decimal(0))
    return Money(total + (extra.amount if extra else Decimal(0)))


@step
async def afetch_lines(ref: str) -> list[LineItem]:
    await sync_to_async(executed)(f"{ref}:afetch_lines")
    return [LineItem(sku="C-3", quantity=3, price=Decimal("1.00"))]


@step
async def atotal(lines: list[LineItem], paid: Card | Transfer) -> Money:
    await sync_to_async(executed)("atotal")
    return Money(sum((line.price * line.quantity for line in lines), Decimal(0)))


@workflow
async def atyped_order(ref: str, order: Order) -> Money:
    """The async twin: typed arguments, step results and event payload."""
    from everystep import await_for

    lines = await afetch_lines(ref)
    paid = await await_for("paid", type=Card | Transfer)
    await sync_to_async(seen)(order, lines, paid)
    return await atotal(lines, paid)
