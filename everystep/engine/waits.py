"""Durable waits inside a workflow body: ``sleep``, ``sleep_until`` and ``wait_for``.

A wait takes a step id like a step. Its first pass records when it ends (the wake time of
a sleep, the deadline of a wait for an event) and the pass stops there with
``Suspended``: the run is released, holding no worker slot, and is claimed again when it
is due or an event wakes it. Each later pass replays the record: a wait whose time has
come returns (a sleep) or takes its event or times out (``wait_for``), durably; one
whose time has not come suspends the run again. So a crash at any point neither loses
a wait nor restarts its clock.

Records: a sleep is a ``done`` step named ``everystep.sleep`` whose result is the wake
time. A wait for an event is ``started`` (result: the event name and the deadline) until
its outcome is known, then ``done`` with the payload or ``failed`` with ``WaitTimeout``.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from everystep import serde, signals, stored_errors
from everystep.engine.pass_state import Frame, RunState, current_frame
from everystep.engine.recorded import Operation, body_frame, conclude, reach, record, served
from everystep.engine.replay import Decision
from everystep.errors import EverystepError, Suspended, WaitTimeout, WorkflowCodeError
from everystep.models import StepStatus
from everystep.store.events import check_event_name, event_payload
from everystep.times import project_time

SLEEP = "everystep.sleep"
WAIT = "everystep.wait_for"


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


def wait_for(name: str, timeout: timedelta | float | None = None) -> Any:
    """Wait durably for the event ``name`` sent to this run with ``everystep.send``; return
    its payload, or raise ``WaitTimeout`` once ``timeout`` has passed without it."""
    check_event_name(name)
    limit = None if timeout is None else as_delay(timeout, "wait_for() timeout")
    op = reach(durable_frame("wait_for()"), WAIT, waits=True)
    run = op.run
    now = timezone.now()
    if op.decision is Decision.EXECUTE:
        deadline = None if limit is None else now + limit
        sent, payload = event_payload(run.run_id, name)
        if sent:
            record(run, op.step_id, WAIT, StepStatus.DONE, args=[name], result=payload)
            return serde.decode(payload)
        if deadline is not None and deadline <= now:
            raise _time_out(op, name, None)
        pending = {"event": name, "deadline": serde.encode(deadline)}
        record(run, op.step_id, WAIT, StepStatus.STARTED, args=[name], result=pending)
        raise Suspended(deadline, frozenset({name}))
    if op.decision is not Decision.PENDING:
        return served(op)
    assert op.recorded is not None
    pending = op.recorded.result or {}
    if pending.get("event") != name:
        raise run.abort(
            WorkflowCodeError(
                f"run {run.run_id}: step {op.step_id} waits for event "
                f"{pending.get('event')!r} in its record but the workflow now waits for "
                f"{name!r}; the code changed incompatibly",
                step_id=op.step_id,
                recorded=f"wait_for({pending.get('event')!r})",
                called=f"wait_for({name!r})",
            )
        )
    deadline = recorded_time(pending.get("deadline"))
    sent, payload = event_payload(run.run_id, name)
    if sent:
        woken(run, op.step_id, now)
        conclude(run, op.step_id, WAIT, StepStatus.DONE, result=payload)
        return serde.decode(payload)
    if deadline is not None and deadline <= now:
        woken(run, op.step_id, now, deadline)
        raise _time_out(op, name, deadline)
    raise Suspended(deadline, frozenset({name}))


def _sleep(wake_time: Any, what: str) -> None:
    op = reach(durable_frame(what), SLEEP)
    now = timezone.now()
    if op.decision is Decision.EXECUTE:
        wake = wake_time(now)
        record(op.run, op.step_id, SLEEP, StepStatus.DONE, result=serde.encode(wake))
        if wake > now:
            raise Suspended(wake)
        return
    assert op.recorded is not None  # a sleep's record is always done: its wake time
    wake = recorded_time(op.recorded.result)
    assert wake is not None
    if wake > now:
        raise Suspended(wake)
    woken(op.run, op.step_id, now, wake)


def recorded_time(encoded: Any) -> datetime | None:
    """A time a wait recorded, in the project's form: a record written while the project
    had the other USE_TZ still compares."""
    value = serde.decode(encoded)
    return None if value is None else project_time(value)


def durable_frame(what: str) -> Frame:
    """The body frame a durable wait needs, or why ``what`` cannot wait here."""
    frame = body_frame()
    if frame is not None:
        return frame
    if current_frame.get() is None:
        raise EverystepError(f"{what} is only durable inside a running workflow body")
    raise EverystepError(
        f"{what} inside a step body cannot be durable; call it from the workflow body"
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


def _time_out(op: Operation, name: str, deadline: datetime | None) -> WaitTimeout:
    run = op.run
    error = WaitTimeout(f"no event {name!r} was sent to run {run.run_id} before the timeout")
    encoded = stored_errors.encode_error(error)
    if deadline is None:
        record(run, op.step_id, WAIT, StepStatus.FAILED, args=[name], error=encoded)
    else:
        conclude(run, op.step_id, WAIT, StepStatus.FAILED, error=encoded)
    return error
