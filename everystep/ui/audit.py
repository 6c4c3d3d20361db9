"""The audit page: every write action operators took from the UI or a command, newest
first, a page at a time (keyset paging by entry id). Read-only, with the runs page's
access rule but never public (``access.staff_view``): it names operators and their
reasons, and ``EVERYSTEP_UI_PUBLIC`` opens the pages about runs, not about people."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from everystep.models import AuditEntry
from everystep.safe_text import for_page
from everystep.store import audit
from everystep.ui.access import staff_view
from everystep.ui.run_table import run_hrefs
from everystep.ui.timeline import time_html

# Entries per page.
PAGE_SIZE = 50
# A cursor is an entry id: digits only, and short enough for every database's integers.
CURSOR_MAX_DIGITS = 18
# A filter's or a detail's value is shown up to this many characters.
VALUE_MAX_LENGTH = 200


@staff_view
def entries(request: HttpRequest) -> HttpResponse:
    """The audit entries, newest first, ``PAGE_SIZE`` a page; ``?before=ID`` reads the
    page of entries older than entry ``ID``."""
    raw = request.GET.get("before", "")
    before = _cursor(raw)
    found = audit.recent(before=before, limit=PAGE_SIZE + 1)
    page = found[:PAGE_SIZE]
    here = reverse("everystep:audit")
    context = {
        "nav": "audit",
        "notices": [] if before is not None or not raw else ["Error: not a page of the trail."],
        "time_zone": timezone.get_current_timezone_name(),
        "rows": rows(page),
        "limit": PAGE_SIZE,
        "newest": here if before is not None else None,
        "older": f"{here}?before={page[-1].id}" if len(found) > PAGE_SIZE else None,
    }
    return render(request, "everystep/audit.html", context)


def _cursor(raw: str) -> int | None:
    # Anyone can put anything in a URL: a cursor that is not an entry id reads page one.
    if raw.isascii() and raw.isdigit() and len(raw) <= CURSOR_MAX_DIGITS:
        return int(raw)
    return None


def rows(page: list[AuditEntry]) -> list[dict[str, Any]]:
    """One row of ``audit.html`` per entry: its cells, formatted here."""
    zone, href = timezone.get_current_timezone(), run_hrefs()
    return [_row(entry, zone, href) for entry in page]


def _row(entry: AuditEntry, zone: Any, href: Callable[[object], str]) -> dict[str, Any]:
    runs = _runs(entry, href)
    return {
        "entry": entry,
        "at": time_html(entry.at, zone),
        "via": "UI" if entry.via == "ui" else for_page(entry.via),
        # Typed by operators: a bidi override would show the rest of a row reordered.
        "actor": for_page(entry.actor),
        "reason": for_page(entry.reason),
        "runs": runs,
        # A filter says what it matched; a list of ids past RUN_IDS_KEPT is counted.
        "more": 0 if entry.filter else max(entry.count - len(runs), 0),
        "filter": _pairs(entry.filter) if entry.filter else "",
        "detail": _detail(entry.detail, href),
    }


def _runs(entry: AuditEntry, href: Callable[[object], str]) -> list[dict[str, str]]:
    """The runs the entry names, each with its page's link (a pruned run's page is gone:
    its id stays as the record of what was touched)."""
    ids = [str(entry.run_id)] if entry.run_id else []
    ids += [run_id for run_id in entry.run_ids if run_id not in ids]
    return [{"id": run_id, "href": href(run_id)} for run_id in ids]


def _detail(detail: Any, href: Callable[[object], str]) -> list[dict[str, str]]:
    """What else the action took, one item a key; a fork's new run is a link."""
    if not isinstance(detail, dict):
        return []
    items = []
    for key, value in sorted(detail.items()):
        item = {"key": for_page(str(key).replace("_", " ")), "text": _shown(value)}
        if key == "fork" and isinstance(value, str):
            item["href"] = href(value)
        items.append(item)
    return items


def _pairs(values: Any) -> str:
    """A bulk action's filter as text: ``status=failed, workflow=app.charge``."""
    if not isinstance(values, dict):
        return _shown(values)
    return ", ".join(f"{key}={_shown(value)}" for key, value in sorted(values.items()))


def _shown(value: Any) -> str:
    """A stored value as printable text, cut short (the entry keeps all of it)."""
    if isinstance(value, list):
        text = ", ".join(_shown(item) for item in value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    text = for_page(text)
    return text if len(text) <= VALUE_MAX_LENGTH else text[:VALUE_MAX_LENGTH] + "…"
