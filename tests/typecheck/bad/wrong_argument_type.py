"""A workflow's argument of the wrong type, to schedule() and its twins."""

from __future__ import annotations

from everystep import aschedule, schedule, start
from tests.typecheck.example.workflows import charge, ship

schedule(charge, "42")  # expect-error
schedule(charge, 42, 978)  # expect-error
start(charge, 4.2)  # expect-error


async def view() -> None:
    await aschedule(ship, "42")  # expect-error
