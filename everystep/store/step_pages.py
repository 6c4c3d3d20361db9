"""The steps of one run as the run page reads them: an outline of every step (what the
graph and timeline need, without the JSON columns) and the full rows of one page of the
step table. Both are served by the ``(workflow_id, step_id)`` unique index."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from uuid import UUID

from everystep.models import Step

# The order of the step table, the graph's input and the timeline's lanes; ``step_id``
# is unique within a run, so pages never overlap.
STEP_ORDER = ("started_at", "step_id")


@dataclass(frozen=True)
class StepOutline:
    """What the graph and timeline need of a step: no arguments, result or error."""

    step_id: str
    name: str
    status: str
    started_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, step: Step) -> StepOutline:
        """The outline of a whole row already read."""
        return cls(step.step_id, step.name, step.status, step.started_at, step.finished_at)


_OUTLINE_FIELDS = [f.name for f in fields(StepOutline)]


def step_outlines(run_id: UUID | str, limit: int) -> list[StepOutline]:
    """The first ``limit`` steps of a run in the order they started, as outlines
    (whole rows: ``step_rows``). Plain tuples, not model instances: a run page reads
    thousands of them."""
    steps = Step.objects.filter(workflow_id=run_id).order_by(*STEP_ORDER)
    return [StepOutline(*row) for row in steps.values_list(*_OUTLINE_FIELDS)[:limit]]


def step_rows(run_id: UUID | str, offset: int, limit: int) -> list[Step]:
    """Whole rows of steps ``offset`` to ``offset + limit`` of a run, in the same order."""
    steps = Step.objects.filter(workflow_id=run_id).order_by(*STEP_ORDER)
    return list(steps[offset : offset + limit])
