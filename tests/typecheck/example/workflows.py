"""Steps and workflows, sync and async, and what their bodies start and wait for."""

from __future__ import annotations

import dataclasses
from typing import Any, assert_type

from everystep import (
    agather,
    aresult,
    astart,
    await_for,
    gather,
    parallel,
    result,
    sleep,
    start,
    step,
    wait_for,
    workflow,
)
from everystep.models import Workflow


@dataclasses.dataclass(frozen=True)
class Payment:
    reference: str
    cents: int


@step
def price(sku: str, quantity: int = 1) -> int:
    return 100 * quantity if sku else 0


@step(atomic=True)
def reserve(sku: str) -> bool:
    return bool(sku)


@step(unsafe_to_repeat=True)
async def notify(address: str) -> None:
    print(address)


@workflow
def charge(order_id: int, currency: str = "EUR") -> str:
    cents = price("sku-1", everystep_id="first price")
    assert_type(cents, int)
    assert_type(price("sku-2", 3), int)
    assert_type(reserve("sku-1"), bool)
    sleep(1.5)
    return f"{order_id}: {cents} {currency}"


@workflow(name="example.total")
def total(*order_ids: int) -> int:
    return sum(order_ids)


@workflow
def fulfil(order_id: int) -> list[str]:
    child = start(charge, order_id, idempotency_key=f"charge-{order_id}")
    assert_type(child, Workflow[str])
    receipt = result(child)
    assert_type(receipt, str)
    others = [start(charge, n, "USD", everystep_id=f"charge {n}") for n in (1, 2)]
    assert_type(gather(others), list[str])
    both = parallel(lambda: price("a"), lambda: price("b"))
    assert_type(both, tuple[Any, ...])
    assert_type(result(start(total, 1, 2, 3)), int)
    paid = wait_for("paid", type=Payment)  # rebuilt as the type named, and typed so
    assert_type(paid, Payment)
    assert_type(wait_for("note"), Any)
    return [receipt, paid.reference, *gather(others)]


@workflow
async def ship(order_id: int) -> float:
    await notify("ops@example.com")
    child = await astart(charge, order_id)
    assert_type(child, Workflow[str])
    assert_type(await aresult(child), str)
    children = [await astart(charge, n) for n in (1, 2)]
    assert_type(await agather(children), list[str])
    assert_type(await await_for("paid", type=Payment), Payment)
    return 1.5
