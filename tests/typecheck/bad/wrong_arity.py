"""Too few or too many arguments for a workflow."""

from __future__ import annotations

from everystep import astart, schedule
from tests.typecheck.example.workflows import charge, ship

schedule(charge)  # expect-error
schedule(charge, 1, "EUR", "extra")  # expect-error


async def body() -> None:
    await astart(ship)  # expect-error
