"""Waiting for runs to end: ``result()`` and ``gather()``.

Inside a running body the wait is durable, written as ``wait_for`` is (one helper,
``everystep.engine.waits.durable``): one recorded operation (``everystep.result`` or
``everystep.gather``) that takes a position. If every awaited run has ended when it is
reached, their outcomes are recorded (``done``) at once; otherwise it records
``started`` (the runs, the deadline) and the pass stops with ``Suspended``: the run is
released, holding no worker slot, until the last of those runs ends
(``everystep.store.run_waits`` wakes it then, once) or the deadline passes. The pass that
finds them ended concludes the record with their outcomes; a deadline passed concludes
it ``failed`` with ``WaitTimeout``. Either way the run's ``RunWait`` rows go with the
record's conclusion (``everystep.store.step_records``). Replays serve the record.

Outside a body the call blocks the calling thread, reading the runs in autocommit (no
transaction is held open while it waits), woken by NOTIFY on PostgreSQL and by polling
elsewhere.

An outcome, as the caller sees it (``value``): a completed run's result; a failed run's
exception, rebuilt as on replay; ``RunStopped`` for a stopped run (its reason and
payload); ``RunCancelled`` for a cancelled one. A ``blocked`` run has not ended: it is
waited through.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import connections

from everystep import serde, stored_errors
from everystep.engine.parallel import raise_failures
from everystep.engine.recorded import Operation, body_frame, reach
from everystep.engine.waits import Awaited, as_delay, durable, sync_only
from everystep.errors import (
    EverystepError,
    RunCancelled,
    RunStopped,
    StoreUnavailable,
    WaitTimeout,
)
from everystep.models import FINAL_STATUSES, Status, Workflow
from everystep.store import run_waits
from everystep.store.wake import EndedListener

RESULT = "everystep.result"
GATHER = "everystep.gather"
# Outside a body elsewhere than PostgreSQL: the first look again after 50 ms, then less
# and less often, up to once a second.
_POLL_FIRST, _POLL_MOST = 0.05, 1.0


def run_ids(runs: Sequence[Workflow | uuid.UUID | str], what: str) -> list[uuid.UUID]:
    """The ids of ``runs`` (``Workflow`` rows or ids), checked."""
    ids = []
    for run in runs:
        value = run.pk if isinstance(run, Workflow) else run
        try:
            ids.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise EverystepError(f"{what}: not a run id: {str(value)[:60]!r}") from None
    return ids


def result(run: Workflow | uuid.UUID | str, timeout: timedelta | float | None = None) -> Any:
    """``run``'s result once it has ended (see the module docstring)."""
    (outcome,) = _wait(run_ids([run], "result()"), timeout, RESULT, "result()")
    return value(outcome)


def gather(
    runs: Sequence[Workflow | uuid.UUID | str], timeout: timedelta | float | None = None
) -> list[Any]:
    """The results of ``runs``, in order, once the last has ended; failures raised as
    ``parallel()`` raises them: one itself, several as an ``ExceptionGroup``."""
    ids = listed_ids(runs, "gather()", "result()")
    return values(_wait(ids, timeout, GATHER, "gather()"))


def listed_ids(runs: Sequence[Workflow | uuid.UUID | str], what: str, one: str) -> list[uuid.UUID]:
    """The ids of a list of runs given to ``what``; one run alone is refused, naming
    ``one``, the call for it."""
    if isinstance(runs, str | bytes | Workflow | uuid.UUID):
        raise EverystepError(f"{what} takes a list of runs; for one run use {one}")
    return run_ids(list(runs), what)


def values(outcomes: list[dict[str, Any]]) -> list[Any]:
    """What ended runs give their waiter together (``gather``, ``agather``): their
    results in order, or their failures raised."""
    results, failures = [], []
    for outcome in outcomes:
        try:
            results.append(value(outcome))
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise_failures(failures, "gathered runs")
    return results


def value(outcome: dict[str, Any]) -> Any:
    """What an ended run gives its waiter: its result, or its failure raised."""
    status, error = outcome["status"], outcome.get("error") or {}
    if status == Status.COMPLETED:
        try:
            return serde.decode(outcome.get("result"))
        except EverystepError:
            raise
        except Exception as exc:  # a value stored before a deploy renamed its type, say
            raise EverystepError(
                f"the result of run {outcome['run']} cannot be rebuilt: {exc!r}"
            ) from exc
    if status == Status.STOPPED:
        raise RunStopped(error.get("reason", error.get("message", "")), _payload(error))
    if status == Status.CANCELLED:
        raise RunCancelled(f"run {outcome['run']} was cancelled: {error.get('message', '')}")
    raise stored_errors.decode_error(error)


def _payload(error: dict[str, Any]) -> Any:
    try:
        return serde.decode(error.get("payload"))
    except EverystepError:  # a payload whose type is gone: shown as stored
        return error.get("payload")


def _wait(
    ids: list[uuid.UUID], timeout: timedelta | float | None, name: str, what: str
) -> list[dict[str, Any]]:
    limit = None if timeout is None else as_delay(timeout, f"{what} timeout")
    frame = body_frame()
    if frame is None:
        return _block(ids, limit, what)
    sync_only(frame, what, f"a{what}")
    return awaited_runs(reach(frame, name, waits=True), ids, limit, what)


def _outcomes(ids: list[uuid.UUID], what: str) -> list[dict[str, Any]] | None:
    """The outcomes of ``ids`` in order if all have ended, else None; an unknown id is
    an ``EverystepError``."""
    return ended_outcomes(run_waits.outcomes(ids), ids, what)


def ended_outcomes(
    found: dict[uuid.UUID, tuple[str, Any, Any]], ids: list[uuid.UUID], what: str
) -> list[dict[str, Any]] | None:
    """The outcomes of ``ids`` in order if all have ended, else None, from what
    ``run_waits.outcomes`` read; an id it did not find is an ``EverystepError``."""
    missing = [str(run) for run in ids if run not in found]
    if missing:
        raise EverystepError(f"{what}: no run with id {', '.join(missing[:3])}")
    if any(found[run][0] not in FINAL_STATUSES for run in ids):
        return None
    return [
        {"run": str(run), "status": found[run][0], "result": found[run][1], "error": found[run][2]}
        for run in ids
    ]


def look_outside(ids: list[uuid.UUID], what: str) -> list[dict[str, Any]] | None:
    """An async waiter's own look, on its caller's thread, at runs the hub could not see
    (``everystep.engine.waiters``): their outcomes if they have ended, None if they are
    visible to the hub now; an open transaction refused as ``result()`` refuses it, an
    unknown id an error."""
    try:
        ended = _outcomes(ids, what)
    except StoreUnavailable as exc:
        raise EverystepError(f"{what}: {exc}") from exc
    if ended is not None:
        return ended
    refusal = in_transaction(what)
    if refusal is not None:
        raise EverystepError(refusal)
    return None  # committed since the hub's read: it sees them now


def awaited_runs(
    op: Operation, ids: list[uuid.UUID], limit: timedelta | None, what: str
) -> list[dict[str, Any]]:
    """The durable wait for runs ``ids`` reached as ``op`` (``result``, ``aresult``…)."""
    wanted = [str(run_id) for run_id in ids]

    def look() -> tuple[bool, list[dict[str, Any]] | None]:
        ended = _outcomes(ids, what)
        return ended is not None, ended

    awaited = Awaited(
        args=wanted,
        holds={"runs": wanted},
        shown=lambda holds: f"{what} of {_named(holds.get('runs') or [])}",
        look=look,
        timed_out=f"{what}: the awaited runs of run {op.run.run_id} had not ended in time",
        runs=frozenset(ids),
    )
    return list(durable(op, awaited, limit))


def _named(runs: list[str]) -> str:
    """Runs awaited, for a message: a thousand ids are not spelled out."""
    if len(runs) == 1:
        return f"run {runs[0]}"
    return f"{len(runs)} runs" + (f" from {runs[0]}" if runs else "")


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


def _poll(ids: list[uuid.UUID], limit: timedelta | None, what: str) -> list[dict[str, Any]]:
    ended = _outcomes(ids, what)
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
            ended = _outcomes(ids, what)
            if ended is not None:
                return ended
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(f"{what}: the runs had not ended within {limit}")
            # A NOTIFY ends the pause early; the poll stays the correctness path.
            listener.wait(pause if left is None else min(pause, left))
            pause = min(pause * 2, _POLL_MOST)
