"""Argument checks shared by everystep's management commands."""

from __future__ import annotations

import uuid
from typing import overload

from django.core.management.base import CommandError

from everystep import serde
from everystep.errors import EverystepError

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
