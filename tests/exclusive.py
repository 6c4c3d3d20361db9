"""Tests that must have the database server to themselves, under pytest-xdist too.

`make test` runs its long tiers on several pytest workers at once, each with a database
of its own on the same server (tests/settings.py). A test marked ``exclusive`` (it stops
or restarts the server) must not run beside any other: every test takes the room shared,
an exclusive one takes it alone. The turnstile keeps an exclusive test from waiting for
ever behind a stream of shared ones: it is held while the room is asked for, so no new
test slips in once an exclusive one is waiting.

The locks are flock(2) on two files named after the session's database suffix, which the
pytest workers share (tests/settings.py sets it before they start); the kernel drops them
if a worker dies.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def _lock_file(kind: str) -> str:
    suffix = os.environ["EVERYSTEP_TEST_DB_SUFFIX"]
    return os.path.join(tempfile.gettempdir(), f"everystep-test-{suffix}.{kind}.lock")


@contextmanager
def room(alone: bool) -> Iterator[None]:
    """Hold the room for one test: alone (exclusive) or shared with the other workers'
    tests. Without pytest-xdist there is no one to share with, and nothing is locked."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
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
