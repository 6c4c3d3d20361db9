"""Runs as a table shows them (``_runs_table.html``: the runs list, a run's children), and
links to a run's page.

The cells are formatted here, not per cell in the template: a page of 200 rows spent
most of its time in includes, date filters and ``{% url %}`` (measured with
bench/ui_scale.py at a million runs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.urls import reverse
from django.utils import timezone

from everystep.models import Workflow
from everystep.store.reports import COUNT_CAP, run_wait
from everystep.ui.timeline import format_duration, time_html

# Any run id: the run page's URL is reversed once per page, with this id replaced.
_ANY_ID = UUID(int=0)


def run_hrefs() -> Callable[[object], str]:
    """The run page's URL for a run id, from one ``reverse`` per call of this (per
    request: the script prefix is the request's)."""
    head, tail = reverse("everystep:run", args=[_ANY_ID]).split(str(_ANY_ID))
    return lambda run_id: f"{head}{run_id}{tail}"


def run_rows(
    runs: Iterable[Workflow], column: dict[UUID, str] | None = None
) -> list[dict[str, Any]]:
    """One row of ``_runs_table.html`` per run: the run, its link, times and wait; and
    with ``column`` (run id → cell text), its cell of the extra column (``?show=``)."""
    now, zone = timezone.now(), timezone.get_current_timezone()
    href = run_hrefs()
    cells = column or {}
    return [
        {
            "run": run,
            "href": href(run.id),
            "created": time_html(run.created_at, zone),
            "started": time_html(run.started_at, zone),
            "completed": time_html(run.completed_at, zone),
            "duration": format_duration(span(run.started_at, run.completed_at)),
            "wait": run_wait(run, now),
            "shown": cells.get(run.id, ""),
        }
        for run in runs
    ]


def span(start: datetime | None, end: datetime | None) -> timedelta | None:
    """The time from ``start`` to ``end``, None unless both are known."""
    return end - start if start is not None and end is not None else None


def count_label(count: int) -> str:
    """A count stopped just above ``COUNT_CAP`` (see ``status_counts``): past the cap a
    page says "10,000+", not a number it would take a scan of a whole table to know."""
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else str(count)
