"""The one path every recorded operation of a body takes: step calls, sleeps, waits for
events, patch decisions, child starts and waits for runs.

A call ``reach``es its operation: it takes the operation's id in the caller's scope,
looks up the record at that id, and gets the replay decision (``replay.decide``, pure);
a record of some other operation there ends the run with ``WorkflowCodeError`` before
the caller sees it. The caller then does only what its kind needs for the decision —
execute and record (``RunState.record``), serve (``served``), settle a wait in progress
(``RunState.settle``) or suspend. A new kind of operation is a new caller of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from everystep import failure_detail, serde, stored_errors
from everystep.engine import replay
from everystep.engine.pass_state import Frame, RunState, current_frame
from everystep.engine.replay import Decision
from everystep.errors import Terminal, WorkflowCodeError
from everystep.values import RecordedStep


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
    waits: bool = False,
    shown: str | None = None,
) -> Operation:
    """The operation ``name`` the body reaches next in ``frame``: at the next position
    of its scope (or ``everystep_id``), or at ``step_id`` for an operation that takes no
    position (a patch decision). ``waits``: a ``started`` record is a wait in progress.
    ``shown``: how the call is named in a ``WorkflowCodeError`` (default ``name``)."""
    run = frame.run
    if step_id is None:
        step_id = frame.next_id(everystep_id)
    else:
        run.visit(step_id)
    recorded = run.recorded(step_id)
    decision = replay.decide(recorded, name, waits=waits)
    if decision is Decision.CODE_CHANGED:
        assert recorded is not None
        raise run.abort(code_changed(run, step_id, recorded.name, shown or name))
    return Operation(frame, step_id, name, recorded, decision)


def served(op: Operation) -> Any:
    """What a recorded outcome gives the body on replay: its result, or its exception
    raised (a ``Terminal`` one ends the run whatever the body catches)."""
    recorded = op.recorded
    assert recorded is not None
    if op.decision is Decision.SERVE_RESULT:
        return serde.decode(recorded.result)
    assert op.decision is Decision.RAISE_ERROR and recorded.error is not None
    exc = stored_errors.decode_error(recorded.error)
    if isinstance(exc, Terminal):
        failure_detail.stopped_in(exc, op.step_id)  # as the live pass said where
        raise op.run.abort(exc)
    raise exc


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
