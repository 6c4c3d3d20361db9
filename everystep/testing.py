"""Helpers for testing your own workflows.

``run_due()`` runs every due workflow to completion in the test process, the way a
worker named ``runner`` would: first it resumes the runs a crashed previous "process"
of that name left ``running`` (startup catchup), then it claims and runs scheduled runs
until none is left.

``crash_after(step)`` makes the process "die" right after a step's side effect and
before its outcome is recorded, leaving the run ``running`` exactly as a killed worker
would; the next ``run_due()`` resumes it, so you can check that your step is safe to
run twice::

    with crash_after(charge_card):
        run_due()            # charge_card ran, its record did not land
    run_due()                # resumed: charge_card runs again; earlier steps are served

Workflows that use ``parallel()`` run their branches in threads, which cannot see the
rows of a test wrapped in a transaction: there the branches run inline instead. Use
``TransactionTestCase`` / ``pytest.mark.django_db(transaction=True)`` to exercise real
concurrency.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from everystep import store
from everystep.engine import steps
from everystep.engine.execute import run_pass
from everystep.models import Workflow

DEFAULT_RUNNER = "everystep-testing"


def run_due(*, runner: str = DEFAULT_RUNNER, max_passes: int = 10_000) -> list[Workflow]:
    """Resume this runner's parked runs, then run every scheduled run until none is due.

    Returns the runs that were passed over, refreshed from the database, in order.
    """
    seen: dict[Any, None] = {}
    passes = 0
    queue = store.reclaim_parked(runner)
    while passes < max_passes:
        if not queue:
            queue = store.claim_due(runner, 1)
            if not queue:
                break
        current = queue.pop(0)
        run_pass(current)
        seen[current.run_id] = None
        passes += 1
    return [run for run_id in seen if (run := store.get_run(run_id)) is not None]


@contextlib.contextmanager
def crash_after(target: Callable[..., Any] | str, *, times: int = 1) -> Iterator[None]:
    """Simulate a crash after ``target``'s side effect, before its record.

    ``target`` is a ``@step`` function or a step id. The crash happens ``times`` times
    (once by default), then the step behaves normally again.
    """
    defn = getattr(target, "__everystep_step__", None)
    if defn is None and not isinstance(target, str):
        raise TypeError(f"crash_after() needs a @step function or a step id, got {target!r}")
    remaining = [times]
    lock = threading.Lock()

    def point(step_id: str, name: str) -> bool:
        matches = step_id == target if defn is None else name == defn.name
        with lock:
            if matches and remaining[0] > 0:
                remaining[0] -= 1
                return True
        return False

    steps.add_crash_point(point)
    try:
        yield
    finally:
        steps.remove_crash_point(point)
