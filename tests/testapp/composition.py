"""Workflows that start child runs and wait for runs (``start``, ``result``, ``gather``).
Each parent body logs an ``Execution`` row named ``pass`` on every pass (outside any
step, so it runs again on each replay): tests count the passes a parent took."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from everystep import (
    Terminal,
    aschedule,
    gather,
    parallel,
    result,
    schedule,
    start,
    step,
    wait_for,
    workflow,
)
from everystep.errors import RunCancelled, RunStopped, WaitTimeout
from tests.testapp.wait_workflows import executed


@step
def add(a: int, b: int) -> int:
    executed("add")
    return a + b


@workflow
def child_sum(a: int, b: int) -> int:
    return add(a, b)


@workflow
def child_fails(message: str) -> None:
    add(0, 0)
    raise ValueError(message)


@workflow
def child_stops(reason: str) -> None:
    raise Terminal(reason, {"why": reason})


@workflow
def child_waits(event: str) -> Any:
    return wait_for(event)


@workflow
def parent_one(a: int) -> int:
    executed("pass")
    child = start(child_sum, a, 1)
    total = result(child)
    return add(total, 100)


@workflow
def parent_many(count: int) -> list[int]:
    executed("pass")
    children = [start(child_sum, i, i) for i in range(count)]
    return gather(children)


@workflow
def parent_catches(kind: str, timeout: float | None = None) -> str:
    """Starts a child of ``kind`` and says what its result() raised."""
    executed("pass")
    child = {
        "fails": lambda: start(child_fails, "boom"),
        "stops": lambda: start(child_stops, "enough"),
        "waits": lambda: start(child_waits, "go"),
    }[kind]()
    try:
        return f"value {result(child, timeout=timeout)!r}"
    except ValueError as exc:
        return f"ValueError {exc}"
    except RunStopped as exc:
        return f"RunStopped {exc.reason} {exc.payload}"
    except RunCancelled:
        return "RunCancelled"
    except WaitTimeout:
        return f"WaitTimeout, then {add(1, 1)}"


@workflow
def parent_gathers_failures() -> str:
    executed("pass")
    runs = [start(child_fails, "one"), start(child_sum, 1, 1), start(child_fails, "two")]
    try:
        gather(runs)
    except ExceptionGroup as group:
        return " + ".join(sorted(str(exc) for exc in group.exceptions))
    return "no failure"


@workflow
def parent_in_branches() -> tuple[Any, ...]:
    """Two fork branches, each starting a child and waiting for it."""
    executed("pass")
    return parallel(
        lambda: result(start(child_sum, 1, 2)),
        lambda: result(start(child_sum, 3, 4)),
    )


@workflow
def grandparent() -> int:
    executed("pass")
    return result(start(parent_one, 10))


@workflow
def outside_starter(a: int) -> str:
    """``start`` in a step body is ``schedule``: not durable, no parent."""
    return str(_start_in_step(a))


@step
def _start_in_step(a: int) -> str:
    return str(start(child_sum, a, a).pk)


@step
def pause(seconds: float) -> None:
    import time

    executed("pause")
    time.sleep(seconds)


@workflow
def parent_slow(count: int, seconds: float) -> list[int]:
    """Starts ``count`` children with a pause after each start: a worker killed in a pause
    has recorded some starts and not others."""
    executed("pass")
    children = []
    for index in range(count):
        children.append(start(child_sum, index, 1))
        pause(seconds)
    return gather(children)


@workflow
def child_pausing(index: int, seconds: float) -> int:
    pause(seconds)
    return index


@workflow
def parent_fanout(count: int, seconds: float) -> list[int]:
    """``count`` children that each take ``seconds``, gathered."""
    executed("pass")
    return gather([start(child_pausing, index, seconds) for index in range(count)])


@workflow
def quiet_parent(event: str) -> Any:
    """Starts a child that waits for ``event`` and waits for it; writes nothing between
    records, as the replay check requires of a body."""
    return result(start(child_waits, event))


@workflow
def schedules_children(a: int) -> list[str]:
    """Schedules a run now and one in an hour with ``schedule()``, not ``start()``, then
    takes a step: a replay past the schedules inserts no second run (issue 54)."""
    executed("pass")
    now = schedule(child_sum, a, 1)
    later = schedule(child_sum, a, 2, delay=3600)
    add(a, 0)
    return [str(now.id), str(later.id)]


@workflow
async def aschedules_children(a: int) -> list[str]:
    """``schedules_children`` for an async body: ``aschedule()``, each recorded."""
    now = await aschedule(child_sum, a, 1)
    later = await aschedule(child_sum, a, 2, delay=3600)
    await add(a, 0)
    return [str(now.id), str(later.id)]


@workflow
def schedules_then_waits(label: str, gate: str) -> str:
    """Schedules a child, then waits in a step until ``gate`` exists (a worker can be
    killed there): the replay after the kill must schedule nothing again."""
    child = schedule(child_sum, 1, 2)
    waits_at_gate(label, gate)
    return str(child.id)


@step
def waits_at_gate(label: str, gate: str) -> None:
    executed(f"{label}:gate")
    while not Path(gate).exists():
        time.sleep(0.05)


@workflow
async def async_sync_scheduler() -> None:
    """Calls the sync ``schedule()`` in an async body: the run fails saying to await
    ``aschedule()``, and nothing is scheduled."""
    schedule(child_sum, 1, 1)
