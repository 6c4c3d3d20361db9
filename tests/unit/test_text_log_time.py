"""A text log line's time says which moment it means: ISO 8601 with milliseconds and the
UTC offset of the process's zone (issue 53), unless the project gives a ``datefmt``."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pytest

from everystep.logs import TextFormatter


@pytest.fixture
def zone() -> Iterator[None]:
    """The process in a zone five and a half hours ahead of UTC, with no daylight saving."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "XYZ-05:30"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def record_at(epoch: float) -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "everystep.worker", "msg": "hello", "levelname": "INFO"}
    )
    record.created, record.msecs = epoch, (epoch % 1) * 1000
    return record


def test_the_time_carries_milliseconds_and_the_offset(zone: None) -> None:
    line = TextFormatter().format(record_at(1_796_000_000.25))
    assert line.startswith("2026-11-30T06:23:20.250+05:30 INFO everystep.worker hello"), line


def test_a_datefmt_given_is_kept(zone: None) -> None:
    line = TextFormatter("%(asctime)s %(message)s", "%H:%M").format(record_at(1_796_000_000))
    assert line == "06:23 hello"
