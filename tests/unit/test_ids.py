"""Run ids: RFC 9562 version 7, strictly increasing in a process, carrying the clock's time."""

from __future__ import annotations

import time
import uuid

from everystep.models import ids as run_ids


def _millis(value: uuid.UUID) -> int:
    return value.int >> 80


def test_a_burst_of_ids_sorts_and_keeps_the_clock_time():
    """Ids made faster than one per millisecond count up instead of running ahead of the
    clock (the UI's time window reads the time in the id)."""
    before = time.time_ns() // 1_000_000
    ids = [run_ids.uuid7() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert before <= _millis(ids[0]) and _millis(ids[-1]) <= after


def test_a_full_millisecond_borrows_the_next_one(monkeypatch):
    """The 4,097th id of one millisecond moves to the next: order still holds."""
    frozen = 1_800_000_000_000
    monkeypatch.setattr(run_ids.time, "time_ns", lambda: frozen * 1_000_000)
    monkeypatch.setattr(run_ids, "_uuid7_last", (0, 0))
    ids = [run_ids.uuid7() for _ in range(4_097)]
    assert ids == sorted(ids)
    assert {_millis(i) for i in ids[:4_096]} == {frozen}
    assert _millis(ids[-1]) == frozen + 1
    # The clock stepping back changes nothing: ids keep counting from the last one.
    monkeypatch.setattr(run_ids.time, "time_ns", lambda: (frozen - 5) * 1_000_000)
    later = run_ids.uuid7()
    assert later > ids[-1] and _millis(later) == frozen + 1
