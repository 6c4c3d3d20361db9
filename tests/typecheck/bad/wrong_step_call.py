"""A step called with what its function does not take, or its value misused."""

from __future__ import annotations

from everystep import workflow
from tests.typecheck.example.workflows import price


@workflow
def quote() -> str:
    price(42)  # expect-error
    cents: str = price("sku", everystep_id="p")  # expect-error
    return cents
