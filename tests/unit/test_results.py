"""What an ended run gives the run or caller waiting for it (``results.value``), for
every final status, no database."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from everystep import serde, stored_errors
from everystep.engine.operations.results import value
from everystep.errors import RunCancelled, RunStopped, StepFailure, Terminal


def outcome(status: str, result: object = None, error: object = None) -> dict:
    return {"run": "r-1", "status": status, "result": result, "error": error}


def test_a_completed_run_gives_its_result_decoded() -> None:
    when = datetime(2026, 12, 2, tzinfo=UTC)
    stored = serde.encode({"total": Decimal("3.10"), "when": when})
    assert value(outcome("completed", stored)) == {"total": Decimal("3.10"), "when": when}


def test_a_failed_run_raises_its_exception_rebuilt() -> None:
    with pytest.raises(KeyError, match="sku"):
        value(outcome("failed", error=stored_errors.encode_error(KeyError("sku"))))


def test_a_failure_whose_type_is_gone_is_a_step_failure() -> None:
    error = {"type": "gone.module.Error", "message": "lost", "args": ["lost"]}
    with pytest.raises(StepFailure, match=r"gone\.module\.Error: lost"):
        value(outcome("failed", error=error))


def test_a_stopped_run_raises_run_stopped_with_reason_and_payload() -> None:
    from everystep.engine.core.outcome import encode_outcome_error

    error = encode_outcome_error(Terminal("out of stock", {"sku": 7}))
    with pytest.raises(RunStopped) as stopped:
        value(outcome("stopped", error=error))
    assert (stopped.value.reason, stopped.value.payload) == ("out of stock", {"sku": 7})
    assert not isinstance(stopped.value, Terminal), "it must not stop the waiting run"


def test_a_cancelled_run_raises_run_cancelled() -> None:
    error = stored_errors.encode_error(Exception("cancelled by admin"))
    with pytest.raises(RunCancelled, match="r-1 was cancelled: cancelled by admin"):
        value(outcome("cancelled", error=error))
