"""Bulk actions from the runs page: cancel, requeue or fork every run its filters match.

- ``GET runs/bulk/?action=cancel&<the page's filters>``, the confirm page: the filters,
  how many runs the action would change (counted up to ``COUNT_CAP``; past it "more
  than"), and a button;
- ``POST runs/bulk/do/?<the same>``: the action, in batches (``store.bulk``), then back
  to the runs list with ``bulk=<action>&count=<n>``, which the list turns into its
  notice: a key and numbers, never text a URL could forge.

The rules of the run page's actions (``actions.run_action``) hold: an active staff user
holding the action's permission, checked for the page and again for the POST (also when
the read-only pages are public); a CSRF-protected POST; a log line naming the user. The
filters are read as the runs page reads them, and an action whose filters could be wider
than what the list showed (no filter, a search, a filter the page ignored) is refused,
never widened.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from everystep.errors import EverystepError
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.reports import COUNT_CAP
from everystep.ui import filters, log
from everystep.ui.access import check_act, may_act, secured, ui_view
from everystep.ui.actions import PERMISSIONS

# The action's verb, as a button says it and as the notice after it says it.
VERBS = {
    "cancel": ("Cancel", "Cancelled"),
    "requeue": ("Requeue", "Requeued"),
    "fork": ("Fork", "Forked"),
}
# What each action changes of the runs that match.
CHANGES = {
    "cancel": "the unfinished ones end as cancelled, with their unfinished children",
    "requeue": "the running ones go back to scheduled; any worker resumes them",
    "fork": "each finished one is forked from its first failed step",
}
# Counts in a notice are at most this many digits (anyone can put anything in a URL).
COUNT_DIGITS = 12


def _may(user: Any, action: str) -> bool:
    return may_act(user, PERMISSIONS[action])


def _check(request: HttpRequest) -> str:
    """The action asked for, if this user may take it; else 404 or 403."""
    action = request.GET.get("action", "")
    if action not in VERBS:
        raise Http404("no such bulk action")
    check_act(request.user, PERMISSIONS[action], f"bulk {action}")
    return action


def _why_not(asked: filters.RunsQuery) -> str | None:
    """Why the page's filters cannot name the runs of a bulk action, or None."""
    if asked.search is not None:
        return "A bulk action uses the filters, not the search: clear the search box."
    if asked.notices or not asked.matchable:
        return "A filter was not understood (see above): fix it first."
    return None


def _run_filter(asked: filters.RunsQuery) -> bulk.RunFilter | None:
    try:
        return bulk.RunFilter(
            workflow=asked.workflow,
            status=asked.status,
            created_after=asked.created_after,
            created_before=asked.created_before,
            runner=asked.runner,
            parent=asked.parent,
            queue=asked.queue,
        )
    except EverystepError:  # no filter at all
        return None


def _link(name: str, action: str, query: QueryDict, **more: str) -> str:
    changed = query.copy()
    changed.pop("refresh", None)
    for key, value in ({"action": action} if action else {}).items() | more.items():
        changed[key] = value
    return f"{reverse(name)}?{changed.urlencode()}"


def offers(request: HttpRequest, asked: filters.RunsQuery) -> list[dict[str, str]]:
    """The runs page's bulk links: one per action this user may take, when the page is
    filtered by what a bulk action can use."""
    if _why_not(asked) is not None or _run_filter(asked) is None:
        return []
    return [
        {
            "label": f"{verb} the runs matching this filter",
            "href": _link("everystep:bulk", action, asked.query),
        }
        for action, (verb, _) in VERBS.items()
        if _may(request.user, action)
    ]


def done_notices(request: HttpRequest) -> list[str]:
    """What the runs page says after a bulk action (``bulk``, ``count``, ``refused``)."""
    action, done, refused = (request.GET.get(key, "") for key in ("bulk", "count", "refused"))
    if action not in VERBS or not _number(done):
        return []
    said = f"{VERBS[action][1]} {int(done):,} run{'' if int(done) == 1 else 's'}."
    if _number(refused) and int(refused):
        said += f" {int(refused):,} could not be forked: fork one from its page to see why."
    return [said]


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= COUNT_DIGITS


@ui_view
def confirm(request: HttpRequest) -> HttpResponse:
    """How many runs the action would change, and a button to confirm it."""
    action = _check(request)
    asked = filters.read(request, refresh=False)
    problem = _why_not(asked)
    run_filter = None if problem else _run_filter(asked)
    if problem is None and run_filter is None:
        problem = "Choose at least one filter on the runs page first (a status for all runs)."
    matched = 0 if run_filter is None else bulk.count(run_filter, action, cap=COUNT_CAP)
    context = {
        "nav": "runs",
        "notices": asked.notices,
        "action": action,
        "verb": VERBS[action][0],
        "past": VERBS[action][1].lower(),
        "changes": CHANGES[action],
        "problem": problem,
        "filters": [] if run_filter is None else list(run_filter.as_json().items()),
        "matched": matched,
        "count_text": _count_text(matched),
        "post_href": _link("everystep:bulk-do", action, asked.query),
        "back_href": _link("everystep:runs", "", asked.query),
    }
    return render(request, "everystep/bulk.html", context)


def _count_text(matched: int) -> str:
    if matched > COUNT_CAP:
        return f"more than {COUNT_CAP:,} runs"
    return f"{matched:,} run{'' if matched == 1 else 's'}"


# csrf_protect: enforced even in a project that left CsrfViewMiddleware out.
@secured
@csrf_protect
@require_POST
def perform(request: HttpRequest) -> HttpResponse:
    """Take the action on every run that matches, batch by batch, then go back to the
    runs list, which says how many runs it changed."""
    action = _check(request)
    asked = filters.read(request, refresh=False)
    run_filter = None if _why_not(asked) else _run_filter(asked)
    if run_filter is None:  # the confirm page says why
        return HttpResponseRedirect(_link("everystep:bulk", action, asked.query))
    actor = Actor.user(request.user)
    done, refused = _take(action, run_filter, actor)
    log.info(
        "bulk %s by %s (filter %s): %d run(s)",
        action,
        actor.name,
        run_filter,
        done,
        extra={"event": f"ui.bulk_{action}", "user": actor.name, "count": done},
    )
    result = {"bulk": action, "count": str(done)} | ({"refused": str(refused)} if refused else {})
    return HttpResponseRedirect(_link("everystep:runs", "", asked.query, **result))


def _take(action: str, run_filter: bulk.RunFilter, actor: Actor) -> tuple[int, int]:
    """Runs changed, and runs refused (a fork's)."""
    if action == "cancel":
        return bulk.bulk_cancel(run_filter, actor), 0
    if action == "requeue":
        return bulk.bulk_requeue(run_filter, actor), 0
    # Imported when used: the fork's replay machinery loads for a fork only.
    from everystep.engine.bulk_fork import bulk_fork

    forked = bulk_fork(run_filter, actor)
    return forked.forked, forked.refused
