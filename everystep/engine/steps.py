"""One step call inside a run: pick its id, decide from the record, execute if new
(``everystep.engine.operations.step_run``); in an async body, the awaitable of the call
(``everystep.engine.asynchronous.async_steps``)."""

from __future__ import annotations

from typing import Any

from everystep.engine.asynchronous.async_steps import call_async
from everystep.engine.core.recorded import body_frame, reach
from everystep.engine.core.replay import Decision
from everystep.engine.operations.step_run import execute_step, served_step
from everystep.errors import EverystepError
from everystep.registry import StepDef


def call_step(
    defn: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any], everystep_id: str | None
) -> Any:
    """Run a ``@step`` call: a plain call outside a run or inside another step's body,
    otherwise served from the record or executed and recorded; in an async body, an
    awaitable that does so."""
    frame = body_frame()
    if frame is None:
        return defn.fn(*args, **kwargs)
    if frame.run.is_async:
        return call_async(frame, defn, args, kwargs, everystep_id)
    if defn.is_async:
        raise frame.run.abort(
            EverystepError(
                f"run {frame.run.run_id}: step {defn.name} is an async def, called from the "
                f"sync workflow body {frame.run.workflow_name}: make the workflow an async "
                "def and await the step, or make the step a plain def"
            )
        )
    op = reach(frame, defn.name, everystep_id=everystep_id)
    if op.decision is Decision.EXECUTE:
        return execute_step(frame, defn, op.step_id, args, kwargs)
    return served_step(op, defn)
