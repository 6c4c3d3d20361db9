"""Workflows for the tests of ``everystep.fork``: a step that fails until it is "fixed",
a fork of branches, and the other kinds of records a fork carries over. Imported by the
tests that use them, which registers them. ``CALLS`` counts each step body's runs and
``BROKEN`` says which steps fail, so a test can "deploy the fix" by clearing it."""

from __future__ import annotations

from collections import Counter

from everystep import parallel, patched, sleep, start, step, wait_for, workflow

CALLS: Counter[str] = Counter()
BROKEN: set[str] = set()


def _body(name: str, value: object) -> object:
    CALLS[name] += 1
    if name in BROKEN:
        raise RuntimeError(f"{name} is broken")
    return value


@step
def reserve(order: int) -> dict[str, int]:
    return _body("reserve", {"reserved": order})  # type: ignore[return-value]


@step
def charge(order: int, amount: int) -> dict[str, int]:
    return _body("charge", {"order": order, "charged": amount})  # type: ignore[return-value]


@step
def ship(order: int) -> str:
    return _body("ship", f"shipped {order}")  # type: ignore[return-value]


@workflow
def checkout(order: int, amount: int) -> list[object]:
    """Three steps: reserve (1), charge (2), ship (3)."""
    return [reserve(order), charge(order, amount), ship(order)]


@step
def part(name: str) -> str:
    return _body(name, name)  # type: ignore[return-value]


@workflow
def branches() -> list[object]:
    """Step 1, then a fork at 2 of two branches of two steps each, then step 3."""
    first = part("first")
    left, right = parallel(
        [lambda: part("left-a"), lambda: part("left-b")],
        [lambda: part("right-a"), lambda: part("right-b")],
    )
    return [first, list(left), list(right), part("last")]


@workflow
def lapse(n: int) -> int:
    return n


@workflow
def carried(order: int) -> list[object]:
    """Every kind of record before a failing step: a sleep, an event wait, a patch
    decision, a child start; then charge (6)."""
    sleep(0)
    payload = wait_for("approval")
    branch = "new" if patched("pricing") else "old"
    child = start(lapse, order)
    return [payload, branch, str(child.id), charge(order, 5)]
