"""The steps of one run as the run page reads them: an outline of every step (what the
graph and timeline need, without the JSON columns) and the full rows of one page of the
step table. Both are served by the ``(workflow_id, step_id)`` unique index."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from everystep.models import Step

# The order steps are read in (the graph's input, the timeline's lanes); ``step_id`` is
# unique within a run, so reads never overlap. The table shows them by id (``step_key``).
STEP_ORDER = ("started_at", "step_id")


def step_key(step_id: str) -> tuple[tuple[int, int, str], ...]:
    """The step table's order: ids compared segment by segment, numbers as numbers
    (``1.10`` after ``1.9``, ``2`` after ``1.4``), a named segment (``everystep_id=``)
    after the numbered ones, by its text. Start order would list a fork's concurrent
    branches in whatever order their threads began; that order is the timeline's."""
    # The text rides along with the number so that two ids are never equal keys (``01``
    # and ``1``): the rows of a page come back from the database unordered, and a tie
    # would leave their order to it.
    return tuple(
        (0, int(part), part) if part.isascii() and part.isdigit() else (1, 0, part)
        for part in step_id.split(".")
    )


@dataclass(frozen=True)
class StepOutline:
    """What the graph and timeline need of a step: no arguments, result or error."""

    step_id: str
    name: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    # Who settled its outcome by hand (then ``finished_at`` is when), or None.
    settled_by: str | None


_OUTLINE_FIELDS = [f.name for f in fields(StepOutline)]


def step_outlines(run_id: UUID | str, limit: int) -> list[StepOutline]:
    """The first ``limit`` steps of a run in the order they started, as outlines
    (whole rows: ``step_rows``). Plain tuples, not model instances: a run page reads
    thousands of them."""
    steps = Step.objects.filter(workflow_id=run_id).order_by(*STEP_ORDER)
    return [StepOutline(*row) for row in steps.values_list(*_OUTLINE_FIELDS)[:limit]]


@dataclass(frozen=True)
class StepRow(StepOutline):
    """A whole row of the step table: the outline and the recorded values."""

    args: Any
    kwargs: Any
    result: Any
    error: Any


_ROW_FIELDS = [f.name for f in fields(StepRow)]


def step_rows(run_id: UUID | str, offset: int, limit: int) -> list[StepRow]:
    """Whole rows of steps ``offset`` to ``offset + limit`` of a run, in start order;
    tuples too (a model instance per row was a third of reading every step of a big run)."""
    steps = Step.objects.filter(workflow_id=run_id).order_by(*STEP_ORDER)
    return [StepRow(*row) for row in steps.values_list(*_ROW_FIELDS)[offset : offset + limit]]


def step_rows_of(run_id: UUID | str, step_ids: list[str]) -> list[StepRow]:
    """Whole rows of the steps ``step_ids`` of a run (one page of the table), in the
    table's order."""
    steps = Step.objects.filter(workflow_id=run_id, step_id__in=step_ids)
    rows = [StepRow(*row) for row in steps.values_list(*_ROW_FIELDS)]
    return sorted(rows, key=lambda row: step_key(row.step_id))
