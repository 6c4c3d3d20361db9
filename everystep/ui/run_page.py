"""The steps part of a run's page, readable at thousands of steps: the step table in
pages (``?steps=N``, or ``?steps=all``), the graph with long sequences and wide forks
collapsed (``?graph=all`` shows it whole), the timeline limited to the steps of the
table's page but drawn on the whole run's time axis.

Two statements whatever the number of steps: an outline of every step (ids, names,
statuses, times: what the graph and timeline need) and the full rows of the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from operator import attrgetter
from typing import Any

from django.http import HttpRequest, QueryDict
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from everystep import failure_detail, safe_text
from everystep.models import Status, Workflow
from everystep.store.step_pages import (
    StepOutline,
    StepRow,
    step_key,
    step_outlines,
    step_rows,
    step_rows_of,
)
from everystep.ui.actions import uncertain_steps
from everystep.ui.family import started_children, step_runs
from everystep.ui.graph import build_graph, collapse
from everystep.ui.run_table import run_hrefs
from everystep.ui.timeline import build_timeline, format_duration, settled_html, time_html

STEPS_PER_PAGE = 100
# The graph and timeline of a run stop at this many steps (a notice says so).
STEPS_MAX = 10_000
# Lanes of the timeline at most, even for ``?steps=all``: a page's worth.
TIMELINE_MAX = STEPS_PER_PAGE
# Characters of a step's error message in its row (a message can be megabytes).
MESSAGE_SHOWN = 300
# Characters of step details (JSON and tracebacks) one page shows in all: with every step
# listed (?steps=all) 10,000 steps of big values made a 78 MB page. Past it a step's row
# says where its details are.
DETAILS_SHOWN = 2_000_000
NOT_SHOWN = (
    "… not shown: this page has shown {:,} characters of step details already; the "
    "step's page of the table (?steps=N) or manage.py everystep_show RUN_ID --json has it"
)
# A mark per step status, so a status is a shape as well as a colour (as in _mark.html).
MARKS = {"done": "✓", "failed": "✗", "started": "◔"}


@dataclass(frozen=True)
class StepPage:
    """Which steps of the table are shown: page ``number`` of ``count`` (or all of them),
    and the links to the others."""

    number: int
    count: int
    everything: bool
    total: int
    first: int  # 1-based positions, for "steps 101 to 200 of 2,000"
    last: int
    links: dict[str, str]

    @property
    def offset(self) -> int:
        return 0 if self.everything else (self.number - 1) * STEPS_PER_PAGE


NODE_OPEN = (
    '<a class="es-node es-{status}" href="{href}" title="{name} ({status})"><span '
    'class="es-mark es-mark-{status}" aria-hidden="true">{mark}</span><span class="es-sr">'
    "{status}</span> "
)


@dataclass(frozen=True)
class LinkedStep:
    """A step of the graph and where its row is: on this page or another one."""

    step: StepOutline
    href: str

    @property
    def status(self) -> str:
        return str(self.step.status)

    @property
    def mark(self) -> str:
        return MARKS.get(self.step.status, "•")

    # The graph node's link around its key (``_graph.html``), written here: a whole graph
    # has thousands of nodes, and the template's lookups and escaping per node were most
    # of its time.
    @property
    def node_open(self) -> SafeString:
        return format_html(
            NODE_OPEN, status=self.status, href=self.href, name=self.step.name, mark=self.mark
        )

    @property
    def node_close(self) -> SafeString:
        return format_html(" {}</a>", self.step.name)


def steps_context(
    request: HttpRequest, found: Workflow, pretty: Callable[[Any], str]
) -> dict[str, Any]:
    """The steps, graph and timeline of run ``found`` for the template, and notices."""
    outlines, rows, page, notices = _read(request, found)
    zone = timezone.get_current_timezone()
    # The timeline's lanes are in start order, whatever the table's.
    started = sorted(rows, key=attrgetter("started_at", "step_id"))
    timeline = build_timeline(outlines, _open_until(found), shown=started[:TIMELINE_MAX])
    whole_graph = request.GET.get("graph") == "all"
    graph = build_graph(_linked(request, outlines, page), attrgetter("step.step_id"))
    shown = graph if whole_graph else collapse(graph, attrgetter("status"))
    href = run_hrefs()
    return {
        **outcome_context(found, outlines, pretty),
        "step_notices": notices,
        "started_children": started_children(outlines, cut=len(outlines) >= STEPS_MAX),
        "uncertain_steps": uncertain_steps(outlines),
        "steps": _rows(rows, pretty, zone, href),
        "page": page,
        "graph": shown,
        "graph_collapsed": shown != graph,
        "graph_all_href": page_href(request, graph="all") + "#graph",
        "timeline": timeline,
        "timeline_span": format_duration(timeline.span),
        "timeline_cut": len(rows) > TIMELINE_MAX,
    }


def outcome_context(
    found: Workflow, outlines: list[StepOutline], pretty: Callable[[Any], str]
) -> dict[str, Any]:
    """What the run page shows under a run's error: the error's fields without its
    traceback (``error_fields_json``), the traceback (collapsed), and where a blocked or
    stopped run stopped (``stopped_at``)."""
    error = found.error if isinstance(found.error, dict) else {}
    return {
        "error_fields_json": pretty(_without_traceback(found.error)),
        "run_traceback": _traceback(error),
        "stopped_at": failure_detail.stopped_at(
            found.status, error, [step.step_id for step in outlines]
        ),
    }


def _traceback(error: Any) -> str:
    trace = error.get("traceback") if isinstance(error, dict) else None
    # for_page: a row is read as it is stored, whoever wrote it.
    return safe_text.for_page(trace) if isinstance(trace, str) else ""


def _without_traceback(error: Any) -> Any:
    # Shown apart, as text: in the JSON it would be one line of escaped newlines.
    if isinstance(error, dict) and "traceback" in error:
        return {key: value for key, value in error.items() if key != "traceback"}
    return error


def _read(
    request: HttpRequest, found: Workflow
) -> tuple[list[StepOutline], list[StepRow], StepPage, list[str]]:
    """The outline of every step (up to ``STEPS_MAX``), the whole rows of the table's
    page, the page and notices: two statements, one when every step is asked for (the
    outlines are then taken from the rows)."""
    everything = request.GET.get("steps") == "all"
    limit = STEPS_MAX + 1
    rows = step_rows(found.id, 0, limit) if everything else []
    # A whole row is an outline too.
    outlines: list[StepOutline] = list(rows) if everything else step_outlines(found.id, limit)
    notices = []
    if len(outlines) > STEPS_MAX:
        outlines, rows = outlines[:STEPS_MAX], rows[:STEPS_MAX]
        notices.append(f"This run has more than {STEPS_MAX:,} steps; the first are shown.")
    page, notice = _page(request, len(outlines))
    notices += [notice] if notice else []
    # The table's order (by id, numerically) is decided here, in Python, not by the
    # database: no ORDER BY sorts "1.10" after "1.9" alike on the three databases, and the
    # page already holds every outline (at most STEPS_MAX), so a page of the table is a
    # slice of the sorted outlines and its whole rows are read by id: still two statements.
    if everything:
        rows = sorted(rows, key=lambda row: step_key(row.step_id))
    elif outlines:
        table = _table_order(outlines)[page.offset : page.offset + STEPS_PER_PAGE]
        rows = step_rows_of(found.id, [step.step_id for step in table])
    return outlines, rows, page, notices


def _table_order(outlines: list[StepOutline]) -> list[StepOutline]:
    """The steps in the table's order (by id, ``step_key``); ``outlines`` are in start
    order, which the graph and the timeline keep."""
    return sorted(outlines, key=lambda step: step_key(step.step_id))


def _page(request: HttpRequest, total: int) -> tuple[StepPage, str]:
    count = max(1, -(-total // STEPS_PER_PAGE))
    given = request.GET.get("steps", "")
    notice = ""
    everything = given == "all"
    number = 1
    if given and not everything:
        if given.isascii() and given.isdecimal() and len(given) < 10:
            number = min(max(int(given), 1), count)
        else:
            notice = "The steps parameter is a page number or 'all'; showing the first page."
    first = 1 if everything else (number - 1) * STEPS_PER_PAGE + 1
    last = total if everything else min(number * STEPS_PER_PAGE, total)
    links = {
        "previous": page_href(request, steps=str(number - 1))
        if number > 1 and not everything
        else "",
        "next": page_href(request, steps=str(number + 1))
        if number < count and not everything
        else "",
        "all": "" if everything or count == 1 else page_href(request, steps="all"),
        "paged": page_href(request, steps="1") if everything else "",
    }
    page = StepPage(number, count, everything, total, min(first, total), last, links)
    return page, notice


def _linked(request: HttpRequest, outlines: list[StepOutline], page: StepPage) -> list[LinkedStep]:
    # One query string per page of the table, not per step: thousands of steps share them.
    pages = {n: page_href(request, steps=str(n)) for n in range(1, page.count + 1)}
    pages[page.number] = ""
    # The page a step is on follows the table's order, not the outlines' (start) order.
    position = {step.step_id: at for at, step in enumerate(_table_order(outlines))}
    linked = []
    for step in outlines:
        target = "" if page.everything else pages[position[step.step_id] // STEPS_PER_PAGE + 1]
        linked.append(LinkedStep(step, f"{target}#step-{step.step_id}"))
    return linked


def page_href(request: HttpRequest, **changes: str) -> str:
    """This page's query string with ``changes``, keeping only the parameters the run
    page reads (anything else in the URL is not carried into every link)."""
    query = QueryDict(mutable=True)
    for key in ("refresh", "steps", "graph"):
        value = changes.get(key, request.GET.get(key, ""))
        if value and len(value) <= 10:
            query[key] = value
    return "?" + query.urlencode()


# One row of the step table, filled in Python: with every step of a big run listed,
# rendering the row in the template (and then format_html's lazy escaping) took most of
# the page's time (measured with bench/ui_scale.py). format_html escapes every value.
STEP_ROW = (
    '<tr id="step-{id}"><td><code>{id}</code></td><td>{name}{runs}</td>'
    '<td><span class="es-badge es-{status}">{status}</span></td><td>{started}</td>'
    '<td>{finished}</td><td class="es-num">{duration}</td><td>{error}<details><summary>JSON'
    '<span class="es-sr"> of step {id}</span></summary><pre class="es-json">{detail}</pre>'
    "</details>{traceback}</td></tr>"
)
STEP_ERROR = '<p class="es-error"><code>{type}</code>: {message}</p>'
STEP_TRACEBACK = (
    '<details class="es-traceback"><summary>Traceback<span class="es-sr"> of step {id}</span>'
    '</summary><pre class="es-trace">{text}</pre></details>'
)


def _rows(
    rows: list[StepRow], pretty: Callable[[Any], str], zone: tzinfo, href: Callable[[Any], str]
) -> list[SafeString]:
    """The table's rows, their details within ``DETAILS_SHOWN`` characters together."""
    budget = _Budget(DETAILS_SHOWN)
    return [_row(step, pretty, zone, href, budget) for step in rows]


class _Budget:
    """What is left of a page's ``DETAILS_SHOWN``."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self, make: Callable[[], str]) -> str:
        """``make()``'s text while some is left (not even made after), else a line
        saying where it is."""
        if self.left <= 0:
            return NOT_SHOWN.format(DETAILS_SHOWN)
        text = make()
        self.left -= len(text)
        return text


def _row(
    step: StepRow,
    pretty: Callable[[Any], str],
    zone: tzinfo,
    href: Callable[[Any], str],
    budget: _Budget,
) -> SafeString:
    detail = {"args": step.args, "kwargs": step.kwargs, "result": step.result}
    if step.error is not None:
        detail["error"] = _without_traceback(step.error)
    stored = step.error.get("traceback") if isinstance(step.error, dict) else None
    trace = budget.take(lambda: _traceback(step.error)) if isinstance(stored, str) else ""
    return format_html(
        STEP_ROW,
        id=step.step_id,
        name=step.name,
        # Links to the runs a composition step names, built by format_html.
        runs=step_runs(step.name, step.status, step.args, step.result, href),
        status=step.status,
        started=time_html(step.started_at, zone),
        finished=time_html(step.finished_at, zone),
        duration=_took(step, zone),
        error=_step_error(step.error),
        detail=budget.take(lambda: pretty(detail)),
        traceback=format_html(STEP_TRACEBACK, id=step.step_id, text=trace) if trace else "",
    )


def _took(step: StepRow, zone: tzinfo) -> str:
    """The duration cell: how long the step took, or who settled it and when."""
    if step.settled_by is not None:
        return settled_html(step.settled_by, step.finished_at, zone)
    took = step.finished_at - step.started_at if step.finished_at is not None else None
    return format_duration(took)


def _step_error(error: Any) -> str:
    if not isinstance(error, dict) or not error.get("type"):
        return ""
    message = safe_text.for_page(str(error.get("message", "")))
    if len(message) > MESSAGE_SHOWN:  # all of it is in the step's JSON
        message = message[: MESSAGE_SHOWN - 1] + "…"
    return format_html(STEP_ERROR, type=safe_text.for_page(str(error["type"])), message=message)


def _open_until(found: Workflow) -> datetime:
    # A step without an outcome is still going while its run is live; otherwise it
    # stopped when the run last changed (a blocked run waits for a human, not the step).
    if found.status in (Status.SCHEDULED, Status.RUNNING):
        return timezone.now()
    return found.completed_at or found.updated_at
