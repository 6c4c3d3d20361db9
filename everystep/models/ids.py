"""Run ids: ``uuid7``, time-ordered, strictly increasing within a process."""

from __future__ import annotations

import os
import threading
import time
import uuid

_uuid7_lock = threading.Lock()
_uuid7_last = (0, 0)  # (millisecond, counter) of the last id made in this process
_UUID7_COUNTER_MAX = 0xFFF  # the 12 bits of rand_a


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7).

    Run ids sort by creation time, so the primary key index serves both the claim order
    and the "most recent runs" listing, and the UI's created-after/before window is an id
    range. Within one process ids stay strictly increasing: ids made in the same
    millisecond count up in ``rand_a`` (RFC 9562 §6.2, method 1), so the time in an id
    stays the clock's unless a process makes more than 4,096 in one millisecond.
    """
    global _uuid7_last
    with _uuid7_lock:
        now_ms = time.time_ns() // 1_000_000
        last_ms, counter = _uuid7_last
        if now_ms > last_ms:
            last_ms, counter = now_ms, 0
        elif counter < _UUID7_COUNTER_MAX:
            counter += 1  # same millisecond, or the clock stepped back
        else:
            last_ms, counter = last_ms + 1, 0
        _uuid7_last = (last_ms, counter)
    rand = int.from_bytes(os.urandom(8), "big")
    value = (last_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
