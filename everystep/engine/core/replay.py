"""The replay decision: what to do with one recorded operation (a step call, a sleep, a
wait, a patch decision, a child's start, a wait for runs), given what is recorded at its
id.

A pure function over plain values, so every branch of it is unit-tested without a
database.
"""

from __future__ import annotations

import enum

from everystep.values import RecordedStep


class Decision(enum.Enum):
    EXECUTE = "execute"  # nothing recorded: run the step body and record its outcome
    SERVE_RESULT = "serve_result"  # recorded done: return the stored result
    RAISE_ERROR = "raise_error"  # recorded failed: re-raise the stored exception
    CODE_CHANGED = "code_changed"  # a different function is recorded at this id
    UNCERTAIN = "uncertain"  # an unsafe step started and its outcome was never recorded
    PENDING = "pending"  # a wait started and has no outcome yet: look again, or suspend


def decide(recorded: RecordedStep | None, called_name: str, *, waits: bool = False) -> Decision:
    """Decide how the operation ``called_name`` at an id is served on this pass.
    ``waits``: the operation is a wait, whose ``started`` record is a wait in progress
    (for a step it is an effect that may have happened)."""
    if recorded is None:
        return Decision.EXECUTE
    if recorded.name != called_name:
        return Decision.CODE_CHANGED
    if recorded.status == "done":
        return Decision.SERVE_RESULT
    if recorded.status == "failed":
        return Decision.RAISE_ERROR
    return Decision.PENDING if waits else Decision.UNCERTAIN
