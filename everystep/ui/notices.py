"""What a page says after an action: a notice named by a key in its URL (``done=cancel``,
``error=not-blocked``), never text the URL carries, so a link cannot make the UI say
anything it would not say itself. An unknown key says nothing.

A refused action's key is found from what was refused (``refusal``): the run's status,
the form's fields and the run's real steps, read again after the store refused; the
store's own message goes to the log (``everystep.ui``, event ``ui.refused``).

One refusal needs its reason on the page: a fork the installed code cannot replay. The
reason is known only to the POST that was refused (working it out again would run the
workflow's body: in the web process, on a GET anyone with view access can send). The
POST signs it for that run (``sign_fork_reason``, Django's signing with the project's
SECRET_KEY, valid an hour), and the page shows it only if the signature holds: a URL can
still make the UI say only what it said itself.
"""

from __future__ import annotations

from typing import Any

from django.core import signing

from everystep import registry, safe_text
from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, Status, StepStatus, Workflow
from everystep.store.forks import BUILTIN_WORKFLOWS
from everystep.store.reports import run_steps
from everystep.store.runs import RESOLVE_MODES, get_run
from everystep.ui import log

# The run page's notice after a refused action: ``error=<key>``.
REFUSED = {
    "unknown-action": "That action is not one this page offers.",
    "bad-text": "A field holds a NUL character or text that is not UTF-8, which no database "
    "can store.",
    "finished": "That run has finished: only an unfinished run can be cancelled or sent an event.",
    "not-running": "That run is not running: only a running run can be requeued.",
    "not-blocked": "That run is not blocked: only a blocked run's step can be settled.",
    "not-finished": "That run has not finished: only finished runs (completed, failed, "
    "stopped, cancelled) can be forked; a live run would race its fork for the same work "
    "(cancel it first).",
    "bad-mode": "Choose how the step ended: result, error or discard.",
    "no-step": "That run has no such step: choose one of its recorded steps.",
    "not-uncertain": "That step is not uncertain: only a step that started without an "
    "outcome can be settled.",
    "no-message": "A failed step needs a non-empty message.",
    "bad-result": "The result is not valid JSON, or not a value that can be stored (NaN, "
    "Infinity, a number too large, nesting deeper than 31 levels).",
    "bad-payload": "The payload is not valid JSON, or not a value that can be stored (NaN, "
    "Infinity, a number too large, nesting deeper than 31 levels).",
    "bad-event-name": "An event name must be non-empty text of at most 255 characters.",
    "not-registered": "No @workflow is registered under this run's name in the installed "
    "code: it cannot be forked here.",
    "builtin": "Runs of everystep.bulk_action are everystep's own and cannot be forked (a "
    "fork would take its operator's bulk action again); start a new bulk action from the "
    "runs list.",
    "fork-refused": "This run cannot be forked from there under the installed code; "
    "manage.py everystep_fork RUN_ID [--from-step STEP] says why.",
    "refused": "The action was refused; the server's log says why.",
}
# The runners page's notice after a refused requeue: ``error=<key>``.
RUNNER_REFUSED = {
    "no-runner": "Name a runner.",
    "bad-text": REFUSED["bad-text"],
    "unknown-runner": "No runner has a name that long.",
    "alive": "That runner sent a heartbeat recently and may be alive: stop it first "
    "(manage.py everystep_requeue_runner has --force).",
}
# Each action's state rule, as ``actions.allowed_actions`` offers it.
_STATE_RULES = {
    "cancel": ("finished", lambda run: run.status not in FINAL_STATUSES),
    "send": ("finished", lambda run: run.status not in FINAL_STATUSES),
    "requeue": ("not-running", lambda run: run.status == Status.RUNNING),
    "resolve": ("not-blocked", lambda run: run.status == Status.BLOCKED),
    "fork": ("not-finished", lambda run: run.status in FINAL_STATUSES),
}
_TEXT_FIELDS = ("reason", "name", "step_id", "from_step", "mode")


def refusal(action: str, run_id: str, form: Any, exc: EverystepError) -> str:
    """The key of ``REFUSED`` that says why ``action`` on the run was refused; the
    store's message ``exc`` is logged."""
    log.info(
        "run %s: %s refused: %s",
        run_id,
        action,
        exc,
        extra={"event": "ui.refused", "run_id": run_id, "action": action},
    )
    if any(not _storable(form.get(field, "")) for field in _TEXT_FIELDS):
        return "bad-text"
    run = get_run(run_id)
    key, applies = _STATE_RULES[action]
    if run is None or not applies(run):
        return key
    if action == "send":
        return _send_refusal(form)
    if action == "resolve":
        return _resolve_refusal(run, form)
    if action == "fork":
        return _fork_refusal(run, form)
    return "refused"


def _storable(text: str) -> bool:
    try:
        safe_text.storable_text(text, "a field")
    except EverystepError:
        return False
    return True


def _send_refusal(form: Any) -> str:
    name = form.get("name", "")
    if not name.strip() or len(name) > 255:
        return "bad-event-name"
    # The run and the name were right: what is left is the payload.
    return "bad-payload" if form.get("payload", "").strip() else "refused"


def _resolve_refusal(run: Workflow, form: Any) -> str:
    mode = form.get("mode", "")
    if mode not in RESOLVE_MODES:
        return "bad-mode"
    steps = {step.step_id: step for step in run_steps(run.id)}
    step = steps.get(form.get("step_id", ""))
    if step is None:
        return "no-step"
    if step.status != StepStatus.STARTED:
        return "not-uncertain"
    if mode == "error" and not form.get("value", "").strip():
        return "no-message"
    # The run, the step and the mode were right: what is left is the value.
    return "bad-result" if mode == "result" else "refused"


def _fork_refusal(run: Workflow, form: Any) -> str:
    if run.name in BUILTIN_WORKFLOWS:
        return "builtin"
    if registry.definition(run.name) is None:
        return "not-registered"
    from_step = form.get("from_step", "").strip()
    if from_step and from_step not in {step.step_id for step in run_steps(run.id)}:
        return "no-step"
    return "fork-refused"


def run_notices(query: Any, done: dict[str, str], run: Workflow) -> list[str]:
    """The run page's notices for its ``error`` and ``done`` keys (``done``: the texts of
    the actions' keys)."""
    key = query.get("error", "")
    refused = _fork_reason(run, query.get("why", "")) if key == "fork-refused" else None
    refused = refused or REFUSED.get(key)
    said = (refused and f"Error: {refused}", done.get(query.get("done", "")))
    return [text for text in said if text]


# A signed reason lasts this long: a bookmarked page of a refused fork then says only
# that it was refused.
FORK_REASON_MAX_AGE = 3600
# The reason carried, at most (a URL has room for a few kilobytes).
FORK_REASON_MAX_LENGTH = 1000


def sign_fork_reason(run_id: str, reason: str) -> str:
    """``reason`` (the refused fork's message), signed for run ``run_id``'s page."""
    cut = reason[:FORK_REASON_MAX_LENGTH]
    return signing.dumps(cut, salt=_salt(run_id), compress=True)


def _fork_reason(run: Workflow, token: str) -> str | None:
    """The reason the POST signed for this run, if the token is that, else None."""
    if not token or len(token) > 4 * FORK_REASON_MAX_LENGTH:
        return None
    try:
        reason = signing.loads(token, salt=_salt(str(run.id)), max_age=FORK_REASON_MAX_AGE)
    except signing.BadSignature:  # forged, another run's, or expired
        return None
    if not isinstance(reason, str):
        return None
    shown = safe_text.escape_controls(reason)
    return f"This run cannot be forked from there under the installed code: {shown}"


def _salt(run_id: str) -> str:
    return f"everystep.ui.fork-refused:{run_id}"
