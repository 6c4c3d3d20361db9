"""The replay decision: what to do with one step call, given what is recorded.

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


def decide(recorded: RecordedStep | None, called_name: str) -> Decision:
    """Decide how a step call at an id is served on this pass."""
    if recorded is None:
        return Decision.EXECUTE
    if recorded.name != called_name:
        return Decision.CODE_CHANGED
    if recorded.status == "done":
        return Decision.SERVE_RESULT
    if recorded.status == "failed":
        return Decision.RAISE_ERROR
    return Decision.UNCERTAIN
