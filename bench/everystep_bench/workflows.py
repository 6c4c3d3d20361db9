"""Workflows with tiny step bodies, so a benchmark measures the engine, not the steps.

``bench_three`` has 3 steps, ``bench_one`` 1: the difference between the two gives the
cost of one executed step, the rest is the cost of a run besides its steps.
"""

from __future__ import annotations

from everystep import step, workflow


@step
def bench_add(a: int, b: int) -> int:
    return a + b


@step
def bench_double(x: int) -> int:
    return 2 * x


@step
def bench_inc(x: int) -> int:
    return x + 1


@workflow
def bench_three(a: int, b: int) -> int:
    return bench_inc(bench_double(bench_add(a, b)))


@workflow
def bench_one(a: int, b: int) -> int:
    return bench_add(a, b)
