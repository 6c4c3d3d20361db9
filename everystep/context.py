"""``everystep.context.current()``: what the running workflow or step can know about itself."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from everystep import serde
from everystep.engine.core.pass_state import RunState, current_frame


class Outcomes(Mapping[str, Mapping[str, Any]]):
    """Read-only view: step id → ``{"name", "status", "result", "error"}`` of the steps
    recorded so far in this run (served from the database or executed on this pass)."""

    def __init__(self, run: RunState) -> None:
        self._run = run

    def __getitem__(self, step_id: str) -> Mapping[str, Any]:
        record = self._run.recorded(step_id)
        if record is None:
            raise KeyError(step_id)
        return {
            "name": record.name,
            "status": record.status,
            "result": serde.decode(record.result),
            "error": record.error,
        }

    def __iter__(self) -> Iterator[str]:
        return iter(self._run.snapshot())

    def __len__(self) -> int:
        return len(self._run.snapshot())


@dataclass(frozen=True)
class Context:
    """The running workflow as seen from its body or from inside one of its steps."""

    workflow_id: UUID
    workflow_name: str
    step_id: str | None
    outcomes: Outcomes


def current() -> Context | None:
    """The current context, or None outside a running workflow."""
    frame = current_frame.get()
    if frame is None:
        return None
    run = frame.run
    return Context(run.run_id, run.workflow_name, frame.step_id, Outcomes(run))
