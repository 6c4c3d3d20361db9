"""The replay decision (``everystep.engine.core.replay.decide``) for every branch, no database."""

from __future__ import annotations

import pytest

from everystep.engine.core.replay import Decision, decide
from everystep.values import RecordedStep

NAME = "shop.steps.charge_card"
OTHER = "shop.steps.refund_card"


def record(status: str, name: str = NAME) -> RecordedStep:
    error = {"type": "builtins.ValueError", "message": "x", "args": ["x"]}
    return RecordedStep(
        step_id="3",
        name=name,
        status=status,
        result={"ok": True} if status == "done" else None,
        error=error if status == "failed" else None,
    )


def test_no_record_executes() -> None:
    """Nothing recorded at the id: the step body is executed."""
    assert decide(None, NAME) is Decision.EXECUTE


def test_done_with_same_name_serves_result() -> None:
    """A ``done`` record of the same function: the stored result is served."""
    assert decide(record("done"), NAME) is Decision.SERVE_RESULT


def test_failed_with_same_name_raises_error() -> None:
    """A ``failed`` record of the same function: the stored exception is re-raised."""
    assert decide(record("failed"), NAME) is Decision.RAISE_ERROR


def test_started_with_same_name_is_uncertain() -> None:
    """A ``started`` record without outcome: the effect is uncertain."""
    assert decide(record("started"), NAME) is Decision.UNCERTAIN


@pytest.mark.parametrize("status", ["done", "failed", "started"])
def test_different_name_is_code_changed_whatever_the_status(status: str) -> None:
    """A different function recorded at the id is a code change, whatever its status."""
    assert decide(record(status, name=OTHER), NAME) is Decision.CODE_CHANGED


def test_name_comparison_is_exact() -> None:
    """A name that only shares a prefix with the recorded one is a code change."""
    assert decide(record("done", name=NAME + "_v2"), NAME) is Decision.CODE_CHANGED
    assert decide(record("done", name=NAME), NAME + "_v2") is Decision.CODE_CHANGED


def test_decision_ignores_stored_result_content() -> None:
    """A done record with a None/falsy result is still served, not executed again."""
    falsy = RecordedStep(step_id="1", name=NAME, status="done", result=None)
    assert decide(falsy, NAME) is Decision.SERVE_RESULT


def test_a_started_wait_is_pending_not_uncertain() -> None:
    """For a wait (``waits=True``) a ``started`` record is a wait in progress."""
    assert decide(record("started"), NAME, waits=True) is Decision.PENDING
    assert decide(record("done"), NAME, waits=True) is Decision.SERVE_RESULT
    assert decide(record("failed"), NAME, waits=True) is Decision.RAISE_ERROR
    assert decide(None, NAME, waits=True) is Decision.EXECUTE
    assert decide(record("started", name=OTHER), NAME, waits=True) is Decision.CODE_CHANGED
