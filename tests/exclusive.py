"""Tests that must have a database server to themselves.

`make test` runs its long tiers on several pytest workers (pytest-xdist), and two lanes
of tiers side by side, against the same PostgreSQL and MariaDB servers, each session with
databases of its own (tests/settings.py). A test marked ``exclusive`` stops or restarts
its session's server (or, on SQLite, moves away the directory the session's workers
share): no test that uses that server may run beside it. So every test holds the room of
each server it uses while it runs (setup and teardown included: a test's flush must not
meet a stopped server), shared; an exclusive test holds its rooms alone. A turnstile per
room keeps an exclusive test from waiting for ever behind a stream of shared ones: it is
held while the room is asked for, so no test slips in once one is waiting. Rooms are taken
in name order, so two tests never wait on each other.

A test uses its session's server (``EVERYSTEP_TEST_DB``; SQLite's room is the session's
own) and those its ``servers(...)`` marker names (a bench script on PostgreSQL in a SQLite
session). The locks are flock(2) on files of the machine's temporary directory: every
pytest session on the machine takes part, and the kernel drops a lock whose process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import IO


def rooms(extra: Iterable[str]) -> list[str]:
    """The rooms of a test that uses its session's server and the servers ``extra``."""
    backend = os.environ.get("EVERYSTEP_TEST_DB", "sqlite")
    own = f"sqlite-{os.environ['EVERYSTEP_TEST_DB_SUFFIX']}" if backend == "sqlite" else backend
    return sorted({own, *extra})


@contextmanager
def held(names: Iterable[str], alone: bool) -> Iterator[None]:
    """Hold the rooms ``names``: alone (exclusive) or shared with other tests."""
    with ExitStack() as stack:
        for name in sorted(names):
            stack.enter_context(_room(name, alone))
        yield


@contextmanager
def _room(name: str, alone: bool) -> Iterator[None]:
    with _open(name, "turnstile") as turnstile, _open(name, "room") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


def _path(name: str, kind: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"everystep-tests.{name}.{kind}.lock")


def _open(name: str, kind: str) -> IO[str]:
    return open(_path(name, kind), "a")


def forget_session_rooms() -> None:
    """Remove the lock files of this session's own room (SQLite's), once no test of the
    session runs: the servers' rooms stay, shared by every session."""
    own = rooms(())[0]
    if own.startswith("sqlite-"):
        for kind in ("turnstile", "room"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_path(own, kind))
