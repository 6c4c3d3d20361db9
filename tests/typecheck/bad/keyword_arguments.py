"""Workflow arguments by keyword (a run stores positional arguments only), and a
misspelt option."""

from __future__ import annotations

from everystep import schedule
from tests.typecheck.example.workflows import charge

schedule(charge, order_id=1)  # expect-error
schedule(charge, 1, idempotencykey="k")  # expect-error
