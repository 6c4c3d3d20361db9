"""Workflows that start child runs and wait for them (``start``, ``result``, ``gather``),
for the tests of how the UI and the commands show parents and children. Imported by the
tests that use them, which registers them."""

from __future__ import annotations

from everystep import gather, result, start, wait_for, workflow


@workflow
def held_child(n: int) -> int:
    """Waits until the event ``go`` is sent to it, then returns ``n * 10``."""
    wait_for("go")
    return n * 10


@workflow
def one_child(n: int) -> int:
    """Starts one child and returns its result."""
    return int(result(start(held_child, n)))


@workflow
def fan_out(count: int) -> int:
    """Starts ``count`` children and returns the sum of their results."""
    return sum(gather([start(held_child, n) for n in range(count)]))
