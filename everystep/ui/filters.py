"""What the runs page is asked for: filters (the parent run among them), the search box,
the time window, the paging cursor and the published key shown as a column, read from
the query string once.

Anything can be in a URL: what cannot be used becomes a notice on the page, never an
error page. A filter no database could store (a NUL, a lone surrogate) matches no run.
What the page shows of the query (``shown``, ``notices``) is written with the bidi
controls escaped (``safe_text.for_page``): a URL's ``\u202e`` would otherwise show the
rest of a field or a notice in another order than it is. The filters themselves match
the text as given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.http import HttpRequest, QueryDict
from django.utils import timezone

from everystep import safe_text
from everystep.errors import EverystepError
from everystep.models import Status
from everystep.times import parse_moment
from everystep.ui import progress

FILTER_MAX_LENGTH = 255
# Text from the query string echoed in a notice is cut to this many characters.
NOTICE_MAX_LENGTH = 500
# The longest text a run id can be written as (a URN with braces is shorter).
RUN_ID_MAX_LENGTH = 64


@dataclass
class RunsQuery:
    """The runs page's filters as given, and what was wrong with them."""

    status: str | None = None
    workflow: str | None = None
    runner: str | None = None
    parent: UUID | None = None
    # A Django task's queue (``everystep.tasks``).
    queue: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    search: str | None = None
    older_than: UUID | None = None
    newer_than: UUID | None = None
    # A published key shown as a column (``?show=stage``): not a filter.
    show: str | None = None
    # The text of each field as the form shows it again (``safe_text.for_page``).
    shown: dict[str, str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    # False when a filter holds text no database stores, so no run can match it (and
    # PostgreSQL would refuse the query).
    matchable: bool = True
    # The parameters links carry on (status, paging): the filters in use, never one that
    # was ignored (a pasted megabyte would be copied into every link), never the cursor.
    query: QueryDict = field(default_factory=lambda: QueryDict(mutable=True))

    @property
    def paging(self) -> bool:
        return self.older_than is not None or self.newer_than is not None

    def list_filters(self) -> dict[str, Any]:
        """The keyword arguments of ``store.list_runs`` for this query (but ``limit``)."""
        return self.count_filters() | {
            "status": self.status,
            "search": self.search,
            "older_than": self.older_than,
            "newer_than": self.newer_than,
        }

    def count_filters(self) -> dict[str, Any]:
        """Those of ``store.status_counts``: what narrows the runs but the status and
        the search (the counts tell what the status links would list)."""
        return {
            "name": self.workflow,
            "runner": self.runner,
            "parent": self.parent,
            "queue": self.queue,
            "created_after": self.created_after,
            "created_before": self.created_before,
        }


def read(request: HttpRequest, *, refresh: bool) -> RunsQuery:
    """The runs page's query, checked; ``refresh``: auto-refresh is on."""
    found = RunsQuery()
    found.status = _status(request, found)
    found.workflow = _text(request, "workflow", "The workflow filter", found)
    found.runner = _text(request, "runner", "The runner filter", found)
    found.parent = _parent(request, found)
    found.queue = _text(request, "queue", "The queue filter", found)
    found.search = _text(request, "q", "The search", found)
    found.created_after = _moment(request, "created_after", found)
    found.created_before = _moment(request, "created_before", found)
    found.older_than = _cursor(request, "older", found)
    found.newer_than = _cursor(request, "newer", found) if found.older_than is None else None
    found.show = _show(request, found)
    if refresh:
        found.query["refresh"] = "1"
    found.notices = [safe_text.for_page(notice) for notice in found.notices]
    return found


def clipped(text: str) -> str:
    """``text`` cut to a length a notice can echo."""
    return text if len(text) <= NOTICE_MAX_LENGTH else text[:NOTICE_MAX_LENGTH] + "…"


def _status(request: HttpRequest, found: RunsQuery) -> str | None:
    status = request.GET.get("status") or None
    if status is not None and status not in Status.values:
        found.notices.append(
            f"Unknown status {clipped(status)!r} ignored; use one of {', '.join(Status.values)}."
        )
        return None
    if status is not None:
        found.query["status"] = status
    return status


def _text(request: HttpRequest, param: str, what: str, found: RunsQuery) -> str | None:
    value = request.GET.get(param, "").strip()
    try:
        safe_text.storable_text(value, what)
    except EverystepError as exc:
        found.notices.append(f"{exc}; no run matches it.")
        found.matchable = False
        found.shown[param] = clipped(safe_text.for_page(value))
        return None
    if len(value) > FILTER_MAX_LENGTH:
        found.notices.append(f"{what} is longer than {FILTER_MAX_LENGTH} characters.")
        if param == "q":
            # No run id or key is that long: the search finds nothing. A filter is
            # dropped instead, as the page has always done.
            found.notices.append("No run matches a search that long.")
            found.matchable = False
        return None
    if value:
        found.query[param] = value
        found.shown[param] = safe_text.for_page(value)
    return value or None


def _show(request: HttpRequest, found: RunsQuery) -> str | None:
    """The published key to show as a column; a key ``publish`` would refuse shows no
    column and says why."""
    key = request.GET.get("show", "").strip()
    if not key:
        return None
    problem = progress.key_problem(key)
    if problem is not None:
        found.notices.append(f"No column for {clipped(safe_text.printable(key))!r}: {problem}.")
        found.shown["show"] = clipped(safe_text.for_page(key))
        return None
    found.query["show"] = key
    found.shown["show"] = safe_text.for_page(key)
    return key


def _moment(request: HttpRequest, param: str, found: RunsQuery) -> datetime | None:
    """A time filter: ``YYYY-MM-DD[THH:MM[:SS]]`` in the project's time zone (what a
    datetime-local field sends), or with an explicit UTC offset."""
    text = request.GET.get(param, "").strip()
    if not text:
        return None
    what = param.replace("_", " ")
    try:
        moment = parse_moment(text)
    except ValueError:
        found.notices.append(
            f"The {what} time {clipped(safe_text.printable(text))!r} ignored; "
            "write it as YYYY-MM-DD or YYYY-MM-DDTHH:MM."
        )
        return None
    # Written back in the project's time zone, as the datetime-local field takes it.
    local = timezone.localtime(moment)
    shown = local.replace(tzinfo=None).isoformat("T", "minutes" if local.second == 0 else "seconds")
    found.query[param] = found.shown[param] = shown
    return moment


def _parent(request: HttpRequest, found: RunsQuery) -> UUID | None:
    """The parent filter: a run id. Anything else matches no run, and says so (listing
    every run instead would pass them off as its children)."""
    text = request.GET.get("parent", "").strip()
    if not text:
        return None
    parent = parse_run_id(text)
    if parent is None:
        shown = clipped(safe_text.printable(text))
        found.notices.append(
            f"The parent filter {shown!r} is not a run id (a UUID); no run matches it."
        )
        found.matchable = False
        found.shown["parent"] = clipped(safe_text.for_page(text))
        return None
    found.query["parent"] = found.shown["parent"] = str(parent)
    return parent


def _cursor(request: HttpRequest, param: str, found: RunsQuery) -> UUID | None:
    text = request.GET.get(param, "").strip()
    if not text:
        return None
    cursor = parse_run_id(text)
    if cursor is None:
        found.notices.append(f"The paging position {clipped(safe_text.printable(text))!r} ignored.")
    return cursor


def parse_run_id(value: object) -> UUID | None:
    """``value`` as a run id, or None if it is not text that writes one."""
    if not isinstance(value, str) or len(value) > RUN_ID_MAX_LENGTH:
        return None
    try:
        return UUID(value)
    except ValueError:
        return None
