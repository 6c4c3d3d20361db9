"""Times in the project's form (``everystep.times``), with ``USE_TZ`` on and off."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from django.test import override_settings

from everystep.store.reports import first_id_at
from everystep.times import aware, from_row, project_time

NEW_YORK = ZoneInfo("America/New_York")
NOON_UTC = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def test_with_use_tz_naive_times_are_read_in_the_current_zone():
    """USE_TZ = True: a naive time is made aware in the project's zone; aware ones stay."""
    with override_settings(USE_TZ=True, TIME_ZONE="America/New_York"):
        assert project_time(datetime(2026, 7, 1, 8, 0)) == NOON_UTC
        assert project_time(NOON_UTC) is NOON_UTC
        assert from_row("2026-07-01 12:00:00") == NOON_UTC


def test_without_use_tz_aware_times_become_naive_local_times():
    """USE_TZ = False: an aware time becomes naive local time; rows stay naive."""
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        assert project_time(NOON_UTC) == datetime(2026, 7, 1, 8, 0)
        assert project_time(datetime(2026, 7, 1, 8, 0)) == datetime(2026, 7, 1, 8, 0)
        assert from_row("2026-07-01 08:00:00") == datetime(2026, 7, 1, 8, 0)
        assert aware(datetime(2026, 7, 1, 8, 0)) == NOON_UTC


def test_a_run_id_window_takes_naive_and_aware_times_alike():
    """first_id_at: a naive time is the same instant in the current zone as an aware one."""
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        assert first_id_at(datetime(2026, 7, 1, 8, 0)) == first_id_at(NOON_UTC)
        assert first_id_at(NOON_UTC.astimezone(NEW_YORK)) == first_id_at(NOON_UTC)
