"""The hub: one thread per process that serves every ``aresult``/``agather`` waiter and
every ``awatch`` watcher outside a run (their entry points: ``everystep.waiting.waiters``).

The async twin of ``everystep.waiting.blocking._block``. A sync ``result()`` holds its thread
(and on PostgreSQL a LISTEN connection) for its whole wait; an ASGI process may hold a
thousand waiters at once, so here they share one wake-up per process: the hub, one daemon
thread started on first use. It keeps the awaited run ids with their waiters (a future on
the waiter's own loop each, settled through ``loop.call_soon_threadsafe``: no loop ever
blocks) and, while any is registered:

- reads the outcomes of all their runs in one query (chunked only past ``_CHUNK`` ids) and
  hands every waiter whose runs have all ended its outcomes;
- on PostgreSQL first marks the runs of new waiters awaited, so that their ends send a
  NOTIFY (an end before the mark is found by the read that follows it);
- then pauses: on PostgreSQL on one LISTEN connection (``EndedListener``) for up to a
  second, a NOTIFY from an awaited run's end cutting it short; elsewhere (or when the LISTEN
  could not be made) 50 ms, doubling up to 1 s as the sync poll does; a new waiter cuts
  either short. No read comes sooner than 50 ms after the last, so a hundred waiters
  arriving together, or a storm of NOTIFYs, cost a read per 50 ms, not one each.

Watchers (``awatch``) share the same reads and pauses: each read also takes the state of
their runs (``store.published.states``: status and a count of writes) and their values
where that changed, and hands each watcher its latest values — a watcher slower than
the changes sees the latest, not every one. Once a watcher's run is watched, the hub
also LISTENs for the writers' batched NOTIFY.

Polling stays the correctness path; NOTIFY only makes it prompt. With no waiter left the
hub closes its connections and sleeps until one registers. A failed read is made once
more on fresh connections (a killed backend, a restarted server: one blip must not fail
every wait of the process); a second failure hands each waiter an ``EverystepError``, as
a sync ``result()`` would. A lost LISTEN is made again. Values are rebuilt per watcher,
so one run's bad value fails its own watchers only; whatever a read raises, even a
``SystemExit`` from a value's decode, fails the waiters of the moment and never the
thread, and a hub whose thread is gone anyway is replaced at the next registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connections

from everystep.engine.operations import results
from everystep.errors import EverystepError, StoreUnavailable
from everystep.models import FINAL_STATUSES
from everystep.store import published, run_waits
from everystep.store.wake import PUBLISHED_CHANNEL, EndedListener
from everystep.waiting.watching import decoded

Outcomes = list[dict[str, Any]]
_POLL_FIRST, _POLL_MOST = 0.05, 1.0
# Ids per read: SQLite builds may refuse more than 999 variables in a statement.
_CHUNK = 900
# A failed read is made again after this pause: a restarting server gets a moment.
_RETRY_AFTER = 0.5
logger = logging.getLogger("everystep.waiters")


class NotSeen(EverystepError):
    """The hub's connection sees no run with one of a waiter's ids."""


@dataclass(eq=False)
class Waiter:
    ids: list[UUID]
    what: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Outcomes]
    marked: bool = False  # its runs are marked awaited (PostgreSQL's NOTIFY)

    def settle(self, outcomes: Outcomes | None, error: BaseException | None = None) -> None:
        """From the hub's thread: hand the waiter its outcomes, or ``error``."""

        def deliver() -> None:
            if self.future.done():  # timed out or cancelled meanwhile
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(outcomes)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
            self.loop.call_soon_threadsafe(deliver)


@dataclass(eq=False)
class Watcher:
    """An ``awatch`` of one run. The hub sets ``values``, ``final`` or ``error`` on the
    watcher's loop, then ``changed``; ``state`` is the hub's own, the run's last seen."""

    run: UUID
    loop: asyncio.AbstractEventLoop
    changed: asyncio.Event
    values: dict[str, Any] | None = None
    final: bool = False
    error: BaseException | None = None
    state: Any = None
    marked: bool = False

    def settle(
        self, values: dict[str, Any] | None, final: bool, error: BaseException | None = None
    ) -> None:
        """From the hub's thread: hand the watcher the run's values, or ``error``."""

        def deliver() -> None:
            if error is not None:
                self.error = error
            else:
                self.values, self.final = values, final
            self.changed.set()

        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody watches
            self.loop.call_soon_threadsafe(deliver)


class Hub:
    """The one wake-up source of this process's waiters (see the module docstring).
    ``reads`` and ``ids_read`` count its outcome reads and the ids they covered;
    ``listening`` says whether its pauses are LISTENs. ``waiters``: those of a hub whose
    thread is gone, taken over."""

    def __init__(self, waiters: set[Waiter | Watcher] | None = None) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.waiters: set[Waiter | Watcher] = waiters or set()
        self.registered = threading.Event()
        if self.waiters:
            self.registered.set()
        self.idle = threading.Event()  # set while it holds no connection
        self.idle.set()
        self.reads = self.ids_read = 0
        self.listening = False
        self.thread = threading.Thread(target=self._run, name="everystep-waiters", daemon=True)

    def add(self, waiter: Waiter | Watcher) -> None:
        with self.lock:
            self.waiters.add(waiter)
            self.registered.set()

    def discard(self, waiter: Waiter | Watcher) -> None:
        with self.lock:
            self.waiters.discard(waiter)

    def take(self) -> set[Waiter | Watcher]:
        """Every waiter, removed: a hub replacing this one serves them."""
        with self.lock:
            taken, self.waiters = self.waiters, set()
            return taken

    def waiting(self) -> int:
        """How many waiters (and watchers) are registered."""
        with self.lock:
            return len(self.waiters)

    def counts(self) -> tuple[int, int]:
        """``(reads, ids_read)`` so far, read together."""
        with self.lock:
            return self.reads, self.ids_read

    def _run(self) -> None:
        while True:
            self.registered.wait()
            self.idle.clear()
            try:
                self._serve()
            except BaseException as exc:
                # On this thread a SystemExit or KeyboardInterrupt can only come from code
                # run here (a read, a value's decode): it fails the waiters of the moment,
                # not the thread, whose end would leave every later waiter unanswered.
                logger.exception("waiters' hub: %r", exc, extra={"event": "waiters.failed"})
                self._fail(self._current(), exc)
            finally:
                self.listening = False
                with contextlib.suppress(Exception):
                    connections.close_all()  # this thread's: idle, or after a failure
                self.idle.set()

    def _current(self) -> list[Waiter | Watcher]:
        with self.lock:
            self.registered.clear()  # a waiter added from now on cuts the next pause
            # A loop closed without cancelling its tasks leaves waiters nobody awaits.
            self.waiters = {waiter for waiter in self.waiters if not waiter.loop.is_closed()}
            return list(self.waiters)

    def _serve(self) -> None:
        """Read and pause until no waiter is left, on a new LISTEN when one is lost."""
        while self._serve_listening():
            pass

    def _serve_listening(self) -> bool:
        """Read and pause until no waiter is left (False), or until its LISTEN is lost
        while some wait (True: serve them on a new one)."""
        with EndedListener() as listener:
            made = listener.listening
            pause = _POLL_FIRST
            while current := self._current():
                if made and not listener.listening:
                    return True
                if any(isinstance(one, Watcher) for one in current):
                    listener.also(PUBLISHED_CHANNEL)
                self.listening = listener.listening
                read_at = time.monotonic()
                changed = self._read(current, listener.listening)
                if changed is None:
                    return False  # connections closed by the caller; reopened next read
                if listener.listening:
                    self._listen(listener)
                elif changed or self.registered.wait(pause):
                    pause = _POLL_FIRST
                else:
                    pause = min(pause * 2, _POLL_MOST)
                time.sleep(max(0.0, read_at + _POLL_FIRST - time.monotonic()))
        return False

    def _listen(self, listener: EndedListener) -> None:
        """Up to a second on the LISTEN connection, in slices so that a new waiter (whose
        runs may have ended already) is read within one."""
        until = time.monotonic() + _POLL_MOST
        while not self.registered.is_set() and listener.listening:
            left = until - time.monotonic()
            if left <= 0 or listener.wait(min(_POLL_FIRST, left)):
                return

    def _read(self, current: list[Waiter | Watcher], listening: bool) -> bool | None:
        """One read for all waiters and watchers in ``current``; hand each waiter whose
        runs ended its outcomes, each watcher whose run changed its values. Whether a
        watched run changed; None if the read failed twice."""
        try:
            read = self._fetch(current, listening)
        except (Exception, StoreUnavailable) as first:  # StoreUnavailable: a BaseException
            # One blip (a killed backend, a restarted server) would fail every wait of
            # the process at once: once more on fresh connections first.
            logger.warning("waiters' hub: a read failed (%s); reading again", first)
            connections.close_all()
            time.sleep(_RETRY_AFTER)
            try:
                read = self._fetch(current, listening)
            except (Exception, StoreUnavailable) as exc:
                self._fail(current, exc)
                return None
        with self.lock:
            self.reads += 1
            self.ids_read += len(read.ids) + len(read.states)
        for waiter in current:
            if isinstance(waiter, Waiter):
                self._hand_outcomes(waiter, read.found)
        for watcher in read.moved:
            self._hand_values(watcher, read)
        return bool(read.moved)

    def _fetch(self, current: list[Waiter | Watcher], listening: bool) -> _Read:
        """The database work of one read (``listening``: the runs of new waiters are
        marked awaited first); the values in their stored form."""
        new = [one for one in current if not one.marked]
        if listening and new:
            run_waits.mark_awaited({run for one in new for run in _runs_of(one)})
        for one in new:
            one.marked = True
        ids = sorted({run for one in current if isinstance(one, Waiter) for run in one.ids})
        found: dict[UUID, tuple[str, Any, Any, str]] = {}
        for start in range(0, len(ids), _CHUNK):
            found.update(run_waits.outcomes(ids[start : start + _CHUNK]))
        watchers = [one for one in current if isinstance(one, Watcher)]
        states = published.states({w.run for w in watchers}) if watchers else {}
        moved = [w for w in watchers if w.state is None or states.get(w.run) != w.state]
        runs = {w.run for w in moved if w.run in states}
        stored = published.snapshots(runs, decode=False) if runs else {}
        return _Read(ids, found, states, moved, stored)

    def _hand_outcomes(self, waiter: Waiter, found: dict[UUID, tuple[str, Any, Any, str]]) -> None:
        try:
            ended = results.ended_outcomes(found, waiter.ids, waiter.what)
        except EverystepError as exc:
            self.discard(waiter)
            waiter.settle(None, NotSeen(str(exc)))
            return
        if ended is not None:  # rebuilt by the waiter itself, on its loop: its failure alone
            self.discard(waiter)
            waiter.settle(ended)

    def _hand_values(self, watcher: Watcher, read: _Read) -> None:
        state = read.states.get(watcher.run)
        if state is None:
            self.discard(watcher)
            watcher.settle(None, False, EverystepError(f"awatch(): no run with id {watcher.run}"))
            return
        watcher.state = state
        final = state[0] in FINAL_STATUSES
        try:
            values = decoded(watcher.run, read.stored.get(watcher.run, {}), "awatch()")
        except BaseException as exc:
            self.discard(watcher)
            error = exc if isinstance(exc, EverystepError) else _undecodable(watcher, exc)
            watcher.settle(None, False, error)
            return
        if final:
            self.discard(watcher)
        watcher.settle(values, final)

    def _fail(self, current: list[Waiter | Watcher], exc: BaseException) -> None:
        """A read failed (the database is unreachable, say): each waiter gets an
        ``EverystepError`` of its own, as ``result()`` raises one."""
        for one in current:
            self.discard(one)
            what = one.what if isinstance(one, Waiter) else "awatch()"
            error = EverystepError(f"{what}: {exc}")
            error.__cause__ = exc
            if isinstance(one, Waiter):
                one.settle(None, error)
            else:
                one.settle(None, False, error)


@dataclass
class _Read:
    """What one read of the hub found: ``ids`` the waiters' runs and ``found`` their
    outcomes; the watched runs' ``states``, those ``moved`` since and their ``stored``
    values."""

    ids: list[UUID]
    found: dict[UUID, tuple[str, Any, Any, str]]
    states: dict[UUID, Any]
    moved: list[Watcher]
    stored: dict[UUID, dict[str, Any]]


def _undecodable(watcher: Watcher, exc: BaseException) -> EverystepError:
    error = EverystepError(f"awatch(): run {watcher.run}'s published values: {exc!r}")
    error.__cause__ = exc
    return error


def _runs_of(one: Waiter | Watcher) -> list[UUID]:
    return one.ids if isinstance(one, Waiter) else [one.run]


_hub: Hub | None = None
_hub_lock = threading.Lock()


def current_hub() -> Hub:
    """This process's hub, started on first use (and again in a forked child, which
    inherits the object but not its thread, or if its thread is gone)."""
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():
            _hub = Hub()
            _hub.thread.start()
        elif not _hub.thread.is_alive():
            # ``_run`` survives what it catches; should its thread end anyway, its
            # waiters would wait forever: a new hub takes them over.
            logger.error(
                "waiters' hub: its thread had ended; started again",
                extra={"event": "waiters.restarted"},
            )
            _hub = Hub(_hub.take())
            _hub.thread.start()
        return _hub
