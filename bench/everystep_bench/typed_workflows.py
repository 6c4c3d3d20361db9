"""``bench_three_typed``: ``workflows.bench_three`` with typed durable values (issue 55).

The same 3 steps and the same arithmetic (add, double, inc), but every step takes and
returns a small pydantic v2 model (``Reading``) and the workflow's parameters and return
are annotated with it, so each step's result is stored as the model's plain JSON and
rebuilt from its annotation (``everystep.shapes``). ``instructions.py --workload pydantic``
counts what that costs per run against ``bench_three`` (``--workload plain``).

Not registered by ``apps.EverystepBenchConfig.ready``: importing it loads pydantic, which
the plain benches must not pay for (``instructions.py`` imports it for its typed workload
only); and a tree from before issue 55 (``--source``) cannot store a model at all.
"""

from __future__ import annotations

import pydantic

from everystep import step, workflow


class Reading(pydantic.BaseModel):
    value: int
    note: str


@step
def bench_typed_add(a: Reading, b: Reading) -> Reading:
    return Reading(value=a.value + b.value, note=a.note)


@step
def bench_typed_double(x: Reading) -> Reading:
    return Reading(value=2 * x.value, note=x.note)


@step
def bench_typed_inc(x: Reading) -> Reading:
    return Reading(value=x.value + 1, note=x.note)


@workflow
def bench_three_typed(a: Reading, b: Reading) -> Reading:
    return bench_typed_inc(bench_typed_double(bench_typed_add(a, b)))


def arguments(i: int) -> list[Reading]:
    """The arguments of run ``i``: ``bench_three``'s ``(i, 1)`` as readings."""
    return [Reading(value=i, note=f"run {i}"), Reading(value=1, note="one")]
