"""``aresult`` / ``agather`` outside a run: waiting on an event loop for runs to end;
``awatch``: following a run's published values there.

The async twin of ``everystep.engine.results._block``. A sync ``result()`` holds its thread
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
hub closes its connections and sleeps until one registers; after a failed read it closes
them too (the next read opens fresh ones) and the waiters get an ``EverystepError``, as a
sync ``result()`` would.

A waiter in an event loop of its own (an ASGI server's) does no database work of its own:
there each request's sync work runs on a thread of its own, whose connection stays open
until the request ends, so a look of its own would cost a thread and a connection per
waiter. Only when the hub cannot see one of its runs does it look on its caller's thread
(``offload``): a run scheduled in a transaction not committed yet is visible there, and an
unknown id is an ``EverystepError``. A waiter whose loop sync code started
(``async_to_sync``: a script, a test) looks first on that thread, which waits anyway, as
``result()`` does: ended runs return at once, and an open transaction there is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from asgiref.sync import AsyncToSync
from django.db import connections

from everystep.engine import results
from everystep.engine.offload import offload
from everystep.errors import EverystepError, RunInterrupted, StoreUnavailable, WaitTimeout
from everystep.models import FINAL_STATUSES
from everystep.store import published, run_waits
from everystep.store.wake import PUBLISHED_CHANNEL, EndedListener

Outcomes = list[dict[str, Any]]
_POLL_FIRST, _POLL_MOST = 0.05, 1.0
# Ids per read: SQLite builds may refuse more than 999 variables in a statement.
_CHUNK = 900


async def wait_ended(ids: list[UUID], limit: timedelta | None, what: str) -> Outcomes:
    """The outcomes of runs ``ids`` in order once all have ended (``results.value``
    reads each); past ``limit`` a ``WaitTimeout``."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit.total_seconds()
    try:
        async with asyncio.timeout_at(deadline):
            if _sync_caller(loop):
                ended = await offload(_look, ids, what)
                return ended if ended is not None else await _from_hub(ids, what, loop)
            try:
                return await _from_hub(ids, what, loop)
            except _NotSeen:
                ended = await offload(_look, ids, what)
                return ended if ended is not None else await _from_hub(ids, what, loop)
    except TimeoutError:
        raise WaitTimeout(f"{what}: the runs had not ended within {limit}") from None


async def watch_values(run: UUID, limit: timedelta | None) -> AsyncIterator[dict[str, Any]]:
    """Run ``run``'s published values at once, then as they change, until it is final
    (the last yield holds its final values); past ``limit`` a ``WaitTimeout``."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit.total_seconds()
    watcher = _Watcher(run, loop, asyncio.Event())
    hub = current_hub()
    hub.add(watcher)
    last: dict[str, Any] | None = None
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    await watcher.changed.wait()
            except TimeoutError:
                raise WaitTimeout(f"awatch(): run {run} had not ended within {limit}") from None
            watcher.changed.clear()
            if watcher.error is not None:
                raise watcher.error
            if watcher.values is not None and (last is None or watcher.values != last):
                last = watcher.values
                yield last
            if watcher.final:
                return
    finally:
        hub.discard(watcher)


def _sync_caller(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` was started by ``async_to_sync`` for sync code that now waits on
    its thread (a script, a test): a look there costs nothing more, and that thread's
    transaction, if one is open, must refuse the wait as ``result()`` refuses it."""
    return loop in getattr(AsyncToSync, "loop_thread_executors", {})


async def _from_hub(ids: list[UUID], what: str, loop: asyncio.AbstractEventLoop) -> Outcomes:
    waiter = _Waiter(ids, what, loop, loop.create_future())
    hub = current_hub()
    hub.add(waiter)
    try:
        return await waiter.future
    finally:
        hub.discard(waiter)
        if waiter.future.done() and not waiter.future.cancelled():
            waiter.future.exception()  # retrieved: asyncio would log it as forgotten
        waiter.future.cancel()  # a late hand-over finds it done and does nothing


class _NotSeen(EverystepError):
    """The hub's connection sees no run with one of a waiter's ids."""


def _look(ids: list[UUID], what: str) -> Outcomes | None:
    """The caller's own look, on its thread, at runs the hub could not see: their
    outcomes if they have ended, None if they are visible to the hub now; an open
    transaction refused as ``result()`` refuses it, an unknown id an error."""
    try:
        ended = results.ended_outcomes(run_waits.outcomes(ids), ids, what)
    except StoreUnavailable as exc:
        raise EverystepError(f"{what}: {exc}") from exc
    if ended is not None:
        return ended
    refusal = results.in_transaction(what)
    if refusal is not None:
        raise EverystepError(refusal)
    return None  # committed since the hub's read: it sees them now


@dataclass(eq=False)
class _Waiter:
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
class _Watcher:
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
    ``listening`` says whether its pauses are LISTENs."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.waiters: set[_Waiter | _Watcher] = set()
        self.registered = threading.Event()
        self.idle = threading.Event()  # set while it holds no connection
        self.idle.set()
        self.reads = self.ids_read = 0
        self.listening = False
        self.thread = threading.Thread(target=self._run, name="everystep-waiters", daemon=True)

    def add(self, waiter: _Waiter | _Watcher) -> None:
        with self.lock:
            self.waiters.add(waiter)
            self.registered.set()

    def discard(self, waiter: _Waiter | _Watcher) -> None:
        with self.lock:
            self.waiters.discard(waiter)

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
            except (Exception, RunInterrupted) as exc:  # fail the waiters, keep serving
                self._fail(self._current(), exc)
            finally:
                self.listening = False
                connections.close_all()  # this thread's: idle, or after a failure
                self.idle.set()

    def _current(self) -> list[_Waiter | _Watcher]:
        with self.lock:
            self.registered.clear()  # a waiter added from now on cuts the next pause
            # A loop closed without cancelling its tasks leaves waiters nobody awaits.
            self.waiters = {waiter for waiter in self.waiters if not waiter.loop.is_closed()}
            return list(self.waiters)

    def _serve(self) -> None:
        """Read and pause until no waiter is left."""
        with EndedListener() as listener:
            pause = _POLL_FIRST
            while current := self._current():
                if any(isinstance(one, _Watcher) for one in current):
                    listener.also(PUBLISHED_CHANNEL)
                self.listening = listener.listening
                read_at = time.monotonic()
                changed = self._read(current, listener.listening)
                if changed is None:
                    return  # connections closed by the caller; reopened on the next read
                if listener.listening:
                    self._listen(listener)
                elif changed or self.registered.wait(pause):
                    pause = _POLL_FIRST
                else:
                    pause = min(pause * 2, _POLL_MOST)
                time.sleep(max(0.0, read_at + _POLL_FIRST - time.monotonic()))

    def _listen(self, listener: EndedListener) -> None:
        """Up to a second on the LISTEN connection, in slices so that a new waiter (whose
        runs may have ended already) is read within one."""
        until = time.monotonic() + _POLL_MOST
        while not self.registered.is_set() and listener.listening:
            left = until - time.monotonic()
            if left <= 0 or listener.wait(min(_POLL_FIRST, left)):
                return

    def _read(self, current: list[_Waiter | _Watcher], listening: bool) -> bool | None:
        """One read for all waiters and watchers in ``current``; hand each waiter whose
        runs ended its outcomes, each watcher whose run changed its values. Whether a
        watched run changed; None if the read failed. ``listening``: the runs of new
        waiters are marked awaited first."""
        waiters = [one for one in current if isinstance(one, _Waiter)]
        watchers = [one for one in current if isinstance(one, _Watcher)]
        ids = sorted({run for waiter in waiters for run in waiter.ids})
        watched = sorted({watcher.run for watcher in watchers})
        try:
            new = [one for one in current if not one.marked]
            if listening and new:
                run_waits.mark_awaited({run for one in new for run in _runs_of(one)})
            for one in new:
                one.marked = True
            found: dict[UUID, tuple[str, Any, Any]] = {}
            for start in range(0, len(ids), _CHUNK):
                found.update(run_waits.outcomes(ids[start : start + _CHUNK]))
            states = published.states(watched) if watched else {}
            moved = [w for w in watchers if w.state is None or states.get(w.run) != w.state]
            values = published.snapshots({w.run for w in moved if w.run in states})
        except (Exception, StoreUnavailable) as exc:  # StoreUnavailable: a BaseException
            self._fail(current, exc)
            return None
        with self.lock:
            self.reads += 1
            self.ids_read += len(ids) + len(watched)
        for waiter in waiters:
            try:
                ended = results.ended_outcomes(found, waiter.ids, waiter.what)
            except EverystepError as exc:
                self.discard(waiter)
                waiter.settle(None, _NotSeen(str(exc)))
                continue
            if ended is not None:
                self.discard(waiter)
                waiter.settle(ended)
        for watcher in moved:
            state = states.get(watcher.run)
            if state is None:
                self.discard(watcher)
                missing = EverystepError(f"awatch(): no run with id {watcher.run}")
                watcher.settle(None, False, missing)
                continue
            watcher.state = state
            final = state[0] in FINAL_STATUSES
            if final:
                self.discard(watcher)
            watcher.settle(values.get(watcher.run, {}), final)
        return bool(moved)

    def _fail(self, current: list[_Waiter | _Watcher], exc: BaseException) -> None:
        """A read failed (the database is unreachable, say): each waiter gets an
        ``EverystepError`` of its own, as ``result()`` raises one."""
        for one in current:
            self.discard(one)
            what = one.what if isinstance(one, _Waiter) else "awatch()"
            error = EverystepError(f"{what}: {exc}")
            error.__cause__ = exc
            if isinstance(one, _Waiter):
                one.settle(None, error)
            else:
                one.settle(None, False, error)


def _runs_of(one: _Waiter | _Watcher) -> list[UUID]:
    return one.ids if isinstance(one, _Waiter) else [one.run]


_hub: Hub | None = None
_hub_lock = threading.Lock()


def current_hub() -> Hub:
    """This process's hub, started on first use (and again in a forked child, which
    inherits the object but not its thread)."""
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():
            _hub = Hub()
            _hub.thread.start()
        return _hub
