"""Durable waits inside a workflow body: ``sleep``, ``sleep_until`` and ``wait_for``;
and ``durable``, the one way a wait for something that comes (an event here, runs to end
in ``everystep.engine.operations.results``) is recorded, replayed, concluded and timed out.

A wait takes a step id like a step. Its first pass records when it ends (the wake time of
a sleep, the deadline of a wait for an event) and the pass stops there with
``Suspended``: the run is released, holding no worker slot, and is claimed again when it
is due or an event wakes it. Each later pass replays the record: a wait whose time has
come returns (a sleep) or takes its event or times out (``wait_for``), durably; one
whose time has not come suspends the run again. So a crash at any point neither loses
a wait nor restarts its clock.

Records: a sleep is a ``done`` step named ``everystep.sleep`` whose result is the wake
time. A wait for an event is ``started`` (result: the event name and the deadline) until
its outcome is known, then ``done`` with the payload or ``failed`` with ``WaitTimeout``
(a wait for runs likewise, with the runs in place of the event). Each is a recorded
operation (``everystep.engine.core.recorded``): reached, decided, written by that path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from everystep import serde, shapes, signals, stored_errors
from everystep.engine.core import kinds
from everystep.engine.core.pass_state import Frame, RunState, current_frame
from everystep.engine.core.recorded import (
    Operation,
    body_frame,
    code_changed,
    conclude,
    reach,
    rebuilt,
    record,
    served,
)
from everystep.engine.core.replay import Decision
from everystep.errors import EverystepError, Suspended, WaitTimeout
from everystep.models import StepStatus
from everystep.store.events import check_event_name, event_payload
from everystep.times import project_time

SLEEP = kinds.SLEEP.record
WAIT = kinds.WAIT_FOR.record


def as_delay(value: timedelta | float, what: str) -> timedelta:
    """A delay or timeout given as a ``timedelta`` or a number of seconds, checked."""
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        delay = timedelta(seconds=value)
    else:
        raise EverystepError(f"{what} must be a timedelta or a number of seconds, got {value!r}")
    if delay < timedelta(0):
        raise EverystepError(f"{what} must not be negative, got {value!r}")
    return delay


def as_instant(when: datetime, what: str) -> datetime:
    """``when`` in the project's form (``everystep.times``): aware with ``USE_TZ``, a naive
    one read in the project's time zone; naive local time without ``USE_TZ``."""
    if not isinstance(when, datetime):
        raise EverystepError(f"{what} must be a datetime, got {when!r}")
    return project_time(when)


def sleep(delay: timedelta | float) -> None:
    """Wait ``delay`` (a ``timedelta`` or seconds) durably, holding no worker slot."""
    wait = as_delay(delay, "sleep() delay")
    _sleep(lambda now: now + wait, "sleep()")


def sleep_until(when: datetime) -> None:
    """Wait until ``when`` durably (at or after it), holding no worker slot."""
    instant = as_instant(when, "sleep_until() time")
    _sleep(lambda now: instant, "sleep_until()")


def wait_for(name: str, timeout: timedelta | float | None = None, type: Any = None) -> Any:
    """Wait durably for the event ``name`` sent to this run with ``everystep.send``; return
    its payload (rebuilt as ``type``, an annotation, says), or raise ``WaitTimeout`` once
    ``timeout`` has passed without it."""
    check_event_name(name)
    limit = None if timeout is None else as_delay(timeout, "wait_for() timeout")
    op = reach(durable_frame("wait_for()", "await_for()"), WAIT)
    return waited_for(op, name, limit, shapes.of(type))


def waited_for(
    op: Operation, name: str, limit: timedelta | None, shape: shapes.Shape | None = None
) -> Any:
    """The wait for the event ``name`` reached as ``op`` (``wait_for``, ``await_for``);
    its payload rebuilt as ``shape`` says. A payload that does not fit fails the run."""
    awaited = Awaited(
        args=[name],
        holds={"event": name},
        shown=lambda holds: f"wait_for({holds.get('event')!r})",
        look=lambda: event_payload(op.run.run_id, name),
        timed_out=f"no event {name!r} was sent to run {op.run.run_id} before the timeout",
        events=frozenset({name}),
    )
    return rebuilt(op, durable(op, awaited, limit), shape, f"the payload of event {name!r}")


@dataclass(frozen=True)
class Awaited:
    """What one durable wait waits for (an event, or runs to end), for ``durable``."""

    args: list[Any]  # the record's arguments
    holds: dict[str, Any]  # what its ``started`` record holds, beside the deadline
    shown: Callable[[dict[str, Any]], str]  # such a record, named in a WorkflowCodeError
    look: Callable[[], tuple[bool, Any]]  # has it come, and the result recorded if so
    timed_out: str  # the ``WaitTimeout``'s message
    events: frozenset[str] = frozenset()
    runs: frozenset[Any] = frozenset()  # a wait for runs: its RunWait rows go with it


def durable(op: Operation, awaited: Awaited, limit: timedelta | None) -> Any:
    """The one durable wait (``wait_for``, ``result``, ``gather``), reached as ``op``: the
    result recorded for it (as stored: the caller decodes it), or its recorded timeout
    raised; ``Suspended`` while it has not come. A first pass records ``done`` at once if
    it has come, else ``started`` with ``awaited.holds`` and the deadline; a later pass
    that finds it come, or its deadline passed, concludes that record."""
    run, now = op.run, timezone.now()
    if op.decision is Decision.EXECUTE:
        deadline = None if limit is None else now + limit
        come, result = awaited.look()
        if come:
            record(run, op.step_id, op.name, StepStatus.DONE, args=awaited.args, result=result)
            return result
        if deadline is not None and deadline <= now:
            raise _time_out(op, awaited, None)
        holds = {**awaited.holds, "deadline": serde.encode(deadline)}
        record(run, op.step_id, op.name, StepStatus.STARTED, args=awaited.args, result=holds)
        # Every run, not those still running now: one may end before the run is released,
        # and releasing decides which to wait for under their locks (``store.run_waits``).
        raise Suspended(deadline, awaited.events, awaited.runs)
    assert op.recorded is not None
    if op.decision is not Decision.PENDING:
        return op.recorded.result if op.decision is Decision.SERVE_RESULT else served(op)
    holds = op.recorded.result or {}
    if any(holds.get(key) != value for key, value in awaited.holds.items()):
        shown = awaited.shown
        raise run.abort(code_changed(run, op.step_id, shown(holds), shown(awaited.holds)))
    deadline = recorded_time(holds.get("deadline"))
    come, result = awaited.look()
    if come:
        woken(run, op.step_id, now)
        conclude(
            run,
            op.step_id,
            op.name,
            StepStatus.DONE,
            result=result,
            awaited_runs=bool(awaited.runs),
        )
        return result
    if deadline is not None and deadline <= now:
        woken(run, op.step_id, now, deadline)
        raise _time_out(op, awaited, deadline)
    raise Suspended(deadline, awaited.events, awaited.runs)


def _sleep(wake_time: Any, what: str) -> None:
    slept(reach(durable_frame(what, f"a{what}"), SLEEP), wake_time)


def slept(op: Operation, wake_time: Callable[[datetime], datetime]) -> None:
    """The sleep reached as ``op`` (``sleep``, ``asleep``…): recorded with the wake time
    ``wake_time(now)`` on its first pass; ``Suspended`` until that time has come."""
    now = timezone.now()
    if op.decision is Decision.EXECUTE:
        wake = wake_time(now)
        record(op.run, op.step_id, op.name, StepStatus.DONE, result=serde.encode(wake))
        if wake > now:
            raise Suspended(wake)
        return
    assert op.recorded is not None  # a sleep's record is always done: its wake time
    recorded = recorded_time(op.recorded.result)
    assert recorded is not None
    if recorded > now:
        raise Suspended(recorded)
    woken(op.run, op.step_id, now, recorded)


def recorded_time(encoded: Any) -> datetime | None:
    """A time a wait recorded, in the project's form: a record written while the project
    had the other USE_TZ still compares."""
    value = serde.decode(encoded)
    return None if value is None else project_time(value)


def durable_frame(what: str, twin: str | None = None) -> Frame:
    """The body frame a durable wait needs, or why ``what`` cannot wait here (``twin``:
    its awaitable twin, named to an async body calling the sync one)."""
    frame = body_frame()
    if frame is not None:
        if twin is not None:
            sync_only(frame, what, twin)
        return frame
    if current_frame.get() is None:
        raise EverystepError(f"{what} is only durable inside a running workflow body")
    raise EverystepError(
        f"{what} inside a step body cannot be durable; call it from the workflow body"
    )


def sync_only(frame: Frame, what: str, twin: str) -> None:
    """Refuse a sync operation in an async body: it would block the event loop, and
    Django's ORM refuses to run there (``SynchronousOnlyOperation``)."""
    if frame.run.is_async:
        raise frame.run.abort(
            EverystepError(f"{what} cannot be called in an async workflow body: use await {twin}")
        )


def woken(run: RunState, step_id: str, now: datetime, wake: datetime | None = None) -> None:
    """Report how late the run woke, when this pass is the wake-up the run was released
    for (its due time was this wait's end, or an event made it due)."""
    due = run.claim.due_at
    if run.checking or due is None or (wake is not None and due != wake):
        return
    signals.run_woken.emit(
        sender=RunState,
        run_id=run.run_id,
        workflow=run.workflow_name,
        runner=run.claim.runner,
        step_id=step_id,
        lateness=max((now - due).total_seconds(), 0.0),
    )


def _time_out(op: Operation, awaited: Awaited, deadline: datetime | None) -> WaitTimeout:
    """The wait's ``WaitTimeout``, recorded: ``failed`` at once (``deadline`` None: the
    first pass found it passed), or its ``started`` record concluded so."""
    run = op.run
    error = WaitTimeout(awaited.timed_out)
    encoded = stored_errors.encode_error(error)
    if deadline is None:
        record(run, op.step_id, op.name, StepStatus.FAILED, args=awaited.args, error=encoded)
    else:
        conclude(
            run,
            op.step_id,
            op.name,
            StepStatus.FAILED,
            error=encoded,
            awaited_runs=bool(awaited.runs),
        )
    return error
