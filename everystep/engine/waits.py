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
import time
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from everystep import serde, signals, store
from everystep.engine import steps
from everystep.engine.state import Frame, RunState, current_frame
from everystep.errors import EverystepError, Suspended, WaitTimeout, WorkflowCodeError
from everystep.models import StepStatus
from everystep.times import project_time
from everystep.values import RecordedStep

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
    store.check_event_name(name)
    limit = None if timeout is None else as_delay(timeout, "wait_for() timeout")
    frame, step_id = _position("wait_for()")
    run = frame.run
    recorded = run.recorded(step_id)
    now = timezone.now()
    if recorded is None:
        deadline = None if limit is None else now + limit
        sent, payload = store.event_payload(run.run_id, name)
        if sent:
            _record(run, step_id, WAIT, [name], StepStatus.DONE, result=payload)
            return serde.decode(payload)
        if deadline is not None and deadline <= now:
            raise _time_out(run, step_id, name, None)
        pending = {"event": name, "deadline": serde.encode(deadline)}
        _record(run, step_id, WAIT, [name], StepStatus.STARTED, result=pending)
        raise Suspended(deadline, frozenset({name}))
    _check(run, step_id, recorded, WAIT)
    if recorded.status == StepStatus.DONE:
        return serde.decode(recorded.result)
    if recorded.status == StepStatus.FAILED:
        assert recorded.error is not None
        raise serde.decode_error(recorded.error)
    pending = recorded.result or {}
    if pending.get("event") != name:
        raise run.abort(
            WorkflowCodeError(
                f"run {run.run_id}: step {step_id} waits for event {pending.get('event')!r} "
                f"in its record but the workflow now waits for {name!r}; the code changed "
                "incompatibly",
                step_id=step_id,
                recorded=f"wait_for({pending.get('event')!r})",
                called=f"wait_for({name!r})",
            )
        )
    deadline = _recorded_time(pending.get("deadline"))
    sent, payload = store.event_payload(run.run_id, name)
    if sent:
        _woken(run, step_id, now)
        _settle(run, step_id, StepStatus.DONE, result=payload)
        return serde.decode(payload)
    if deadline is not None and deadline <= now:
        _woken(run, step_id, now, deadline)
        raise _time_out(run, step_id, name, deadline)
    raise Suspended(deadline, frozenset({name}))


def _sleep(wake_time: Any, what: str) -> None:
    frame, step_id = _position(what)
    run = frame.run
    recorded = run.recorded(step_id)
    now = timezone.now()
    if recorded is None:
        wake = wake_time(now)
        _record(run, step_id, SLEEP, [], StepStatus.DONE, result=serde.encode(wake))
        if wake > now:
            raise Suspended(wake)
        return
    _check(run, step_id, recorded, SLEEP)
    wake = _recorded_time(recorded.result)
    assert wake is not None
    if wake > now:
        raise Suspended(wake)
    _woken(run, step_id, now, wake)


def _recorded_time(encoded: Any) -> datetime | None:
    # A record written while the project had the other USE_TZ still compares.
    value = serde.decode(encoded)
    return None if value is None else project_time(value)


def _position(what: str) -> tuple[Frame, str]:
    frame = current_frame.get()
    if frame is None:
        raise EverystepError(f"{what} is only durable inside a running workflow body")
    if frame.in_step:
        raise EverystepError(
            f"{what} inside a step body cannot be durable; call it from the workflow body"
        )
    if frame.run.aborted is not None:
        raise frame.run.aborted
    return frame, frame.next_id(None)


def _check(run: RunState, step_id: str, recorded: RecordedStep, expected: str) -> None:
    if recorded.name != expected:
        raise run.abort(steps.code_changed(run, step_id, recorded.name, expected))


def _woken(run: RunState, step_id: str, now: datetime, wake: datetime | None = None) -> None:
    """Report how late the run woke, when this pass is the wake-up the run was released
    for (its due time was this wait's end, or an event made it due)."""
    due = run.claim.due_at
    if run.checking or due is None or (wake is not None and due != wake):
        return
    signals.run_woken.send(
        sender=RunState,
        run_id=run.run_id,
        workflow=run.workflow_name,
        runner=run.claim.runner,
        step_id=step_id,
        lateness=max((now - due).total_seconds(), 0.0),
    )


def _time_out(run: RunState, step_id: str, name: str, deadline: datetime | None) -> WaitTimeout:
    error = WaitTimeout(f"no event {name!r} was sent to run {run.run_id} before the timeout")
    encoded = serde.encode_error(error)
    if deadline is None:
        _record(run, step_id, WAIT, [name], StepStatus.FAILED, error=encoded)
    else:
        _settle(run, step_id, StepStatus.FAILED, error=encoded)
    return error


def _record(
    run: RunState,
    step_id: str,
    name: str,
    args: list[Any],
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> None:
    run.writing(step_id)
    began = time.monotonic()
    store.record_step(
        run.claim,
        step_id=step_id,
        name=name,
        args=args,
        kwargs={},
        status=status,
        started_at=timezone.now(),
        result=result,
        error=error,
    )
    steps.recorded(run, RecordedStep(step_id, name, status, result, error), began)


def _settle(
    run: RunState,
    step_id: str,
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> None:
    """The outcome of a pending wait, replacing its ``started`` record (fenced)."""
    run.writing(step_id)
    began = time.monotonic()
    store.settle_wait(run.claim, step_id, status=status, result=result, error=error)
    steps.recorded(run, RecordedStep(step_id, WAIT, status, result, error), began)
