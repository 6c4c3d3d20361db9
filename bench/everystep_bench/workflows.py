"""Workflows with tiny step bodies, so a benchmark measures the engine, not the steps.

``bench_three`` has 3 steps, ``bench_one`` 1: the difference between the two gives the
cost of one executed step, the rest is the cost of a run besides its steps.
``bench_cpu_three`` has 3 steps that each compute in Python for about 2 ms (holding the
interpreter lock): runs that use a core, for ``--processes`` (``bench/processes.py``).
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


@step
def bench_compute(x: int) -> int:
    # Pure Python, so the interpreter lock is held throughout (hashlib would release it).
    total = x
    for i in range(20_000):
        total = (total * 31 + i) % 1_000_003
    return total


@workflow
def bench_cpu_three(a: int, b: int) -> int:
    return bench_compute(bench_compute(bench_compute(a + b)))
