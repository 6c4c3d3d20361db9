"""Argument checks, and the wording of waits, shared by everystep's management commands."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, overload

from django.core.management.base import CommandError

from everystep import serde
from everystep.errors import EverystepError
from everystep.models import Event
from everystep.store.reports import RunWait

# An argument echoed in an error message is cut to this many characters, so a pasted
# megabyte still gives a one-line message.
SHOWN = 60


def shown(value: str) -> str:
    """``repr(value)``, cut to about ``SHOWN`` characters: an argument in a message."""
    return repr(value) if len(value) <= SHOWN else repr(value[:SHOWN]) + "…"


def clipped(value: str) -> str:
    """``value`` as printable text cut to about ``SHOWN`` characters, without quotes."""
    text = serde.printable(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


def checked_run_id(value: str) -> str:
    """``value`` as a canonical run id (a UUID), else a ``CommandError`` saying so."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise CommandError(f"{shown(value)} is not a run id (a UUID)") from None


@overload
def checked_text(value: str, what: str) -> str: ...
@overload
def checked_text(value: None, what: str) -> None: ...


def checked_text(value: str | None, what: str) -> str | None:
    """``value`` if the database can store (and so match) it, else a ``CommandError``:
    a NUL character, or bytes that are not UTF-8 in the command line."""
    if value is None:
        return None
    try:
        return serde.storable_text(value, what)
    except EverystepError as exc:
        raise CommandError(str(exc)) from None


def checked_count(value: int, flag: str, maximum: int) -> int:
    """``value`` if it is from 1 to ``maximum``, else a ``CommandError`` naming ``flag``
    (a count beyond what the databases' LIMIT takes never reaches them)."""
    if value < 1:
        raise CommandError(f"{flag} must be at least 1, not {value}")
    if value > maximum:
        raise CommandError(f"{flag} must be at most {maximum}, not {value}")
    return value


def checked_event_name(value: str) -> str:
    """``value`` if it can name an event (storable text that fits the column), else a
    ``CommandError`` that does not echo a pasted megabyte back."""
    name = checked_text(value, "the event name")
    longest = Event._meta.get_field("name").max_length or 0
    if len(name) > longest:
        raise CommandError(
            f"the event name is {len(name)} characters; event names have {longest} at most"
        )
    return name


def checked_json(text: str, flag: str) -> Any:
    """``text`` parsed as JSON, else a ``CommandError`` naming ``flag``. Whether the
    value can be stored (depth, NaN) is the store's check, made when it is encoded."""
    try:
        return serde.parse_json(text, flag)
    except EverystepError as exc:
        raise CommandError(str(exc)) from None


# How a run's ``waiting_for`` ends when it awaits runs (``result``, ``gather``), after
# the events it awaits, if any: "run <id>" for one run, "<n> runs" for several.
_AWAITED_RUNS = re.compile(r"(?:^|, )(run [0-9a-f-]{36}|[0-9]+ runs)$")


def wait_text(wait: RunWait, when: Callable[[datetime], str]) -> str:
    """A waiting run's wait in words, its times written by ``when``: "starts at T",
    "sleeps until T", "waits for event approval until T" (no "until" without a timeout),
    "waits for run ID", "waits for 3 runs"."""
    until = "" if wait.until is None else when(wait.until)
    if wait.kind == "start":
        return f"starts at {until}"
    if wait.kind == "sleep":
        return f"sleeps until {until}"
    return f"waits for {_awaited(wait.events)}" + (f" until {until}" if until else "")


def _awaited(waiting_for: str) -> str:
    runs = _AWAITED_RUNS.search(waiting_for)
    events = waiting_for if runs is None else waiting_for[: runs.start()]
    noun = "events" if "," in events else "event"
    said = [f"{noun} {events}"] if events else []
    said += [runs.group(1)] if runs is not None else []
    return " and ".join(said) or "an event"


def wait_json(wait: RunWait | None) -> dict[str, Any] | None:
    """A run's wait as JSON-ready values (None when it does not wait)."""
    if wait is None:
        return None
    until = None if wait.until is None else wait.until.isoformat()
    return {"kind": wait.kind, "until": until, "events": wait.events or None}
