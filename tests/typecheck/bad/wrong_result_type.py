"""A run's result used as a type it is not."""

from __future__ import annotations

from everystep import aresult, aschedule, gather, result, schedule
from tests.typecheck.example.workflows import charge, ship, total

count: str = result(schedule(total, 1))  # expect-error
receipts: list[int] = gather([schedule(charge, 1)])  # expect-error


async def view() -> None:
    shipped: str = await aresult(await aschedule(ship, 1))  # expect-error
    print(shipped)
