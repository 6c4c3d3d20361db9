"""The one path every recorded operation of a body takes: step calls, sleeps, waits for
events, patch decisions, child starts and waits for runs. Its decisions and its writes
are all here; the state they read and keep is ``everystep.engine.core.pass_state``'s, the
statements they run are ``everystep.store.step_records``'s.

A call ``reach``es its operation: it takes the operation's id in the caller's scope,
looks up the record at that id, and gets the replay decision (``replay.decide``, pure);
a record of some other operation there ends the run with ``WorkflowCodeError``
(``code_changed``) before the caller sees it. The caller then does only what its kind
needs for the decision — execute and ``record``, serve the record (``served``),
``conclude`` a wait in progress, or suspend. A new kind of operation is a new caller of
these. Every write of the path goes through ``record`` or ``conclude``: a replay check
stops before it (``writing``), the record held back is written first (``flush``), and
the ``step_recorded`` receivers hear of it after (``announce``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from everystep import failure_detail, serde, signals, stored_errors
from everystep.engine.core import crashes, kinds, replay
from everystep.engine.core.crashes import maybe_crash
from everystep.engine.core.pass_state import Frame, Held, RunState, current_frame
from everystep.engine.core.replay import Decision
from everystep.errors import IncompatibleValue, ReachedNewWork, Terminal, WorkflowCodeError
from everystep.models import StepStatus
from everystep.shapes import Shape
from everystep.store import database
from everystep.store.step_records import Child, conclude_started, record_step, step_values
from everystep.values import RecordedStep

_HOLDABLE = frozenset({StepStatus.DONE, StepStatus.FAILED})


@dataclass(frozen=True)
class Operation:
    """One operation reached in a running body, with what is recorded at its id."""

    frame: Frame
    step_id: str
    name: str  # the record's name for this kind (a step's function, "everystep.sleep"…)
    recorded: RecordedStep | None
    decision: Decision

    @property
    def run(self) -> RunState:
        return self.frame.run


def body_frame() -> Frame | None:
    """The frame of the running body calling, or None outside one and inside a step's
    body (where an operation is a plain call: each kind says what that means). A run
    already aborted stops every later operation."""
    frame = current_frame.get()
    if frame is None or frame.in_step:
        return None
    if frame.run.aborted is not None:
        raise frame.run.aborted
    return frame


def reach(
    frame: Frame,
    name: str,
    *,
    everystep_id: str | None = None,
    step_id: str | None = None,
    shown: str | None = None,
) -> Operation:
    """The operation ``name`` the body reaches next in ``frame``: at the next position
    of its scope (or ``everystep_id``), or at ``step_id`` for an operation that takes no
    position (a patch decision). Its kind (``kinds.of(name)``) says whether a ``started``
    record is a wait in progress.
    ``shown``: how the call is named in a ``WorkflowCodeError`` (default ``name``)."""
    run = frame.run
    if step_id is None:
        step_id = frame.next_id(everystep_id)
    else:
        run.visit(step_id)
    recorded = run.recorded(step_id)
    decision = replay.decide(recorded, name, waits=kinds.of(name).in_progress)
    if decision is Decision.CODE_CHANGED:
        assert recorded is not None
        raise run.abort(code_changed(run, step_id, recorded.name, shown or name))
    return Operation(frame, step_id, name, recorded, decision)


def served(op: Operation, shape: Shape | None = None) -> Any:
    """What a recorded outcome gives the body on replay: its result (rebuilt as
    ``shape``, the type the code annotates it with, says), or its exception raised (a
    ``Terminal`` one ends the run whatever the body catches). A result the type cannot
    rebuild any more ends the run as a code change does."""
    recorded = op.recorded
    assert recorded is not None
    if op.decision is Decision.SERVE_RESULT:
        return rebuilt(op, recorded.result, shape, f"the result recorded at {op.step_id}")
    assert op.decision is Decision.RAISE_ERROR and recorded.error is not None
    exc = stored_errors.decode_error(recorded.error)
    if isinstance(exc, Terminal):
        failure_detail.stopped_in(exc, op.step_id)  # as the live pass said where
        raise op.run.abort(exc)
    raise exc


def rebuilt(op: Operation, stored: Any, shape: Shape | None, what: str) -> Any:
    """The value ``stored`` for ``op`` as the body gets it: rebuilt as ``shape`` (the type
    the code annotates it with) says; one the type cannot rebuild any more ends the run
    as a code change does, naming ``what`` and ``op``'s step."""
    if shape is None:
        return serde.decode(stored)
    try:
        return shape.rebuild(stored, what)
    except IncompatibleValue as changed:
        changed.step_id = op.step_id
        raise op.run.abort(changed) from None


def code_changed(run: RunState, step_id: str, recorded: str, called: str) -> WorkflowCodeError:
    """The error of a replay that finds ``recorded`` at ``step_id`` where the body now
    calls ``called``."""
    return WorkflowCodeError(
        f"run {run.run_id}: step {step_id} was recorded as {recorded} but the workflow now "
        f"calls {called} there; the code changed incompatibly",
        step_id=step_id,
        recorded=recorded,
        called=called,
    )


def writing(run: RunState, step_id: str) -> None:
    """Called before anything is recorded for ``step_id``: a replay check stops there,
    since what follows would be new work."""
    if run.checking:
        raise ReachedNewWork(step_id)


def record(
    run: RunState,
    step_id: str,
    name: str,
    status: str,
    *,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    result: Any = None,
    error: dict[str, Any] | None = None,
    began: float | None = None,
    started_at: Any = None,
    after_started: bool = False,
    child: Child | None = None,
    crash_point: str | None = "after_record",
) -> RecordedStep:
    """Record an operation at ``step_id`` (fenced by the claim), then make it known:
    every record of every kind goes through here. ``after_started``: this outcome
    replaces the operation's own ``started`` record (an unsafe step's). ``child``: a
    child run to insert with the record, whose id becomes its result. ``crash_point``:
    where a test's simulated crash may strike once the record is in (None after an
    unsafe step's ``started`` record: the step's own ``before_body`` follows it)."""
    writing(run, step_id)
    flush(run)
    began = time.monotonic() if began is None else began
    values = step_values(
        step_id=step_id,
        name=name,
        args=[] if args is None else args,
        kwargs={} if kwargs is None else kwargs,
        status=status,
        started_at=started_at or timezone.now(),
        result=result,
        error=error,
    )
    if _holdable(name, status, after_started, child) and _may_hold(run, step_id):
        step = RecordedStep(step_id, name, status, result, error)
        run.remember(step)
        run.held = Held(values, step, time.monotonic() - began)
        return step
    result = record_step(run.claim, values, after_started=after_started, child=child)
    step = RecordedStep(step_id, name, status, result, error)
    run.remember(step)
    announce(run, step, time.monotonic() - began)
    if crash_point is not None:
        maybe_crash(step_id, name, crash_point)
    return step


def _holdable(name: str, status: str, after_started: bool, child: Child | None) -> bool:
    """Whether this record may wait for the next write, by what it is: an outcome
    (a ``started`` record must be in before the wait or the body it begins), not one
    replacing its own ``started`` record, and of a kind that allows it
    (``kinds.Kind.held_back``: a child start inserts its child at once)."""
    return status in _HOLDABLE and not after_started and child is None and kinds.of(name).held_back


def _may_hold(run: RunState, step_id: str) -> bool:
    """Whether this pass may hold a record back here, by where it is."""
    return (
        run.holds_records
        # Not in a fork's branch (ids with a dot): branches run on threads of their
        # own, and one waiting for another's record to be written while holding a
        # row lock (an atomic step) would wait for ever.
        and "." not in step_id
        and not crashes.armed()  # a simulated crash must find the record written
        # An atomic step's record commits with its body's writes, in its transaction.
        and not database.connection().in_atomic_block
    )


def flush(run: RunState) -> None:
    """Write the record held back, if any: called before every other write of the
    pass, before a fork and before every step's body, so no step starts while an
    earlier outcome is unwritten. Records are held only in the body's own scope,
    which never runs beside a branch: one thread at a time calls this."""
    held, run.held = run.held, None
    if held is not None:
        record_step(run.claim, held.values)
        announce(run, held.step, held.duration)


def take_held(run: RunState) -> Held | None:
    """The record held back, for the run's outcome to write; no longer held."""
    held, run.held = run.held, None
    return held


def conclude(
    run: RunState,
    step_id: str,
    name: str,
    status: str,
    *,
    result: Any = None,
    error: Any = None,
    awaited_runs: bool = False,
) -> RecordedStep:
    """Give a wait in progress (its ``started`` record) its outcome, fenced.
    ``awaited_runs``: a wait for runs, whose ``RunWait`` rows go with it."""
    writing(run, step_id)
    began = time.monotonic()
    flush(run)
    conclude_started(
        run.claim, step_id, status=status, result=result, error=error, awaited_runs=awaited_runs
    )
    step = RecordedStep(step_id, name, status, result, error)
    run.remember(step)
    announce(run, step, time.monotonic() - began)
    return step


def announce(run: RunState, step: RecordedStep, duration: float) -> None:
    """What follows every record once written: the ``step_recorded`` receivers (logs,
    metrics) hear of it. (Later calls of the pass see it at once.)"""
    signals.step_recorded.emit(
        sender=RunState,
        run_id=run.run_id,
        workflow=run.workflow_name,
        runner=run.claim.runner,
        step_id=step.step_id,
        step=step.name,
        status=step.status,
        duration=duration,
    )
