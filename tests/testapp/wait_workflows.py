"""Workflows that sleep and wait for events. Every step body logs an ``Execution`` row,
so tests count executions across worker processes."""

from __future__ import annotations

import os
from typing import Any

from django.utils import timezone

from everystep import parallel, sleep, sleep_until, step, wait_for, workflow
from everystep.context import current
from everystep.errors import WaitTimeout


def executed(label: str) -> None:
    from tests.testapp.models import Execution

    ctx = current()
    assert ctx is not None
    now = timezone.now()
    Execution.objects.create(
        run_id=ctx.workflow_id, step=label, pid=os.getpid(), started_at=now, finished_at=now
    )


@step
def mark(label: str) -> str:
    executed(label)
    return label


@step
def stamp(label: str) -> str:
    """The time this step body ran, as ISO text."""
    executed(label)
    return timezone.now().isoformat()


@workflow
def napper(seconds: float) -> list[str]:
    """Before, a durable sleep, after: the two stamps show the gap."""
    before = stamp("before")
    sleep(seconds)
    return [before, stamp("after")]


@workflow
def nap_until(iso: str) -> str:
    from datetime import datetime

    sleep_until(datetime.fromisoformat(iso))
    return stamp("after")


@workflow
def approval(order: int, timeout: float | None) -> dict[str, Any]:
    """An approval flow: ask, wait for the decision (or give up), then act on it."""
    mark(f"ask-{order}")
    try:
        decision = wait_for("approval", timeout=timeout)
    except WaitTimeout:
        mark("expired")
        return {"order": order, "outcome": "expired"}
    mark("apply")
    return {"order": order, "outcome": "approved", "decision": decision}


@workflow
def fork_waits(seconds: float, timeout: float) -> list[Any]:
    """One branch waits for an event, the other sleeps; then a last step."""
    got, slept = parallel(
        lambda: wait_for("go", timeout=timeout),
        lambda: (sleep(seconds), mark("slept"))[1],
    )
    return [got, slept, mark("joined")]


@workflow
def right_away(x: int) -> int:
    mark("right-away")
    return x
