"""Django ``@task`` functions run by everystep's backend (``everystep.tasks``): plain
ones, one with steps, one that waits durably, one that takes its context. Every step
body logs an ``Execution`` row, so tests count executions across worker processes."""

from __future__ import annotations

import enum
import os
import time
from pathlib import Path
from typing import Any

from everystep import astart, parallel, sleep, start, step, wait_for
from tests.testapp.wait_workflows import executed

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def add(a: int, b: int, *, scale: int = 1) -> int:
    return (a + b) * scale


class Tier(enum.Enum):
    """Named only by a task's annotation: a worker rebuilds it from a task run's stored
    arguments because the task names it (``everystep.stored_types``)."""

    GOLD = "gold"


@task
def tiered(tier: Tier) -> str:
    return f"{tier.name}"


@task
def explode(message: str) -> None:
    raise ValueError(f"exploded: {message}")


@task(queue_name="emails")
def notify(address: str) -> str:
    return f"sent to {address}"


@step
def first(label: str) -> str:
    executed(f"{label}:first")
    return "first done"


@step
def second(label: str, gate: str) -> str:
    """Waits until the file ``gate`` exists: a worker can be killed while it waits."""
    executed(f"{label}:second")
    while not Path(gate).exists():
        time.sleep(0.05)
    return "second done"


@task
def two_steps(label: str, gate: str) -> list[str]:
    return [first(label), second(label, gate)]


@step
def shout(word: str) -> str:
    executed(f"shout:{word}")
    return word.upper()


@task
def fan_out(words: list[str]) -> list[str]:
    return parallel(*[lambda word=word: shout(word) for word in words])


@task
def nap(seconds: float) -> str:
    first("nap")
    sleep(seconds)
    return "rested"


@task
def approval(order: int) -> Any:
    return {"order": order, "approval": wait_for("approve", timeout=60)}


@task(takes_context=True)
def introspect(context: Any, tag: str) -> dict[str, Any]:
    return {
        "tag": tag,
        "attempt": context.attempt,
        "id": context.task_result.id,
        "worker_ids": list(context.task_result.worker_ids),
    }


@step
async def lookup_remote(n: int) -> int:
    """An async step, as an async task awaits it."""
    return n * 10


@task
async def async_lookup(n: int) -> int:
    """An ``async def`` task: an async workflow body awaiting an async and a sync step."""
    found = await lookup_remote(n)
    return int(await first_plus_one(found))


@step
def first_plus_one(n: int) -> int:
    return n + 1


@task
def exits(code: int) -> None:
    """Ends its process the way scripts do: a worker fails the run (and so does run_due())."""
    raise SystemExit(code)


@task
def chains(n: int) -> dict[str, str]:
    """Chains tasks the ways Django users do — ``enqueue()``, through ``using()`` too —
    and with ``everystep.start()``, then takes a step: each start is recorded, so a
    replay returns the same ``TaskResult`` and enqueues nothing again (issue 54)."""
    executed("chains:pass")
    child = add.enqueue(n, 1)
    routed = add.using(queue_name="emails").enqueue(n, 2)
    started = start(add, n, 3, scale=2)
    first(f"chains:{n}")
    return {"enqueued": child.id, "routed": routed.id, "started": started.id}


@task
async def achains(n: int) -> dict[str, str]:
    """``chains`` for an async task: ``aenqueue()`` and ``astart()``."""
    child = await add.aenqueue(n, 1)
    started = await astart(add, n, 3, scale=2)
    await first_plus_one(n)
    return {"enqueued": child.id, "started": started.id}


@task
def chain_then_wait(label: str, gate: str) -> str:
    """Enqueues a child task, then waits in a step until ``gate`` exists (a worker can
    be killed there)."""
    child = add.enqueue(1, 2)
    second(label, gate)
    return str(child.id)


@task
def returns_a_set() -> Any:
    """Returns what JSON cannot hold: the run fails with a ``TypeError``."""
    return {1, 2}


def record_finished() -> None:
    """Connect a ``task_finished`` receiver that writes what it heard as an
    ``Execution`` row (``finished:<status>:<exception handled>``), for a test to read
    what a worker process sent (``EVERYSTEP_TEST_RECORD_FINISHED=1``)."""
    import sys

    try:  # Django 6
        from django.tasks.signals import task_finished
    except ImportError:  # Django 5.2: the backport
        from django_tasks.signals import task_finished  # type: ignore[no-redef]

    from django.utils import timezone

    from tests.testapp.models import Execution

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        handled = sys.exc_info()[1]
        name = "none" if handled is None else type(handled).__name__
        Execution.objects.create(
            run_id=task_result.id,
            step=f"finished:{task_result.status}:{name}",
            pid=os.getpid(),
            started_at=timezone.now(),
        )

    task_finished.connect(receiver, weak=False)
