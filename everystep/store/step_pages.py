"""The steps of one run as the run page reads them: an outline of every step (what the
graph and timeline need, without the JSON columns) and the full rows of one page of the
step table. Two statements whatever the number of steps; both are served by the
``(workflow_id, step_id)`` unique index."""

from __future__ import annotations

from uuid import UUID

from everystep.models import Step

# The order of the step table, the graph's input and the timeline's lanes; ``step_id``
# is unique within a run, so pages never overlap.
STEP_ORDER = ("started_at", "step_id")
OUTLINE_FIELDS = ("id", "step_id", "name", "status", "started_at", "finished_at")


def step_outlines(run_id: UUID | str, limit: int) -> list[Step]:
    """The first ``limit`` steps of a run in the order they started, without their
    arguments, results or errors (reading those is ``step_rows``)."""
    steps = Step.objects.filter(workflow_id=run_id).only(*OUTLINE_FIELDS)
    return list(steps.order_by(*STEP_ORDER)[:limit])


def step_rows(run_id: UUID | str, offset: int, limit: int) -> list[Step]:
    """Whole rows of steps ``offset`` to ``offset + limit`` of a run, in the same order."""
    steps = Step.objects.filter(workflow_id=run_id).order_by(*STEP_ORDER)
    return list(steps[offset : offset + limit])
