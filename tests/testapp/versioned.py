"""Workflows in several versions of their code, for the replay check, ``patched()`` and
atomic steps. ``order`` is version 1 as registered; the ``order_*`` functions are later
versions a test deploys with ``everystep.testing.deployed``.

Step bodies count their executions in ``CALLS`` (this process) and in ``Execution``
rows (any process), so a test can show that a check runs none of them.
"""

from __future__ import annotations

import os
import time
from collections import Counter

from django.utils import timezone

from everystep import context, deprecate_patch, parallel, patched, step, wait_for, workflow
from everystep.registry import replace
from tests.testapp.models import Execution

CALLS: Counter[str] = Counter()


def _ran(label: str) -> None:
    CALLS[label] += 1
    ctx = context.current()
    assert ctx is not None
    Execution.objects.create(
        run_id=ctx.workflow_id, step=label, pid=os.getpid(), started_at=timezone.now()
    )


@step
def reserve(order_id: int) -> str:
    _ran("reserve")
    return f"reserved {order_id}"


@step
def charge(order_id: int) -> str:
    _ran("charge")
    return f"charged {order_id}"


@step
def charge_with_tax(order_id: int) -> str:
    _ran("charge_with_tax")
    return f"charged {order_id} with tax"


@step
def ship(order_id: int) -> str:
    _ran("ship")
    # A worker can be killed mid-step in the acceptance tests.
    time.sleep(float(os.environ.get("EVERYSTEP_TEST_SLOW_SHIP", "0")))
    return f"shipped {order_id}"


# Version 1: reserve, charge, wait for "go", ship.
@workflow(name="tests.versioned.order")
def order(order_id: int) -> list[str]:
    reserved = reserve(order_id)
    charged = charge(order_id)
    wait_for("go")
    return [reserved, charged, ship(order_id)]


def order_taxed(order_id: int) -> list[str]:
    """Version 2 without a patch: runs past the charge replay a different step there."""
    reserved = reserve(order_id)
    charged = charge_with_tax(order_id)
    wait_for("go")
    return [reserved, charged, ship(order_id)]


def order_patched(order_id: int) -> list[str]:
    """Version 2 with a patch: runs past the charge keep the old branch."""
    reserved = reserve(order_id)
    charged = charge_with_tax(order_id) if patched("tax") else charge(order_id)
    wait_for("go")
    return [reserved, charged, ship(order_id)]


def order_deprecated(order_id: int) -> list[str]:
    """Version 3: the old branch is gone."""
    reserved = reserve(order_id)
    deprecate_patch("tax")
    charged = charge_with_tax(order_id)
    wait_for("go")
    return [reserved, charged, ship(order_id)]


@step
def ship_express(order_id: int) -> str:
    _ran("ship_express")
    return f"shipped {order_id} express"


def order_express(order_id: int) -> list[str]:
    """Version 4: the ``deprecate_patch("tax")`` line is gone, a new patch after the wait."""
    reserved = reserve(order_id)
    charged = charge_with_tax(order_id)
    wait_for("go")
    shipped = ship_express(order_id) if patched("express") else ship(order_id)
    return [reserved, charged, shipped]


def order_compatible(order_id: int) -> list[str]:
    """A compatible change: only what follows the wait is new (no run recorded it)."""
    reserved = reserve(order_id)
    charged = charge(order_id)
    wait_for("go")
    return [reserved, charged, ship(order_id), ship(order_id + 1000)]


@step
def measure(size: int) -> int:
    _ran("measure")
    return size


@step
def big(size: int) -> str:
    _ran("big")
    return f"big {size}"


@step
def small(size: int) -> str:
    _ran("small")
    return f"small {size}"


@step
def small_v2(size: int) -> str:
    _ran("small_v2")
    return f"small v2 {size}"


# A body that branches on a recorded result and on context.current(): a check follows
# each run down the branch its records say.
@workflow(name="tests.versioned.branchy")
def branchy(size: int) -> list[str]:
    measured = measure(size)
    ctx = context.current()
    assert ctx is not None
    first = ctx.outcomes["1"]["result"]
    done = big(size) if measured > 5 else small(size)
    wait_for("go")
    return [f"{first}", done, ship(size)]


def branchy_v2(size: int) -> list[str]:
    """``small`` became ``small_v2``: only runs down the small branch are affected."""
    measured = measure(size)
    ctx = context.current()
    assert ctx is not None
    first = ctx.outcomes["1"]["result"]
    done = big(size) if measured > 5 else small_v2(size)
    wait_for("go")
    return [f"{first}", done, ship(size)]


# A fork whose second branch changes.
@workflow(name="tests.versioned.fanout")
def fanout(order_id: int) -> list[object]:
    both = parallel(lambda: reserve(order_id), lambda: charge(order_id))
    wait_for("go")
    return [*both, ship(order_id)]


def fanout_patched(order_id: int) -> list[object]:
    both = parallel(
        lambda: reserve(order_id),
        lambda: charge_with_tax(order_id) if patched("tax") else charge(order_id),
    )
    wait_for("go")
    return [*both, ship(order_id)]


def fanout_taxed(order_id: int) -> list[object]:
    both = parallel(lambda: reserve(order_id), lambda: charge_with_tax(order_id))
    wait_for("go")
    return [*both, ship(order_id)]


def order_new_argument(order_id: int, coupon: str) -> list[str]:
    """A signature change: every replay of an old run raises TypeError."""
    return [reserve(order_id), coupon]


def order_writes_between_steps(order_id: int) -> list[str]:
    """A body that writes outside a step (against the rules): the check reports it."""
    reserved = reserve(order_id)
    ctx = context.current()
    assert ctx is not None
    Execution.objects.create(
        run_id=ctx.workflow_id, step="outside", pid=0, started_at=timezone.now()
    )
    return [reserved]


@step(atomic=True)
def book(order_id: int, fail: bool = False) -> str:
    """An exactly-once database step: its Execution row commits with its record."""
    _ran("book")
    if fail:
        raise ValueError(f"cannot book {order_id}")
    return f"booked {order_id}"


@workflow(name="tests.versioned.booking")
def booking(order_id: int, fail: bool = False) -> list[str]:
    reserved = reserve(order_id)
    try:
        booked = book(order_id, fail)
    except ValueError as exc:
        booked = f"not booked: {exc}"
    return [reserved, booked, ship(order_id)]


@step(atomic=True)
def book_elsewhere(order_id: int) -> str:
    """Against the rule: an atomic step touching another database alias."""
    from django.db import connections

    with connections["aside"].cursor() as cursor:
        cursor.execute("SELECT 1")
    return f"booked {order_id} elsewhere"


@workflow(name="tests.versioned.elsewhere")
def elsewhere(order_id: int) -> str:
    try:
        return book_elsewhere(order_id)
    except Exception:  # the refusal cannot be swallowed
        return "swallowed"


# A worker process started with EVERYSTEP_TEST_DEPLOY=<version> runs that version of
# ``order``: the acceptance tests deploy new code between two worker processes.
VERSIONS = {"order_taxed": order_taxed, "order_patched": order_patched}
if deploy := os.environ.get("EVERYSTEP_TEST_DEPLOY"):
    replace("tests.versioned.order", VERSIONS[deploy])
