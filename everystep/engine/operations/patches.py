"""Versioned workflow code: ``patched("change-id")`` and ``deprecate_patch("change-id")``.

A change to a body's steps is shipped as ``if patched("id"): <new> else: <old>``. The
question ``patched`` answers at its call: did this run get past this point under the
code before the change? It did if it recorded a step or wait in the same scope that this
pass has not replayed yet (records only old code made: the pass is at the patch, the
history goes on). Other patch decisions do not count: they hold no position new code
could clash with. Such a run gets False and keeps replaying the old branch; every other run —
new, or stopped before this point by a crash, a drain or a wait — gets True.

The answer is recorded as a ``done`` step named ``everystep.patched`` whose result is the
decision, so every later pass takes the same branch whatever else was recorded since. It
consumes no position: ids after it stay what they were under the old code, and the
record's id, ``<scope>patched <change-id>``, has a space no step name may contain, so it
can never meet a step's id. One decision per change id and scope: a second call with the
same id in the same scope (a change touching two places) gets the first one's answer.

``deprecate_patch("id")`` replaces the ``patched`` call once the old branch is removed. It
decides and records like ``patched`` (so runs started under it replay), and runs that
took the new branch (or never got that far) replay; a run that needs the old branch
fails with ``WorkflowCodeError``. ``everystep_check_replay`` reports such runs before the
deploy, and how many runs still take each patch's old branch. Once no unfinished run
needs the old branch (the check passes with ``deprecate_patch`` in place), the line
itself can go: a decision nobody reaches any more is ignored (``history_beyond``).
"""

from __future__ import annotations

from everystep.engine.core import kinds
from everystep.engine.core.pass_state import Frame, check_length, check_name
from everystep.engine.core.recorded import body_frame, reach, record, served
from everystep.engine.core.replay import Decision
from everystep.errors import EverystepError, WorkflowCodeError
from everystep.models import StepStatus


def patched(change_id: str) -> bool:
    """True if this run reaches this point under the current code, False if its recorded
    history shows it got past it under the code before ``change_id``. Outside a running
    workflow body (a direct call, a step body) there is no history: True."""
    check_name(change_id, "patch change id")
    frame = body_frame()
    if frame is None:
        return True
    if frame.run.is_async:
        raise frame.run.abort(
            EverystepError(
                "patched() is not available in async workflow bodies yet: its decision is "
                "recorded on the spot, and an async body records only through an await. "
                "Version an async workflow by registering the new body under a new name"
            )
        )
    op = reach(
        frame,
        kinds.PATCHED.record,
        step_id=_patch_id(frame, change_id),
        shown=f"patched({change_id!r})",
    )
    if op.decision is Decision.EXECUTE:
        decision = not op.run.history_beyond(frame.scope.prefix)
        if not op.run.checking:
            record(
                op.run,
                op.step_id,
                kinds.PATCHED.record,
                StepStatus.DONE,
                args=[change_id],
                result=decision,
            )
    else:
        decision = bool(served(op))
    op.run.patches.setdefault(change_id, decision)
    return decision


def deprecate_patch(change_id: str) -> None:
    """Stands where ``patched(change_id)`` stood once its old branch is deleted: decided
    and recorded the same way, but a run that took (or would now take) the old branch
    fails with ``WorkflowCodeError`` instead of replaying code it never ran."""
    frame = body_frame()
    if patched(change_id) or frame is None:
        return
    run = frame.run
    step_id = _patch_id(frame, change_id)
    raise run.abort(
        WorkflowCodeError(
            f"run {run.run_id}: it took the old branch of patch {change_id!r} "
            f"(at {step_id!r}), which the code no longer has "
            f"(deprecate_patch({change_id!r})); deploy code with the patched() branch "
            "again until no unfinished run needs it",
            step_id=step_id,
            recorded=f"patched({change_id!r}) = False",
            called=f"deprecate_patch({change_id!r})",
        )
    )


def _patch_id(frame: Frame, change_id: str) -> str:
    return check_length(f"{frame.scope.prefix}patched {change_id}")
