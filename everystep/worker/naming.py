"""Taking the runner name at start-up: one live process per name (issues 33 and 40).

A worker starting under a name takes back every run left ``running`` under it (the
catchup), so a second live process under the name would take the runs the first is
executing, and their steps would run twice. Before its catchup a worker therefore holds
the name's heartbeat row for its own boot, or refuses to start.

A row of another boot is either a live process's, which beats every ``heartbeat``
seconds, or a dead one's, which a crashed predecessor left (a clean shutdown removes its
row). The starting worker watches the row for up to two heartbeat intervals: if it moves,
its process is alive and the name is refused (``NameInUse``); if it stays still, it is
taken over by a statement that succeeds only if it is still unchanged. The watch compares
the row with itself, so no clock but the holder's own is involved; only a row already
silent past the point where orphan recovery takes its runs (``Runner.may_be_alive``) is
taken over at once, by the clock comparison every reader of heartbeats makes.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from everystep.errors import NameInUse
from everystep.store.runners import get_runner
from everystep.worker.heartbeat import Heartbeat
from everystep.worker.worker_state import WorkerOptions, WorkerState

if TYPE_CHECKING:
    from everystep.models import Runner

logger = logging.getLogger("everystep.worker")


def take_name(worker: WorkerState, beat: Heartbeat) -> bool:
    """Hold the runner name for ``beat``'s boot: True once held, False if the worker was
    stopped while waiting. Raises ``NameInUse`` if another process beats under it."""
    options = worker.options
    # One heartbeat may be late without its process being gone (the orphan timeout's
    # own margin), so a live holder moves its row well within two.
    watch_until = time.monotonic() + 2 * options.heartbeat
    seen = get_runner(options.name)
    waiting = False
    while True:
        if seen is not None and seen.boot_id == beat.boot_id:
            return True  # taken by an earlier try whose reply the database lost
        if seen is None or _silent(seen, options) or time.monotonic() >= watch_until:
            if beat.take_name(seen):
                _taken(options, seen)
                return True
            # Another process took it between the read and the write: it is alive.
            seen = get_runner(options.name)
            if seen is None or seen.boot_id == beat.boot_id:
                continue
            raise _in_use(options, seen, "it took the name as this worker did")
        if not waiting:
            waiting = True
            _wait_logged(options, seen)
        if worker.stop.wait(min(options.heartbeat / 4, 1.0)):
            return False
        worker.tick()  # watching the name is not being wedged (liveness)
        now = get_runner(options.name)
        if now is not None and (now.boot_id, now.last_seen) != (seen.boot_id, seen.last_seen):
            raise _in_use(options, now, "it sent a heartbeat while this worker watched")
        seen = now  # None: its process shut down cleanly, the name is free


def _silent(row: Runner, options: WorkerOptions) -> bool:
    return not row.may_be_alive(options.orphan_timeout, options.heartbeat)


def _in_use(options: WorkerOptions, holder: Runner, why: str) -> NameInUse:
    draining = ", draining" if holder.draining else ""
    return NameInUse(options.name, holder.host, holder.pid, f"{why}{draining}")


def _wait_logged(options: WorkerOptions, row: Runner) -> None:
    logger.info(
        "runner name %s was heard from %.1fs ago (host %s pid %s): watching its heartbeat "
        "for up to %gs before taking the name over",
        options.name,
        row.seconds_silent(),
        row.host or "?",
        row.pid or "?",
        2 * options.heartbeat,
        extra={"event": "worker.name_wait", "runner": options.name},
    )


def _taken(options: WorkerOptions, row: Runner | None) -> None:
    if row is None:
        return
    logger.info(
        "worker %s takes the runner name over from host %s pid %s, silent for %.1fs",
        options.name,
        row.host or "?",
        row.pid or "?",
        row.seconds_silent(),
        extra={"event": "worker.name_taken_over", "runner": options.name},
    )
