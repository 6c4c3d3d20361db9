"""Read-only pages: the most recent runs, one run (steps, graph, timeline), the runners.

Every page needs an active staff user (``access.ui_view``). Run arguments and results
are private by default: ``EVERYSTEP_UI_PUBLIC = True`` opens the pages to everyone, for
a UI that sits behind its own authentication. The views call the store and build a
context, nothing more.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from everystep import conf, safe_text
from everystep.models import Status, Workflow
from everystep.store.carrying import waiting_for_code
from everystep.store.reports import COUNT_CAP, ID_PREFIX_MIN, list_runs, run_wait, status_counts
from everystep.store.runners import held_runs, list_runners
from everystep.store.runs import get_run
from everystep.task_runs import split_call
from everystep.ui import actions, bulk, filters, progress, run_page
from everystep.ui.access import ui_view
from everystep.ui.family import family_context
from everystep.ui.filters import clipped as _clipped
from everystep.ui.notices import run_notices
from everystep.ui.run_table import count_label, run_hrefs, run_rows, span
from everystep.ui.timeline import format_duration

# Runs per page of the runs list.
RUNS_LIMIT = 200
# Auto-refresh is opt-in per page view (``?refresh=1``): an idle tab costs nothing.
REFRESH_SECONDS = 5
# A run's arguments, result, error or a step's detail are shown up to this many
# characters of pretty-printed JSON.
JSON_MAX_LENGTH = 100_000
# JSON up to this many characters is shown on one line, longer values indented.
JSON_ONE_LINE = 80


def _refresh(request: HttpRequest) -> int | None:
    return REFRESH_SECONDS if request.GET.get("refresh") == "1" else None


def _pretty(value: Any) -> str:
    # A value short enough to read on one line stays on one: json's C encoder writes it,
    # where indent= falls back to the pure-Python one (most of a 2,000-step table's time).
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > JSON_ONE_LINE:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    # for_page: a row stored before values were escaped may hold a lone surrogate
    # (SQLite took them), which no response can encode, and a bidi override would show
    # what follows it in another order.
    text = safe_text.for_page(text)
    if len(text) <= JSON_MAX_LENGTH:
        return text
    # A browser chokes on a page of many megabytes; the whole value is one command away.
    return (
        f"{text[:JSON_MAX_LENGTH]}\n… cut at {JSON_MAX_LENGTH:,} of {len(text):,} "
        "characters: manage.py everystep_show RUN_ID --json prints it all"
    )


@ui_view
def runs(request: HttpRequest) -> HttpResponse:
    """The most recent runs, newest first, a page at a time: filtered by status, workflow
    name, runner, parent run and creation time, or searched by run id, id prefix or
    idempotency key. A search that finds exactly one run opens it."""
    asked = filters.read(request, refresh=_refresh(request) is not None)
    found = list_runs(**asked.list_filters(), limit=RUNS_LIMIT + 1) if asked.matchable else []
    if asked.search is not None and not asked.paging and len(found) == 1:
        return redirect("everystep:run", found[0].id)
    # Counted only for a page that shows them: a search's single hit is answered above.
    counts = (
        status_counts(**asked.count_filters())
        if asked.matchable
        else dict.fromkeys(Status.values, 0)
    )
    page = _page(found, asked)
    # The ``?show=`` column: one read for the page's runs, whatever their number.
    column = progress.column(page.runs, asked.show) if asked.show and page.runs else None
    if asked.search is not None and not found:
        asked.notices.append(_no_match(asked.search))
    context = {
        "nav": "runs",
        "notices": [*bulk.done_notices(request), *asked.notices],
        "bulk": bulk.offers(request, asked),
        "refresh_seconds": _refresh(request),
        "statuses": Status.values,
        "all_href": _runs_link(asked.query, status=None),
        "counts": [
            (name, count_label(count), _runs_link(asked.query, status=name))
            for name, count in counts.items()
        ],
        "count_cap": f"{COUNT_CAP:,}",
        "status": asked.status,
        "shown": asked.shown,
        "q": asked.shown.get("q", ""),
        "time_zone": timezone.get_current_timezone_name(),
        "rows": run_rows(page.runs, column),
        "show": asked.shown.get("show") if asked.show else None,
        "parent": _parent_filter(asked),
        "page": page,
        "limit": RUNS_LIMIT,
        "paging": {
            "newest": _runs_link(asked.query),
            "newer": _runs_link(asked.query, newer=page.newer) if page.newer else None,
            "older": _runs_link(asked.query, older=page.older) if page.older else None,
        },
    }
    return render(request, "everystep/runs.html", context)


def _runs_link(query: QueryDict, **changes: object) -> str:
    """The runs page with ``query`` changed (None drops a parameter). Links start from
    the page's path, since an empty query string would keep the cursor; built here, not
    with ``{% querystring %}``, which writes a bare "?" for nothing under Django 6 only."""
    changed = query.copy()
    for key, value in changes.items():
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = str(value)
    text = changed.urlencode()
    return reverse("everystep:runs") + (f"?{text}" if text else "")


@dataclass(frozen=True)
class _Page:
    """One page of the runs list, and the cursors of its neighbours (None: no link)."""

    runs: list[Workflow]
    older: UUID | None
    newer: UUID | None
    # Not the first page: a link back to the newest runs.
    paged: bool


def _page(found: list[Workflow], asked: filters.RunsQuery) -> _Page:
    # ``found`` holds one run more than a page when there is more in the direction read.
    more = len(found) > RUNS_LIMIT
    if asked.newer_than is not None:
        # Read upwards from the cursor: the extra run is the newest one.
        runs = found[1:] if more else found
        has_older, has_newer = True, more
    else:
        runs = found[:RUNS_LIMIT]
        has_older, has_newer = more, asked.older_than is not None
    # An empty page (everything past the cursor was pruned) links to the newest only.
    return _Page(
        runs=runs,
        older=runs[-1].id if runs and has_older else None,
        newer=runs[0].id if runs and has_newer else None,
        paged=asked.paging,
    )


def _parent_filter(asked: filters.RunsQuery) -> dict[str, str] | None:
    """The parent run the list is narrowed to: its id, its page, and the list without
    that filter."""
    if asked.parent is None:
        return None
    return {
        "id": str(asked.parent),
        "href": run_hrefs()(asked.parent),
        "clear_href": _runs_link(asked.query, parent=None),
    }


def _no_match(search: str) -> str:
    digits = search.replace("-", "").lower()
    hint = ""
    if len(digits) < ID_PREFIX_MIN and set(digits) <= set(string.hexdigits.lower()):
        hint = f" (an id prefix needs at least {ID_PREFIX_MIN} hex digits)"
    return (
        f"No run matches {_clipped(search)!r}: no run id starts with it and no "
        f"idempotency key is exactly it{hint}."
    )


@ui_view
def run(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """One run: arguments, the values it published, outcome, parent and children, steps,
    their fork/sequence graph and timeline."""
    found = get_run(run_id)
    if found is None:
        raise Http404(f"no run with id {run_id}")
    # The steps, paged and collapsed for runs of thousands of steps (ui.run_page).
    steps = run_page.steps_context(request, found, _pretty)
    # Its parent and children: read only for a run that has them (ui.family).
    family = family_context(found, steps.pop("started_children"))
    # ``error`` and ``done`` come from an action's redirect: keys, never text.
    notices = run_notices(request.GET, actions.DONE, found)
    refresh = _refresh(request)
    # Kept up to date by the page's auto-refresh; one link turns it on.
    shown = progress.run_context(
        found, _pretty, None if refresh else run_page.page_href(request, refresh="1") + "#published"
    )
    context = {
        "nav": "runs",
        "notices": notices + steps.pop("step_notices"),
        "refresh_seconds": refresh,
        "run": found,
        "wait": run_wait(found),
        "can": actions.allowed_actions(request, found),
        "confirm": actions.new_confirmation(),
        "duration": format_duration(span(found.started_at, found.completed_at)),
        "args_json": _pretty(found.args),
        **_task_context(found),
        "result_json": _pretty(found.result),
        "error_json": _pretty(found.error),
        "error": _headline(found.error),
        "idempotency_key": safe_text.for_page(found.idempotency_key or ""),
        "claimed_by": safe_text.for_page(found.claimed_by or ""),
        **family,
        **steps,
        **shown,
    }
    return render(request, "everystep/run.html", context)


def _task_context(found: Workflow) -> dict[str, Any]:
    """A Django task's run (``everystep.tasks``): its queue, its attempts, and its stored
    ``[args, kwargs]`` shown apart. Nothing for other runs."""
    if found.queue is None:
        return {}
    attempts = []
    for attempt in found.attempts or []:
        if isinstance(attempt, dict):
            try:
                at = datetime.fromisoformat(str(attempt.get("at")))
            except ValueError:
                at = None
            # printable: the JSON column holds whatever was written to it.
            worker = safe_text.printable(str(attempt.get("worker", "")))
            attempts.append({"worker": worker, "at": at})
    context: dict[str, Any] = {"task": {"queue": found.queue, "attempts": attempts}}
    # Split as stored (serde's tagged form, as every other value on the page is shown),
    # not decoded as task_runs.stored_call does: the page shows what the row holds, not
    # what this process can rebuild of it.
    split = split_call(found.args)
    if split is not None:
        context["args_json"] = _pretty(split[0])
        context["kwargs_json"] = _pretty(split[1])
    return context


def _headline(error: Any) -> dict[str, str]:
    """The type and message of a run's error, shown safely whatever the row holds, the
    message cut as a step row's is (all of it is in the stored error below)."""
    if not isinstance(error, dict) or not error.get("type"):
        return {}
    shown = {key: safe_text.for_page(str(error.get(key, ""))) for key in ("type", "message")}
    if len(shown["message"]) > run_page.MESSAGE_SHOWN:
        shown["message"] = shown["message"][: run_page.MESSAGE_SHOWN - 1] + "…"
    return shown


@ui_view
def runners(request: HttpRequest) -> HttpResponse:
    """The runners' heartbeat rows and the runs each one holds; dead runners that still
    hold runs stand out, with an action to requeue them."""
    now = timezone.now()
    held = held_runs()
    # A heartbeat missed three times over is worth a look long before orphan recovery.
    heartbeat = conf.worker_default("heartbeat")
    late_after = 3 * heartbeat
    orphan_timeout = conf.worker_default("orphan_timeout")
    rows = []
    for runner in list_runners():
        age = now - runner.last_seen
        count = held.pop(runner.name, 0)
        rows.append(
            {
                "runner": runner,
                "held": count,
                "age": format_duration(age),
                "late": age.total_seconds() > late_after,
                # Dead as the requeue command sees it: silent past the orphan timeout.
                "dead": count > 0 and not runner.may_be_alive(orphan_timeout, heartbeat),
            }
        )
    context = {
        "nav": "runners",
        "notices": actions.runner_notices(request),
        "refresh_seconds": _refresh(request),
        "rows": rows,
        "unknown_holders": sorted(held.items()),
        "waiting_for_code": waiting_for_code(),
        "running": Status.RUNNING.value,
        "can_requeue": actions.may_requeue_runners(request),
    }
    return render(request, "everystep/runners.html", context)
