"""Helpers for testing your own workflows.

``run_due()`` runs every due workflow to completion in the test process, the way a
worker named ``runner`` would: first it resumes the runs a crashed previous "process"
of that name left ``running`` (startup catchup), then it claims and runs scheduled runs
until none is left.

``run_due(advance=...)`` first lets time pass, without waiting for it: every pending
time of the unfinished runs (a delayed start, a sleep's wake time, a wait's deadline)
moves that much earlier, so a sleep of three days or a ``wait_for`` timeout is over in
the test. The engine keeps reading the real clock; only the stored times move, and
each call moves them by its own amount. Time passes before the runs do: a sleep a run
has not reached yet is not shortened, so let the run get there first::

    run = schedule(remind, 7)       # sleeps three days, then waits a week for "paid"
    run_due()                                  # the run starts and sleeps
    run_due(advance=timedelta(days=3))         # the reminder goes out; now waiting
    run_due(advance=timedelta(days=7))         # the wait times out

``crash_after(step)`` makes the process "die" right after a step's side effect and
before its outcome is recorded, leaving the run ``running`` exactly as a killed worker
would; the next ``run_due()`` resumes it, so you can check that your step is safe to
run twice::

    with crash_after(charge_card):
        run_due()            # charge_card ran, its record did not land
    run_due()                # resumed: charge_card runs again; earlier steps are served

``crash_at(point, target=None)`` is the general form, for the other moments a worker
can die at. ``point`` is one of ``CRASH_POINTS``:

- ``"before_body"``: a step is about to run its body (nothing of it is recorded, except
  the ``started`` row of an ``unsafe_to_repeat`` step);
- ``"after_body"``: the body returned or raised, its outcome is not recorded
  (``crash_after``);
- ``"after_record"``: the step's outcome is recorded, the body has not seen it yet (also
  after the record of any other recorded operation: a sleep, a wait, a patch decision,
  a child's start, a wait for runs — targeted by its step id);
- ``"before_finish"``: the workflow body is done, the run's outcome is not written.

``target`` is a ``@step`` function or a step id (``None``: the first step to get
there); for ``"before_finish"`` it is a ``@workflow`` function or ``None``. The context
manager gives a ``Crash`` whose ``fired`` lists where it "killed" the process::

    with crash_at("after_record", "fan.1.2") as crash:
        run_due()
    assert crash.fired == ["fan.1.2"]

``deployed(workflow, new_body)`` swaps a workflow's code for a new version while the
runs of the old one are still in flight, so a test shows what a deploy would do to
them — with ``patched()`` the old runs keep their branch::

    run = schedule(order, 7)
    run_due()                       # under the old code: parked at a wait_for()
    with deployed(order, order_v2):
        send(run.id, "paid")
        run_due()                   # the old run replays order_v2's body

Workflows that use ``parallel()`` run their branches in threads, which cannot see the
rows of a test wrapped in a transaction: there the branches run inline instead. Use
``TransactionTestCase`` / ``pytest.mark.django_db(transaction=True)`` to exercise real
concurrency.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from everystep import registry
from everystep.engine.core import crashes, kinds
from everystep.engine.execute import run_pass
from everystep.engine.operations import waits
from everystep.errors import EverystepError
from everystep.models import Workflow
from everystep.store.claims import claim_due, next_due, reclaim_parked
from everystep.store.runs import get_run
from everystep.store.timeshift import shift_pending
from everystep.values import Claim
from everystep.worker import carrying

DEFAULT_RUNNER = "everystep-testing"
# Far beyond any test, and short enough that a time moved earlier stays one every
# database stores (MariaDB's DATETIME starts at year 1000).
MAX_ADVANCE = timedelta(days=36_525)


def run_due(
    *,
    runner: str = DEFAULT_RUNNER,
    max_passes: int = 10_000,
    advance: timedelta | float | None = None,
) -> list[Workflow]:
    """Resume this runner's parked runs, then run every scheduled run until none is due.

    With ``advance`` (a ``timedelta`` or seconds), first move every pending time of the
    unfinished runs that much earlier, as if it had passed. Returns the runs that were
    passed over, refreshed from the database, in order.
    """
    if advance is not None:
        elapsed = _advance(advance)
        if elapsed:
            # Every durable wait with a time, as the table of kinds declares them.
            shift_pending(elapsed, wake_times=kinds.wake_times(), deadlines=kinds.deadlines())
    seen: dict[Any, None] = {}
    passes = 0
    queue = reclaim_parked(runner)
    while passes < max_passes:
        if not queue:
            queue = _claim_one(runner)
            if not queue:
                break
        current = queue.pop(0)
        _pass(current)
        seen[current.run_id] = None
        passes += 1
    return [run for run_id in seen if (run := get_run(run_id)) is not None]


# How often run_due() runs a pass again that the database interrupted, as a worker does.
PASS_TRIES = 3


def _pass(claim: Claim) -> None:
    """One pass over ``claim``'s run. One the database interrupted (``retry``) runs again
    under the same claim, as a worker runs it; if it cannot complete, the test hears why
    rather than find the run ``running`` later."""
    for attempt in range(1, PASS_TRIES + 1):
        ended = run_pass(claim)
        if ended.status != "retry":
            return
        if attempt < PASS_TRIES:
            time.sleep(0.05 * attempt)
    raise EverystepError(
        f"run_due(): the pass over run {claim.run_id} could not reach the database "
        f"{PASS_TRIES} times ({ended.exc}); the run is left running, claimed by "
        f"{claim.runner}"
    ) from ended.exc


# How long run_due() waits for a due run whose row another connection holds.
LOCKED_PATIENCE = 2.0


def _claim_one(runner: str) -> list[Claim]:
    """One due run, or none. A claim skips rows other connections hold (SKIP LOCKED),
    and a run a waiter is marking, or a worker is releasing, is held for an instant:
    when the claim comes back empty while a run is due, look again for a moment rather
    than leave that run ``scheduled`` behind the test's back."""
    mine = carrying.current()  # as a worker on this code would claim
    deadline = time.monotonic() + LOCKED_PATIENCE
    pause = 0.005
    while True:
        claimed = claim_due(runner, 1, mine)
        if claimed or time.monotonic() >= deadline:
            return claimed
        due = next_due(mine)
        if due is None or due > timezone.now():
            return claimed
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _advance(value: timedelta | float) -> timedelta:
    """``run_due()``'s ``advance``, checked like every delay, and at most a century."""
    try:
        elapsed = waits.as_delay(value, "run_due() advance")
    except OverflowError:  # a number of seconds no timedelta holds
        elapsed = MAX_ADVANCE + timedelta(days=1)
    if elapsed > MAX_ADVANCE:
        raise EverystepError(
            f"run_due() advance must be at most {MAX_ADVANCE.days} days, got {value!r}"
        )
    return elapsed


CRASH_POINTS = ("before_body", "after_body", "after_record", "before_finish")


@dataclass
class Crash:
    """A crash installed by ``crash_at``: ``fired`` lists the step ids it happened at
    (the workflow name for ``"before_finish"``), in order."""

    point: str
    fired: list[str] = field(default_factory=list)


@contextlib.contextmanager
def crash_at(
    point: str, target: Callable[..., Any] | str | None = None, *, times: int = 1
) -> Iterator[Crash]:
    """Simulate a worker dying at ``point`` (one of ``CRASH_POINTS``) of ``target``.

    The crash happens ``times`` times (once by default), then everything behaves
    normally again. Safe to use with forks: branches running in threads share it.
    """
    if point not in CRASH_POINTS:
        raise ValueError(
            f"crash_at() point must be one of {', '.join(CRASH_POINTS)}, got {point!r}"
        )
    matches = _matcher(point, target)
    crash = Crash(point)
    lock = threading.Lock()

    def hook(where: str, step_id: str, name: str) -> bool:
        if where != point or not matches(step_id, name):
            return False
        with lock:  # branch threads ask concurrently: only `times` of them may die
            if len(crash.fired) >= times:
                return False
            crash.fired.append(step_id or name)
            return True

    crashes.add_crash_point(hook)
    try:
        yield crash
    finally:
        crashes.remove_crash_point(hook)


def _matcher(point: str, target: Callable[..., Any] | str | None) -> Callable[[str, str], bool]:
    """Whether a (step id, name) pair is ``target``'s, at ``point``."""
    if target is None:
        return lambda step_id, name: True
    kind = "__everystep_workflow__" if point == "before_finish" else "__everystep_step__"
    defn = getattr(target, kind, None)
    if defn is not None:
        return lambda step_id, name: name == defn.name
    if isinstance(target, str) and point != "before_finish":
        return lambda step_id, name: step_id == target
    expected = (
        "a @workflow function" if point == "before_finish" else "a @step function or a step id"
    )
    raise TypeError(f"crash_at({point!r}) needs {expected} or None, got {target!r}")


@contextlib.contextmanager
def crash_after(target: Callable[..., Any] | str, *, times: int = 1) -> Iterator[Crash]:
    """Simulate a crash after ``target``'s side effect, before its record.

    ``target`` is a ``@step`` function or a step id. The crash happens ``times`` times
    (once by default), then the step behaves normally again.
    """
    if getattr(target, "__everystep_step__", None) is None and not isinstance(target, str):
        raise TypeError(f"crash_after() needs a @step function or a step id, got {target!r}")
    with crash_at("after_body", target, times=times) as crash:
        yield crash


@contextlib.contextmanager
def deployed(workflow_fn: Callable[..., Any], new_body: Callable[..., Any]) -> Iterator[None]:
    """Within the block, the runs of ``workflow_fn`` (a ``@workflow``) replay ``new_body``
    instead, as after a deploy of new code under the same workflow name; ``new_body``
    is a plain function with the same parameters (not itself a ``@workflow``)."""
    defn = registry.workflow_def(workflow_fn)
    if defn is None:
        raise TypeError(f"deployed() needs a @workflow function, got {workflow_fn!r}")
    previous = registry.replace(defn.name, new_body)
    try:
        yield
    finally:
        registry.restore(defn.name, previous)
