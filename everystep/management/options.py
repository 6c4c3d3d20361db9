"""Argument checks shared by everystep's management commands."""

from __future__ import annotations

import uuid

from django.core.management.base import CommandError


def checked_run_id(value: str) -> str:
    """``value`` if it is a run id (a UUID), else a ``CommandError`` saying so."""
    try:
        uuid.UUID(value)
    except ValueError:
        raise CommandError(f"{value!r} is not a run id (a UUID)") from None
    return value
