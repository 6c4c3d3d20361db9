"""Code outside runs (views, scripts, async views) that starts runs and waits for them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, assert_type
from uuid import UUID

from django.tasks import task as django_task
from django_tasks import task as backport_task

from everystep import aresult, aschedule, astart, fork, gather, result, schedule, start
from everystep.models import Workflow
from tests.typecheck.example.workflows import charge, fulfil, ship, total


@django_task
def invoice(order_id: int) -> str:
    return f"invoice {order_id}"


@backport_task
def refund(order_id: int) -> float:
    return float(order_id)


def checkout(order_id: int) -> str:
    run = schedule(charge, order_id, idempotency_key=f"charge-{order_id}")
    assert_type(run, Workflow[str])
    assert_type(schedule(charge, order_id, "USD", delay=timedelta(minutes=5)), Workflow[str])
    assert_type(schedule(total), Workflow[int])
    assert_type(schedule(total, 1, 2, 3), Workflow[int])
    assert_type(schedule(fulfil, order_id), Workflow[list[str]])
    assert_type(schedule(ship, order_id), Workflow[float])  # an async def workflow
    assert_type(start(charge, order_id), Workflow[str])
    assert_type(result(run, timeout=30), str)
    assert_type(gather([run, schedule(charge, 2)]), list[str])
    assert_type(fork(run, from_step="charge"), Workflow[str])
    return result(run)


def by_id(run_id: UUID | str) -> None:
    assert_type(result(run_id), Any)
    assert_type(gather([run_id]), list[Any])
    assert_type(fork(run_id), Workflow[Any])
    run: Workflow = schedule(total, 1)  # a bare Workflow is Workflow[Any]
    assert_type(result(run), Any)


def mixed() -> None:
    runs = [schedule(charge, 1), schedule(total, 2)]
    # The checkers differ on the type of the list (pyright: a union), agree on this.
    values: list[object] = gather(runs)
    print(values)


def tasks() -> None:
    billed = start(invoice, 9)
    assert_type(result(billed), str)
    assert_type(result(start(refund, 9)), float)


async def async_view(order_id: int) -> str:
    run = await aschedule(charge, order_id, idempotency_key="k")
    assert_type(run, Workflow[str])
    assert_type(await aschedule(ship, order_id), Workflow[float])
    assert_type(await astart(total, 1), Workflow[int])
    assert_type(await aresult(run), str)
    assert_type(await aresult(await astart(ship, 2)), float)
    return await aresult(run)
