"""Read-only pages: the most recent runs, one run (steps, graph, timeline), the runners.

Every page needs an active staff user; anonymous and non-staff users are sent to the
admin login (``settings.LOGIN_URL`` when the admin is not mounted). Run arguments and
results are private by default: ``EVERYSTEP_UI_PUBLIC = True`` (exactly ``True``, read
at each request) opens the pages to everyone, for a UI that sits behind its own
authentication. The views call the store and build a context, nothing more.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render, resolve_url
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from everystep import conf, serde, store
from everystep.errors import EverystepError
from everystep.models import Status
from everystep.store.reports import run_wait
from everystep.ui import actions, run_page
from everystep.ui.timeline import format_duration

RUNS_LIMIT = 200
# Auto-refresh is opt-in per page view (``?refresh=1``): an idle tab costs nothing.
REFRESH_SECONDS = 5
FILTER_MAX_LENGTH = 255
# Text from the query string echoed in a notice is cut to this many characters.
NOTICE_MAX_LENGTH = 500
# A run's arguments, result, error or a step's detail are shown up to this many
# characters of pretty-printed JSON.
JSON_MAX_LENGTH = 100_000

View = Callable[..., HttpResponse]


def _login_url() -> str:
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return resolve_url(settings.LOGIN_URL)


def ui_view(view: View) -> View:
    """Staff only unless ``EVERYSTEP_UI_PUBLIC is True``; GET/HEAD only; never cached."""

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if conf.ui_public():
            return view(request, *args, **kwargs)
        checked = staff_member_required(view, login_url=_login_url())
        return checked(request, *args, **kwargs)

    return never_cache(require_safe(guarded))


def _refresh(request: HttpRequest) -> int | None:
    return REFRESH_SECONDS if request.GET.get("refresh") == "1" else None


@dataclass
class _Filters:
    """The runs page's filters as given, and what was wrong with them."""

    status: str | None = None
    workflow: str | None = None
    runner: str | None = None
    notices: list[str] = field(default_factory=list)
    # False when a filter holds text no database stores, so no run can match it (and
    # PostgreSQL would refuse the query).
    matchable: bool = True
    # The parameters the status links carry on: the filters in use, never one that was
    # ignored (a pasted megabyte would be copied into every link).
    query: QueryDict = field(default_factory=lambda: QueryDict(mutable=True))


def _filters(request: HttpRequest) -> _Filters:
    found = _Filters()
    status = request.GET.get("status") or None
    if status is not None and status not in Status.values:
        found.notices.append(
            f"Unknown status {_clipped(status)!r} ignored; use one of {', '.join(Status.values)}."
        )
        status = None
    found.status = status
    found.workflow = _text_filter(request, "workflow", found)
    found.runner = _text_filter(request, "runner", found)
    if _refresh(request):
        found.query["refresh"] = "1"
    return found


def _text_filter(request: HttpRequest, param: str, found: _Filters) -> str | None:
    value = request.GET.get(param, "").strip()
    try:
        serde.storable_text(value, f"The {param} filter")
    except EverystepError as exc:
        found.notices.append(f"{exc}; no run matches it.")
        found.matchable = False
        return _clipped(serde.printable(value))
    if len(value) > FILTER_MAX_LENGTH:
        found.notices.append(f"The {param} filter is longer than {FILTER_MAX_LENGTH} characters.")
        return None
    if value:
        found.query[param] = value
    return value or None


def _clipped(text: str) -> str:
    return text if len(text) <= NOTICE_MAX_LENGTH else text[:NOTICE_MAX_LENGTH] + "…"


def _pretty(value: Any) -> str:
    # printable: a row stored before values were escaped may hold a lone surrogate
    # (SQLite took them), which no response can encode.
    text = serde.printable(
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    )
    if len(text) <= JSON_MAX_LENGTH:
        return text
    # A browser chokes on a page of many megabytes; the whole value is one command away.
    return (
        f"{text[:JSON_MAX_LENGTH]}\n… cut at {JSON_MAX_LENGTH:,} of {len(text):,} "
        "characters: manage.py everystep_show RUN_ID --json prints it all"
    )


def _span(start: datetime | None, end: datetime | None) -> timedelta | None:
    return end - start if start is not None and end is not None else None


@ui_view
def runs(request: HttpRequest) -> HttpResponse:
    """The most recent runs, newest first, filtered by status, workflow name and runner."""
    given = _filters(request)
    if given.matchable:
        runs = store.list_runs(
            status=given.status, name=given.workflow, runner=given.runner, limit=RUNS_LIMIT
        )
        counts = store.status_counts(name=given.workflow)
    else:
        runs, counts = [], dict.fromkeys(Status.values, 0)
    now = timezone.now()
    rows = [
        {
            "run": run,
            "duration": format_duration(_span(run.started_at, run.completed_at)),
            "wait": run_wait(run, now),
        }
        for run in runs
    ]
    context = {
        "nav": "runs",
        "notices": given.notices,
        "refresh_seconds": _refresh(request),
        "statuses": Status.values,
        "query": given.query,
        "counts": counts,
        "count_cap": store.COUNT_CAP,
        "status": given.status,
        "workflow": given.workflow,
        "runner": given.runner,
        "rows": rows,
        "limit": RUNS_LIMIT,
    }
    return render(request, "everystep/runs.html", context)


@ui_view
def run(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """One run: arguments, outcome, steps, their fork/sequence graph and timeline."""
    found = store.get_run(run_id)
    if found is None:
        raise Http404(f"no run with id {run_id}")
    # The steps, paged and collapsed for runs of thousands of steps (ui.run_page).
    steps = run_page.steps_context(request, found, _pretty)
    # ``error`` comes from an action's redirect, but anyone can put anything in a URL.
    notices = [f"Error: {_clipped(request.GET['error'])}"] if request.GET.get("error") else []
    if request.GET.get("done") in actions.DONE:
        notices.append(actions.DONE[request.GET["done"]])
    context = {
        "nav": "runs",
        "notices": notices + steps.pop("step_notices"),
        "refresh_seconds": _refresh(request),
        "run": found,
        "wait": run_wait(found),
        "can": actions.allowed_actions(request, found),
        "duration": format_duration(_span(found.started_at, found.completed_at)),
        "args_json": _pretty(found.args),
        "result_json": _pretty(found.result),
        "error_json": _pretty(found.error),
        "error": _headline(found.error),
        **steps,
    }
    return render(request, "everystep/run.html", context)


def _headline(error: Any) -> dict[str, str]:
    """The type and message of a run's error, printable whatever the row holds."""
    if not isinstance(error, dict) or not error.get("type"):
        return {}
    return {key: serde.printable(str(error.get(key, ""))) for key in ("type", "message")}


@ui_view
def runners(request: HttpRequest) -> HttpResponse:
    """The runners' heartbeat rows and the runs each one holds."""
    now = timezone.now()
    held = store.held_runs()
    # A heartbeat missed three times over is worth a look long before orphan recovery.
    late_after = 3 * conf.worker_default("heartbeat")
    rows = []
    for runner in store.list_runners():
        age = now - runner.last_seen
        rows.append(
            {
                "runner": runner,
                "held": held.pop(runner.name, 0),
                "age": format_duration(age),
                "late": age.total_seconds() > late_after,
            }
        )
    context = {
        "nav": "runners",
        "refresh_seconds": _refresh(request),
        "rows": rows,
        "unknown_holders": sorted(held.items()),
        "running": Status.RUNNING.value,
    }
    return render(request, "everystep/runners.html", context)
