"""Tests that must have the database servers to themselves.

`make test` runs its long tiers on several pytest workers (pytest-xdist), and two lanes
of tiers side by side, all against the same PostgreSQL and MariaDB servers, each session
with databases of its own (tests/settings.py). A test marked ``exclusive`` stops or
restarts a server, or moves a directory others use: no other test on the machine may run
beside it. So every test holds "the room" while it runs (setup and teardown included: a
test's flush must not meet a stopped server), shared; an exclusive test holds it alone.
The turnstile keeps an exclusive test from waiting for ever behind a stream of shared
ones: it is held while the room is asked for, so no test slips in once one is waiting.

The locks are flock(2) on two files of the machine's temporary directory: every pytest
session on the machine takes part, and the kernel drops a lock whose process dies.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def _lock_file(kind: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"everystep-tests.{kind}.lock")


@contextmanager
def room(alone: bool) -> Iterator[None]:
    """Hold the room for one test: alone (exclusive) or shared with every other test."""
    with open(_lock_file("turnstile"), "a") as turnstile, open(_lock_file("room"), "a") as held:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
