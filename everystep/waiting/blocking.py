"""``result()`` and ``gather()``: inside a body the engine's durable wait
(``everystep.engine.operations.results``); outside one, the calling thread blocks, reading the runs
in autocommit (no transaction is held open while it waits), woken by NOTIFY on
PostgreSQL and by polling elsewhere.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections

from everystep.engine.core.recorded import body_frame
from everystep.engine.operations import results
from everystep.engine.operations.waits import as_delay
from everystep.errors import EverystepError, StoreUnavailable, WaitTimeout
from everystep.models import FINAL_STATUSES, Workflow
from everystep.store import run_waits
from everystep.store.wake import EndedListener
from everystep.sync_callers import refuse_on_event_loop

# Outside a body elsewhere than PostgreSQL: the first look again after 50 ms, then less
# and less often, up to once a second.
_POLL_FIRST, _POLL_MOST = 0.05, 1.0


def result(run: Workflow | uuid.UUID | str, timeout: timedelta | float | None = None) -> Any:
    """``run``'s result once it has ended (see the module docstring)."""
    ids = results.run_ids([run], "result()")
    (outcome,) = _wait(ids, timeout, results.RESULT, "result()")
    return results.value(outcome)


def gather(
    runs: Sequence[Workflow | uuid.UUID | str], timeout: timedelta | float | None = None
) -> list[Any]:
    """The results of ``runs``, in order, once the last has ended; failures raised as
    ``parallel()`` raises them: one itself, several as an ``ExceptionGroup``."""
    ids = results.listed_ids(runs, "gather()", "result()")
    return results.values(_wait(ids, timeout, results.GATHER, "gather()"))


def _wait(
    ids: list[uuid.UUID], timeout: timedelta | float | None, name: str, what: str
) -> list[dict[str, Any]]:
    limit = None if timeout is None else as_delay(timeout, f"{what} timeout")
    frame = body_frame()
    if frame is None:
        refuse_on_event_loop(what, f"await a{what}")
        return _block(ids, limit, what)
    return results.in_body(frame, name, ids, limit, what)


def look_outside(ids: list[uuid.UUID], what: str) -> list[dict[str, Any]] | None:
    """An async waiter's own look, on its caller's thread, at runs the hub could not see
    (``everystep.waiting.waiters``): their outcomes if they have ended, None if they are
    visible to the hub now; an open transaction refused as ``result()`` refuses it, an
    unknown id an error."""
    try:
        ended = results.outcomes(ids, what)
    except StoreUnavailable as exc:
        raise EverystepError(f"{what}: {exc}") from exc
    if ended is not None:
        return ended
    refusal = in_transaction(what)
    if refusal is not None:
        raise EverystepError(refusal)
    return None  # committed since the hub's read: it sees them now


def _block(ids: list[uuid.UUID], limit: timedelta | None, what: str) -> list[dict[str, Any]]:
    """Wait in this thread until every run in ``ids`` has ended. A database that cannot
    be reached is an ``EverystepError`` here (the engine's ``StoreUnavailable`` is for
    passes, and no ``except Exception`` in a view would see it)."""
    try:
        return _poll(ids, limit, what)
    except StoreUnavailable as exc:
        raise EverystepError(f"{what}: {exc}") from exc


def in_transaction(what: str) -> str | None:
    """Why ``what`` must not wait here, if a transaction is open: waiting would hold it
    open until the runs end, and under REPEATABLE READ (MariaDB) or SQLite it never sees
    them end. Any alias: one on the project's own database is as wrong as everystep's."""
    open_ = [conn for conn in connections.all(initialized_only=True) if conn.in_atomic_block]
    if not open_:
        return None
    # Django marks the transactions a TestCase (or pytest-django's ``django_db``) wraps
    # each test in: leaving the caller's own atomic() would not help there.
    if any(getattr(block, "_from_testcase", False) for c in open_ for block in c.atomic_blocks):
        return (
            f"{what} cannot wait inside a transaction, and this test runs inside one (a "
            "TestCase, or pytest's django_db without transaction=True) that no worker can "
            "see into: in a TestCase call everystep.testing.run_due() first, which runs "
            f"the due runs in the test, and {what} then returns at once"
        )
    return (
        f"{what} cannot wait inside a database transaction: it would hold the "
        "transaction open until the runs end (and, with a run scheduled in it, forever, "
        "since no worker sees that run before the commit): call it outside "
        "transaction.atomic() (and ATOMIC_REQUESTS)"
    )


def timed_out(ids: list[uuid.UUID], limit: timedelta | None, what: str) -> WaitTimeout:
    """The ``WaitTimeout`` of a wait outside a body for ``ids``, saying which runs had
    not ended, and which no worker has claimed yet (the usual cause: no worker running,
    or none with the workflow's code)."""
    rows = Workflow.objects.filter(id__in=ids).exclude(status__in=FINAL_STATUSES)
    try:
        open_runs = dict(rows.values_list("id", "started_at"))
    except DatabaseError:  # the timeout stands; only its detail is not known
        open_runs = dict.fromkeys(ids, True)
    unclaimed = [run_id for run_id, started in open_runs.items() if started is None]
    if len(ids) == 1:
        said = f"{what}: run {ids[0]} had not ended within {limit}"
        if unclaimed:
            said += "; no worker has claimed it yet"
    else:
        said = f"{what}: {len(open_runs)} of the {len(ids)} runs had not ended within {limit}"
        if unclaimed:
            said += f"; no worker has claimed {len(unclaimed)} of them yet"
    if unclaimed:
        said += (
            " (is a worker running, manage.py everystep_worker, with this code? "
            "manage.py everystep_runs lists the runs no live worker can carry)"
        )
    return WaitTimeout(said)


def _poll(ids: list[uuid.UUID], limit: timedelta | None, what: str) -> list[dict[str, Any]]:
    ended = results.outcomes(ids, what)
    if ended is not None:
        return ended
    refusal = in_transaction(what)
    if refusal is not None:
        raise EverystepError(refusal)
    deadline = None if limit is None else time.monotonic() + limit.total_seconds()
    with EndedListener() as listener:
        if listener.listening:
            run_waits.mark_awaited(ids)  # so their ends send the NOTIFY it listens for
        pause = _POLL_MOST if listener.listening else _POLL_FIRST
        while True:
            ended = results.outcomes(ids, what)
            if ended is not None:
                return ended
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise timed_out(ids, limit, what)
            # A NOTIFY ends the pause early; the poll stays the correctness path.
            listener.wait(pause if left is None else min(pause, left))
            pause = min(pause * 2, _POLL_MOST)
