"""The UI's write actions on one run: cancel, requeue, settle an uncertain step, send
an event.

Each needs an authenticated active staff user holding the matching permission
(``everystep.cancel_workflow``, ``requeue_workflow``, ``resolve_workflow``,
``send_event``) — also when the read-only pages are public — is a CSRF-protected POST,
and is logged with the user.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from everystep import serde, store
from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, Status, StepStatus, Workflow

logger = logging.getLogger("everystep.ui")

BACK_MAX_LENGTH = 500

PERMISSIONS = {
    "cancel": "everystep.cancel_workflow",
    "requeue": "everystep.requeue_workflow",
    "resolve": "everystep.resolve_workflow",
    "send": "everystep.send_event",
}

# What the run page says after an action: ``done=<key>`` in its URL.
DONE = {
    "cancel": "Done: cancel.",
    "requeue": "Done: requeue.",
    "resolve": "Done: resolve.",
    "send": "Done: event sent.",
    "already-sent": "Event already sent; the first payload stays.",
}


def allowed_actions(request: HttpRequest, run: Workflow) -> dict[str, bool]:
    """Which actions the run page offers this user for this run."""
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return dict.fromkeys(PERMISSIONS, False)
    applicable = {
        "cancel": run.status not in FINAL_STATUSES,
        "requeue": run.status == Status.RUNNING,
        "resolve": run.status == Status.BLOCKED,
        "send": run.status not in FINAL_STATUSES,
    }
    return {name: applicable[name] and user.has_perm(perm) for name, perm in PERMISSIONS.items()}


# csrf_protect: enforced even in a project that left CsrfViewMiddleware out.
@csrf_protect
@require_POST
def run_action(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Perform ``request.POST["action"]`` on the run, then go back to its page."""
    action = request.POST.get("action", "")
    user = request.user
    if action not in PERMISSIONS:
        return _back(run_id, error=f"unknown action {action!r}")
    if not (user.is_authenticated and user.is_active and user.is_staff):
        raise PermissionDenied("write actions need a staff login")
    if not user.has_perm(PERMISSIONS[action]):
        raise PermissionDenied(f"{action} needs the {PERMISSIONS[action]} permission")
    if store.get_run(run_id) is None:
        # Going back to the run's page would only say "not found" after a redirect.
        raise Http404(f"no run with id {run_id}")
    try:
        done, detail = _perform(action, str(run_id), request.POST, by=f"{user.get_username()} (UI)")
    except EverystepError as exc:
        return _back(run_id, error=str(exc))
    logger.info(
        "run %s: %s by %s%s",
        run_id,
        action,
        user.get_username(),
        detail,
        extra={"event": f"ui.{action}", "run_id": str(run_id), "user": user.get_username()},
    )
    return _back(run_id, done=done)


def _perform(action: str, run_id: str, form: Any, *, by: str) -> tuple[str, str]:
    """Do ``action``: what the run page says next (a key of ``DONE``), and the detail
    the log line adds."""
    if action == "cancel":
        store.cancel_run(run_id, by=by)
        return action, ""
    if action == "requeue":
        store.requeue_one(run_id)
        return action, ""
    if action == "send":
        return _send(run_id, form)
    step_id, mode = form.get("step_id", ""), form.get("mode", "")
    store.settle_step(run_id, step_id, mode=mode, text=form.get("value", ""))
    return action, f" (step {step_id}: {mode})"


def _send(run_id: str, form: Any) -> tuple[str, str]:
    name = serde.storable_text(form.get("name", ""), "the event name")
    text = form.get("payload", "").strip()
    # An empty payload field sends null, as everystep.send(run_id, name) does.
    payload = serde.parse_json(text, "the payload") if text else None
    if store.send_event(run_id, name, payload):
        return "send", f" (event {name})"
    return "already-sent", f" (event {name}, already sent: ignored)"


def _back(run_id: UUID, **params: str) -> HttpResponseRedirect:
    # A message may echo a pasted megabyte (a step id, a mode): the Location header
    # carries it, so it is cut to a size every server and browser takes.
    cut = {key: value[:BACK_MAX_LENGTH] for key, value in params.items()}
    url = reverse("everystep:run", args=[run_id])
    return HttpResponseRedirect(f"{url}?{urlencode(cut)}")


def uncertain_steps(steps: list[Any]) -> list[str]:
    """Step ids a blocked run can have settled: those started without an outcome."""
    return [step.step_id for step in steps if step.status == StepStatus.STARTED]
