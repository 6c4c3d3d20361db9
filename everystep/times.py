"""Times in the form the project keeps them: aware with ``USE_TZ = True``, naive local
time (``TIME_ZONE``) with ``USE_TZ = False`` — the form Django stores, returns and gives
from ``timezone.now()``.

everystep compares the times it records (wake times, deadlines, due times) with
``timezone.now()``. A time that enters from outside — a user's ``datetime``, a decoded
record, a raw database row — goes through ``project_time`` first, so both sides of a
comparison always have the same form, whatever the project chose.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone

# The longest time a datetime-local or ISO 8601 field can sensibly hold.
TIME_MAX_LENGTH = 40


def project_time(value: datetime) -> datetime:
    """``value`` in the project's form: a naive time is read in the current time zone
    (with ``USE_TZ``), an aware one is turned into naive local time (without it)."""
    if settings.USE_TZ:
        return aware(value)
    return timezone.make_naive(value) if timezone.is_aware(value) else value


def aware(value: datetime) -> datetime:
    """``value`` as an aware datetime, for arithmetic with real instants (a run id's
    time): a naive one is read in the current time zone, whatever ``USE_TZ`` says."""
    return timezone.make_aware(value) if timezone.is_naive(value) else value


def from_row(value: datetime | str) -> datetime:
    """A time read by the driver's own cursor: SQLite gives text, MariaDB naive values.

    Django writes times in UTC when ``USE_TZ`` is on (the connection's zone: everystep
    leaves it at UTC) and in naive local time when it is off, which stays as it is.
    """
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if settings.USE_TZ and timezone.is_naive(value):
        return value.replace(tzinfo=UTC)
    return value


def parse_moment(text: str) -> datetime:
    """A time an operator writes (the runs page's filters, the bulk commands' flags):
    ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM[:SS]`` in the current time zone, or with an
    explicit UTC offset; as an aware datetime, to the second. ``ValueError`` if ``text``
    is not such a time."""
    if len(text) > TIME_MAX_LENGTH:
        raise ValueError(f"a time is at most {TIME_MAX_LENGTH} characters")
    try:
        moment = aware(datetime.fromisoformat(text).replace(microsecond=0))
        # Far-off years overflow here rather than later, in a query.
        timezone.localtime(moment)
    except OverflowError as exc:
        raise ValueError(str(exc)) from None
    return moment
