"""Bulk actions from the runs page: cancel, requeue or fork every run its filters match.

- ``GET runs/bulk/?action=cancel&<the page's filters>``, the confirm page: the filters,
  how many runs the action would change (counted up to ``COUNT_CAP``; past it "more
  than"), and a button;
- ``POST runs/bulk/do/?<the same>``: the action. Up to ``INLINE_LIMIT`` runs it is taken
  in the request, in batches (``store.bulk``), then back to the runs list with
  ``bulk=<action>&count=<n>``; more are handed to a background run of everystep itself
  (``builtins.bulk_action``), and the list says so with a link to that run
  (``bulk=<action>&background=<run id>``). Either way the list's notice is made of a key,
  numbers and a run id, never of text a URL could forge.

The confirm page's form carries a fresh confirmation: the same form sent twice (a double
click, a reload) acts once. The second POST finds the audit entry the first one made and
goes back to what it did.

The rules of the run page's actions (``actions.run_action``) hold: an active staff user
holding the action's permission, checked for the page and again for the POST (also when
the read-only pages are public); a CSRF-protected POST; a log line naming the user. The
filters are read as the runs page reads them, and an action whose filters could be wider
than what the list showed (no filter, a search, a filter the page ignored) is refused,
never widened.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from everystep.builtins.bulk_action import NAME, hand_over
from everystep.errors import EverystepError
from everystep.models import AuditEntry
from everystep.safe_text import for_page
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.forks import BUILTIN_WORKFLOWS
from everystep.store.reports import COUNT_CAP
from everystep.ui import filters, log
from everystep.ui.access import check_act, may_act, secured, ui_view
from everystep.ui.actions import PERMISSIONS, confirmation_key, new_confirmation

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
# What a bulk fork says of the matching runs of everystep's own workflows it leaves out.
SKIPPED = (
    f"of everystep's own ({', '.join(sorted(BUILTIN_WORKFLOWS))}) left out: they cannot "
    "be forked; start a new bulk action instead."
)
# Counts in a notice are at most this many digits (anyone can put anything in a URL).
COUNT_DIGITS = 12
# The most runs one POST acts on itself; more are handed to a background run, so no
# request takes longer than a few hundred short batches' worth of work (issue 39).
INLINE_LIMIT = 500


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
    """What the runs page says after a bulk action (``bulk``, then ``count`` and
    ``refused``, or ``background``)."""
    keys = ("bulk", "count", "refused", "skipped")
    action, done, refused, skipped = (request.GET.get(key, "") for key in keys)
    if action not in VERBS:
        return []
    background = _run_id(request.GET.get("background", ""))
    if background is not None:
        return [_background_notice(action, background)]
    if not _number(done):
        return []
    said = f"{VERBS[action][1]} {int(done):,} run{'' if int(done) == 1 else 's'}."
    if _number(refused) and int(refused):
        said += f" {int(refused):,} could not be forked: fork one from its page to see why."
    if _number(skipped) and int(skipped):
        said += f" {int(skipped):,} {SKIPPED}"
    return [said]


def _background_notice(action: str, run_id: UUID) -> str:
    return format_html(
        "More than {} runs: a background run takes the {} batch by batch, {}. Its page "
        "shows how far it got, and cancelling it there stops it; the audit page counts "
        "the runs done.",
        f"{INLINE_LIMIT:,}",
        action,
        format_html(
            '<a href="{}">{} ({})</a>', reverse("everystep:run", args=[run_id]), run_id, NAME
        ),
    )


def _run_id(text: str) -> UUID | None:
    try:
        return UUID(text) if len(text) == 36 else None
    except ValueError:
        return None


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
        # As typed into a URL: a bidi control would show the rest in another order.
        "filters": [] if run_filter is None else _shown_filters(run_filter),
        "skipped": _skipped(action, run_filter),
        "matched": matched,
        "count_text": _count_text(matched),
        "background": matched > INLINE_LIMIT,
        "inline_limit": f"{INLINE_LIMIT:,}",
        "confirm": new_confirmation(),
        "post_href": _link("everystep:bulk-do", action, asked.query),
        "back_href": _link("everystep:runs", "", asked.query),
    }
    return render(request, "everystep/bulk.html", context)


def _shown_filters(run_filter: bulk.RunFilter) -> list[tuple[str, str]]:
    return [(name, for_page(value)) for name, value in run_filter.as_json().items()]


def _skipped(action: str, run_filter: bulk.RunFilter | None) -> str:
    """What the confirm page of a bulk fork says of the runs it leaves out."""
    if action != "fork" or run_filter is None:
        return ""
    skipped = bulk.builtin_matches(run_filter)
    return f"{skipped:,} finished run{'' if skipped == 1 else 's'} {SKIPPED}" if skipped else ""


def _count_text(matched: int) -> str:
    if matched > COUNT_CAP:
        return f"more than {COUNT_CAP:,} runs"
    return f"{matched:,} run{'' if matched == 1 else 's'}"


# csrf_protect: enforced even in a project that left CsrfViewMiddleware out.
@secured
@csrf_protect
@require_POST
def perform(request: HttpRequest) -> HttpResponse:
    """Take the action on every run that matches, batch by batch, in the request or
    (more than ``INLINE_LIMIT`` runs) in a background run, then go back to the runs
    list, which says what was done."""
    action = _check(request)
    asked = filters.read(request, refresh=False)
    run_filter = None if _why_not(asked) else _run_filter(asked)
    if run_filter is None:  # the confirm page says why
        return HttpResponseRedirect(_link("everystep:bulk", action, asked.query))
    actor = Actor.user(request.user)
    # The form's confirmation, bound to this user and filter; None for a POST without
    # one (a script): it acts each time.
    confirmation = confirmation_key(
        request.POST.get("confirm", ""), f"bulk_{action}", actor, _scope(run_filter)
    )
    sent = bulk.confirmed_entry(confirmation) if confirmation else None
    if sent is not None:  # the same form again: back to what the first one did
        return _back(asked, action, _sent_before(sent))
    if bulk.count(run_filter, action, cap=INLINE_LIMIT) > INLINE_LIMIT:
        run = hand_over(action, run_filter, actor, confirmation=confirmation)
        if run is None:  # a request of this confirmation took the action itself
            return _back(asked, action, _sent_before(_entry_of(confirmation)))
        _log(action, actor, run_filter, f"handed to the background run {run.id}", 0)
        return _back(asked, action, {"background": str(run.id)})
    entry = None
    if confirmation is not None:
        entry, made = bulk.open_confirmed_entry(action, actor, run_filter, confirmation)
        if not made:  # a request of this confirmation at the same moment won
            return _back(asked, action, _sent_before(entry))
    done, refused, skipped = _take(action, run_filter, actor, entry, confirmation)
    _log(action, actor, run_filter, f"{done} run(s)", done)
    result = {"count": str(done)} | _nonzero(refused=refused, skipped=skipped)
    return _back(asked, action, result)


def _scope(run_filter: bulk.RunFilter) -> str:
    """What a bulk confirmation confirms: the filter, written one way."""
    return json.dumps(run_filter.as_json(), sort_keys=True)


def _entry_of(confirmation: str | None) -> AuditEntry:
    entry = bulk.confirmed_entry(confirmation) if confirmation else None
    assert entry is not None  # hand_over returns None only when there is one
    return entry


def _nonzero(**counts: int) -> dict[str, str]:
    return {name: str(value) for name, value in counts.items() if value}


def _back(asked: filters.RunsQuery, action: str, result: dict[str, str]) -> HttpResponseRedirect:
    """To the runs list, whose notice says ``result``."""
    return HttpResponseRedirect(_link("everystep:runs", "", asked.query, bulk=action, **result))


def _sent_before(entry: AuditEntry) -> dict[str, str]:
    """What the first POST of a confirmation did, as the runs list's notice says it."""
    run = entry.detail.get("run") if isinstance(entry.detail, dict) else None
    return {"background": str(run)} if run else {"count": str(entry.count)}


def _log(action: str, actor: Actor, run_filter: bulk.RunFilter, what: str, count: int) -> None:
    log.info(
        "bulk %s by %s (filter %s): %s",
        action,
        actor.name,
        run_filter,
        what,
        extra={"event": f"ui.bulk_{action}", "user": actor.name, "count": count},
    )


def _take(
    action: str,
    run_filter: bulk.RunFilter,
    actor: Actor,
    entry: AuditEntry | None,
    confirmation: str | None,
) -> tuple[int, int, int]:
    """Runs changed, runs refused (a fork's), and runs of everystep's own a fork left
    out. ``entry``: the confirmation's, already made (a second POST found it)."""
    if action == "cancel":
        return bulk.bulk_cancel(run_filter, actor, entry=entry), 0, 0
    if action == "requeue":
        return bulk.bulk_requeue(run_filter, actor, entry=entry), 0, 0
    # Imported when used: the fork's replay machinery loads for a fork only.
    from everystep.replays.bulk_fork import bulk_fork

    forked = bulk_fork(run_filter, actor, entry=entry, confirmation=confirmation)
    return forked.forked, forked.refused, forked.skipped
