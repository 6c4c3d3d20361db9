"""The UI's write actions on one run: cancel, requeue, settle an uncertain step, send
an event, fork a finished run; and on a dead runner: requeue every run it holds.

Each needs an authenticated active staff user holding ``everystep.view_workflow`` and
the matching permission (``everystep.cancel_workflow``, ``requeue_workflow``,
``resolve_workflow``, ``send_event``, ``fork_workflow``; a runner's runs:
``requeue_workflow``) — also when the read-only pages are public — is a CSRF-protected
POST, is logged with the user, and leaves an audit entry naming the user
(``everystep.store.audit``).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.crypto import salted_hmac
from django.utils.http import urlencode
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from everystep import conf, safe_text, serde
from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, Status, StepStatus, Workflow
from everystep.replays.fork import fork_run
from everystep.store.audit import Actor
from everystep.store.events import send_event
from everystep.store.forks import BUILTIN_WORKFLOWS
from everystep.store.runners import get_runner, requeue_runner
from everystep.store.runs import cancel_run, get_run, requeue_one, resolve_step_from_text
from everystep.ui import log, notices
from everystep.ui.access import check_act, may_act, secured

BACK_MAX_LENGTH = 500
# Runner names are stored in 255 characters (``Runner.name``, ``Workflow.claimed_by``).
RUNNER_NAME_MAX_LENGTH = 255

PERMISSIONS = {
    "cancel": "everystep.cancel_workflow",
    "requeue": "everystep.requeue_workflow",
    "resolve": "everystep.resolve_workflow",
    "send": "everystep.send_event",
    "fork": "everystep.fork_workflow",
}

# What the run page says after an action: ``done=<key>`` in its URL.
DONE = {
    "cancel": "Done: cancel.",
    "requeue": "Done: requeue.",
    "resolve": "Done: resolve.",
    "send": "Done: event sent.",
    "already-sent": "Event already sent; the first payload stays.",
    "fork": "Forked: this new run replays the original's records and executes from the step "
    "it was forked from, under the code installed now.",
}


def allowed_actions(request: HttpRequest, run: Workflow) -> dict[str, bool]:
    """Which actions the run page offers this user for this run."""
    user = request.user
    applicable = {
        "cancel": run.status not in FINAL_STATUSES,
        "requeue": run.status == Status.RUNNING,
        "resolve": run.status == Status.BLOCKED,
        "send": run.status not in FINAL_STATUSES,
        # Only a finished run: a live one would race its fork for the same work. Never
        # everystep's own: its fork would take an operator's bulk action again.
        "fork": run.status in FINAL_STATUSES and run.name not in BUILTIN_WORKFLOWS,
    }
    return {name: applicable[name] and may_act(user, perm) for name, perm in PERMISSIONS.items()}


# csrf_protect: enforced even in a project that left CsrfViewMiddleware out.
@secured
@csrf_protect
@require_POST
def run_action(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Perform ``request.POST["action"]`` on the run, then go back to its page."""
    action = request.POST.get("action", "")
    user = request.user
    if action not in PERMISSIONS:
        return _back(run_id, error="unknown-action")
    check_act(user, PERMISSIONS[action], action)
    if get_run(run_id) is None:
        # Going back to the run's page would only say "not found" after a redirect.
        raise Http404(f"no run with id {run_id}")
    try:
        done = _perform(action, str(run_id), request.POST, actor=Actor.user(user))
    except EverystepError as exc:
        key = notices.refusal(action, str(run_id), request.POST, exc)
        # A refused fork's page shows the reason this POST found, signed for this run:
        # working it out again on the GET would run the workflow's body there.
        why = {"why": notices.sign_fork_reason(str(run_id), str(exc))}
        return _back(run_id, error=key, **(why if key == "fork-refused" else {}))
    log.info(
        "run %s: %s by %s%s",
        run_id,
        action,
        user.get_username(),
        done.detail,
        extra={"event": f"ui.{action}", "run_id": str(run_id), "user": user.get_username()},
    )
    return _back(done.page or run_id, done=done.key)


class Done(NamedTuple):
    """What an action did: what the run page says next (a key of ``DONE``), the detail
    the log line adds, and the run whose page comes next (default: the one acted on)."""

    key: str
    detail: str = ""
    page: UUID | None = None


def _perform(action: str, run_id: str, form: Any, *, actor: Actor) -> Done:
    """Do ``action`` as ``actor``, with the reason the form gives, if any."""
    reason = safe_text.storable_text(form.get("reason", ""), "the reason").strip()
    if action == "cancel":
        cancel_run(run_id, actor=actor, reason=reason)
        return Done(action)
    if action == "requeue":
        requeue_one(run_id, actor=actor, reason=reason)
        return Done(action)
    if action == "send":
        return _send(run_id, form, actor, reason)
    if action == "fork":
        return _fork(run_id, form, actor)
    step_id, mode = form.get("step_id", ""), form.get("mode", "")
    text = form.get("value", "")
    resolve_step_from_text(run_id, step_id, mode=mode, text=text, actor=actor, reason=reason)
    return Done(action, f" (step {step_id}: {mode})")


def _send(run_id: str, form: Any, actor: Actor, reason: str) -> Done:
    name = safe_text.storable_text(form.get("name", ""), "the event name")
    text = form.get("payload", "").strip()
    # An empty payload field sends null, as everystep.send(run_id, name) does.
    payload = serde.parse_json(text, "the payload") if text else None
    if send_event(run_id, name, payload, actor=actor, reason=reason):
        return Done("send", f" (event {name})")
    return Done("already-sent", f" (event {name}, already sent: ignored)")


def _fork(run_id: str, form: Any, actor: Actor) -> Done:
    # Empty: fork_run's default point, the first step that failed or has no outcome.
    from_step = safe_text.storable_text(form.get("from_step", ""), "the step id").strip() or None
    # The page's confirmation: the same form sent twice (a double click) forks once.
    key = confirmation_key(form.get("confirm", ""), "fork", actor, f"{run_id}\n{from_step or ''}")
    new = fork_run(run_id, from_step=from_step, actor=actor, idempotency_key=key)
    return Done("fork", f" (new run {new.id}, from step {new.forked_from_step})", new.id)


def new_confirmation() -> str:
    """A fresh confirmation for an action form: what makes the form's action happen once
    however many times it is sent."""
    return uuid.uuid4().hex


def confirmation_key(confirm: str, action: str, actor: Actor, scope: str) -> str | None:
    """The idempotency key of ``action`` sent by ``actor`` with confirmation ``confirm``
    for ``scope`` (what the form confirms: a run and a step, a bulk action's filter);
    None for a form without one (a form rendered before confirmations, a script).

    The form's confirmation is only a nonce: the key is derived from it, the user and
    the scope (an HMAC under the project's SECRET_KEY), so the same form sent twice acts
    once, while a confirmation sent by another user, or with another filter or run,
    makes a key of its own. It can neither replay nor mask another action."""
    if len(confirm) != 32 or not all(ch in "0123456789abcdef" for ch in confirm):
        return None
    bound = f"{actor.name}\n{actor.via}\n{scope}\n{confirm}"
    digest = salted_hmac(f"everystep.ui.{action}", bound, algorithm="sha256").hexdigest()
    return f"everystep.ui.{action}:{digest}"


def _back(run_id: UUID, **params: str) -> HttpResponseRedirect:
    # Keys only (ui.notices): the page after an action says what its key names.
    url = reverse("everystep:run", args=[run_id])
    return HttpResponseRedirect(f"{url}?{urlencode(params)}")


def uncertain_steps(steps: list[Any]) -> list[str]:
    """Step ids a blocked run can have settled: those started without an outcome."""
    return [step.step_id for step in steps if step.status == StepStatus.STARTED]


# --- a dead runner's runs ----------------------------------------------------------------


def may_requeue_runners(request: HttpRequest) -> bool:
    """Whether the runners page offers this user "requeue this runner's runs"."""
    return may_act(request.user, PERMISSIONS["requeue"])


@secured
@csrf_protect
@require_POST
def runner_requeue(request: HttpRequest) -> HttpResponse:
    """Requeue every run left ``running`` under the dead runner ``request.POST["runner"]``
    (as ``manage.py everystep_requeue_runner`` does), then go back to the runners page."""
    user = request.user
    check_act(user, PERMISSIONS["requeue"], "requeue")
    name = request.POST.get("runner", "")
    refused = _runner_refusal(name)
    if refused is not None:
        return _back_to_runners(error=refused)
    requeued = requeue_runner(name, actor=Actor.user(user))
    log.info(
        "runner %s: requeue of its %d run(s) by %s: %s",
        name,
        len(requeued),
        user.get_username(),
        ", ".join(str(run_id) for run_id in requeued),
        extra={
            "event": "ui.requeue_runner",
            "runner": name,
            "run_ids": [str(run_id) for run_id in requeued],
            "user": user.get_username(),
        },
    )
    return _back_to_runners(done=str(len(requeued)), runner=name)


def _runner_refusal(name: str) -> str | None:
    """The key of ``notices.RUNNER_REFUSED`` that says why the runner's runs cannot be
    requeued, or None."""
    if not name:
        return "no-runner"
    try:
        safe_text.storable_text(name, "the runner name")
    except EverystepError:
        return "bad-text"
    if len(name) > RUNNER_NAME_MAX_LENGTH:
        return "unknown-runner"
    runner = get_runner(name)
    # A runner still beating would carry on with runs handed to other workers meanwhile:
    # the same rule as the command's (which has --force; the UI has none).
    if runner is not None and runner.may_be_alive(
        conf.worker_default("orphan_timeout"), conf.worker_default("heartbeat")
    ):
        return "alive"
    return None


def _back_to_runners(**params: str) -> HttpResponseRedirect:
    cut = {key: value[:BACK_MAX_LENGTH] for key, value in params.items()}
    return HttpResponseRedirect(f"{reverse('everystep:runners')}?{urlencode(cut)}")


def runner_notices(request: HttpRequest) -> list[str]:
    """What the runners page says after ``runner_requeue``: a key of
    ``notices.RUNNER_REFUSED``, or a count and the runner it names (shown only if a
    runner has that name: anyone can put anything in a URL)."""
    refused = notices.RUNNER_REFUSED.get(request.GET.get("error", ""))
    if refused is not None:
        return [f"Error: {refused}"]
    done, name = request.GET.get("done", ""), request.GET.get("runner", "")
    if not (done.isascii() and done.isdigit() and len(done) < 10):
        return []
    known = 0 < len(name) <= RUNNER_NAME_MAX_LENGTH and _known_runner(name)
    held = f" held by {safe_text.escape_controls(name)!r}" if known else ""
    return [f"Done: requeued {int(done)} run(s){held}."]


def _known_runner(name: str) -> bool:
    try:
        return get_runner(safe_text.storable_text(name, "the runner name")) is not None
    except EverystepError:
        return False
