"""Events sent to runs, and counting the runs that wait.

A waiting run is ``scheduled`` with ``due_at`` in the future (a sleep, a delayed start,
a wait's deadline) or NULL (a wait for an event or a run with no timeout), so the claim
skips it until then; it is released so by ``everystep.store.outcome.suspend_run``.
``send`` records an event and makes a waiting run due at once.

The race between a run deciding to wait and an event arriving for it is closed by the
run row's lock: ``suspend_run`` updates the row first and only then looks for the events
it awaits, and ``send_event`` updates (locks) the row before inserting the event. Either
the suspension commits first, and the sender then finds the run waiting and wakes it, or
the sender commits first, and the suspension then finds the event and stays due.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import IntegrityError
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, Event, Status, Workflow
from everystep.safe_text import storable_text
from everystep.serde import EVERYTHING, encode
from everystep.store import audit, database
from everystep.store.audit import Actor
from everystep.store.guard import guarded
from everystep.store.wake import notify_due


def _shown(value: object) -> str:
    """``value`` for an error message, cut short: a pasted megabyte is not echoed."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_event_name(name: object) -> None:
    """An event name fits the column, means something, and every database stores it."""
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise EverystepError(
            "an event name must be a non-empty string of at most 255 characters, "
            f"got {_shown(name)}"
        )
    storable_text(name, "the event name")


@guarded
def event_payload(run_id: UUID, name: str) -> tuple[bool, Any]:
    """``(True, stored payload)`` if event ``name`` was sent to the run, else
    ``(False, None)``."""
    row = Event.objects.filter(workflow_id=run_id, name=name).values_list("payload").first()
    return (False, None) if row is None else (True, row[0])


def send_event(
    run_id: UUID | str,
    name: str,
    payload: Any = None,
    *,
    actor: Actor | None = None,
    reason: str = "",
) -> bool:
    """Record event ``name`` for the run, in the caller's transaction, and make the run
    due at once if it waits. False if an event of that name was already sent (the first
    payload stays). ``EverystepError`` for an unknown or finished run, or a payload that
    cannot be stored. An ``actor`` (an operator, not the application's own
    ``everystep.send``) is audited in the same transaction, a repeated send too."""
    check_event_name(name)
    try:
        run_id = UUID(str(run_id))
    except ValueError:
        raise EverystepError(f"not a run id: {_shown(run_id)}") from None
    # Typed values (a dataclass, a pydantic model) are stored as their JSON form: the
    # waiter's ``type=`` rebuilds them (``wait_for``).
    stored = encode(payload, f"payload of event {name!r}", EVERYTHING)
    now = timezone.now()
    # Only a run that waits, and is not due already: a repeated send (a webhook retried)
    # must not push a woken run back in the claim order.
    not_due = Q(due_at__isnull=True) | Q(due_at__gt=now)
    waiting = When(not_due, status=Status.SCHEDULED, waiting_for__isnull=False, then=Value(now))
    with database.atomic():
        # Lock the run row first (see the module docstring), waking it if it waits.
        if not Workflow.objects.filter(id=run_id).update(due_at=Case(waiting, default=F("due_at"))):
            raise EverystepError(f"no run with id {run_id}")
        status = Workflow.objects.filter(id=run_id).values_list("status", flat=True).get()
        if status in FINAL_STATUSES:
            raise EverystepError(
                f"run {run_id} is {status}: events can only be sent to unfinished runs"
            )
        sent = _insert_event(run_id, name, stored, now)
        if actor is not None:
            detail = {"event": name} if sent else {"event": name, "already_sent": True}
            audit.record("send", actor, run=run_id, reason=reason, detail=detail)
        if sent:
            notify_due()
    return sent


def _insert_event(run_id: UUID, name: str, stored: Any, now: Any) -> bool:
    """False if the run has an event of that name already (it keeps its first payload)."""
    try:
        with database.atomic():
            Event.objects.create(workflow_id=run_id, name=name, payload=stored, sent_at=now)
    except IntegrityError:
        return False
    return True


def waiting_count() -> int:
    """Runs that sleep or wait: scheduled and not due yet."""
    not_due = Q(due_at__gt=timezone.now()) | Q(due_at=None)
    return Workflow.objects.filter(not_due, status=Status.SCHEDULED).count()
