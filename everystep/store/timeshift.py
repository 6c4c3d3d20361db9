"""Moving the pending times of unfinished runs earlier, for tests that control time
(``everystep.testing.run_due(advance=...)``): as if that much time had passed, without
a fake clock in the engine or the claim, which keep reading ``timezone.now()``.

A pending time is one still in the future: the ``due_at`` of a ``scheduled`` run (a
delayed start, a sleep's wake time, a wait's deadline), the wake time a sleep recorded
(the result of its ``done`` step) and the deadline a pending wait (``wait_for``,
``result``, ``gather``) recorded (in the result of its ``started`` step). Times already
past are history and stay as they are. A sleeping run's ``due_at`` and its sleep's wake
time move by the same amount, so they stay equal, which the engine relies on to tell a
run's wake-up from other passes.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from everystep.models import FINAL_STATUSES, Status, Step, StepStatus, Workflow
from everystep.serde import decode, encode
from everystep.store import database
from everystep.store.wake import notify_due
from everystep.times import project_time


def shift_pending(
    advance: timedelta, *, wake_times: Collection[str], deadlines: Collection[str]
) -> None:
    """Move every pending time of the unfinished runs ``advance`` earlier. ``wake_times``
    are the record names of the waits recorded ``done`` with their wake time as the
    result (a sleep), ``deadlines`` those whose ``started`` record holds a deadline
    (``everystep.engine.core.kinds`` lists both)."""
    now = timezone.now()
    with database.atomic():
        moved = Workflow.objects.filter(status=Status.SCHEDULED, due_at__gt=now).update(
            due_at=F("due_at") - advance
        )
        records = (
            Step.objects.filter(
                Q(name__in=list(wake_times), status=StepStatus.DONE)
                | Q(name__in=list(deadlines), status=StepStatus.STARTED)
            )
            .exclude(workflow__status__in=FINAL_STATUSES)
            .values_list("pk", "name", "result")
        )
        for pk, name, result in records:
            shifted = (
                _shifted_wake(result, advance, now)
                if name in wake_times
                else _shifted_deadline(result, advance, now)
            )
            if shifted is not None:
                Step.objects.filter(pk=pk).update(result=shifted)
        if moved:
            notify_due()


def _shifted_wake(stored: Any, advance: timedelta, now: datetime) -> Any:
    """A sleep record's result with its wake time moved, or None if it is past."""
    wake = decode(stored)
    if not isinstance(wake, datetime) or project_time(wake) <= now:
        return None
    return encode(_earlier(wake, advance))


def _shifted_deadline(stored: Any, advance: timedelta, now: datetime) -> Any:
    """A pending wait's result with its deadline moved, or None if it has none or it is
    past. The event name and anything else stored with it stay as they are."""
    if not isinstance(stored, dict):
        return None
    deadline = decode(stored.get("deadline"))
    if not isinstance(deadline, datetime) or project_time(deadline) <= now:
        return None
    return {**stored, "deadline": encode(_earlier(deadline, advance))}


def _earlier(when: datetime, advance: timedelta) -> datetime:
    """``when`` moved ``advance`` earlier in elapsed time, in its own time zone. Python
    subtracts from an aware datetime in wall time, which is off by an hour across a
    daylight saving change; through UTC it is exact. Naive values are wall time anyway."""
    if when.tzinfo is None:
        return when - advance
    try:
        return (when.astimezone(UTC) - advance).astimezone(when.tzinfo)
    except OverflowError:  # within hours of the calendar's end, UTC is out of range
        return when - advance
