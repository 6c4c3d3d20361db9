"""Taking the runner name at start-up: one live process per name (issues 33, 40, 52).

A worker starting under a name takes back every run left ``running`` under it (the
catchup), so a second live process under the name would take the runs the first is
executing, and their steps would run twice. Before its catchup a worker therefore holds
the name's heartbeat row for its own boot, or refuses to start.

A row of another boot is either a live process's, which beats every ``heartbeat``
seconds, or a dead one's, which a crashed predecessor left (a clean shutdown removes its
row). A row whose process is provably gone is taken over at once: written on this host,
in this pid space (``runners.is_this_host``), by a pid that no longer runs, or that is
this process's own now (pids are reused). That is the restart after a crash on a host
or VM (systemd, a shell, a supervisor), and its runs are caught up as soon as it starts.
A container restarted by its orchestrator starts in a new pid namespace: nothing there
proves the old process gone, so its row is watched as below.

Otherwise (another host, or a pid that is alive) the starting worker watches the row for
up to two of the holder's heartbeat intervals (``MIN_WATCH`` at the least): if it moves,
its process is alive and the name is refused (``NameInUse``); if it stays still, it is
taken over by a statement that succeeds only if it is still unchanged. The watch compares
the row with itself, so no clock but the holder's own is involved; only a row already
silent past the point where orphan recovery takes its runs (``Runner.may_be_alive``) is
taken over at once, by the clock comparison every reader of heartbeats makes. Either way
the takeover is the same one conditional statement, so of processes racing for a name
exactly one wins.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from everystep.errors import NameInUse
from everystep.store.runners import get_runner, is_this_host
from everystep.worker.heartbeat import Heartbeat, beats_here
from everystep.worker.worker_state import WorkerOptions, WorkerState

if TYPE_CHECKING:
    from everystep.models import Runner

logger = logging.getLogger("everystep.worker")
# Seconds a live holder's row is watched at the least, whatever its heartbeat: a process
# on a loaded machine (or waiting for SQLite's write lock) can miss a beat of a fraction
# of a second, and taking its name would run its steps twice.
MIN_WATCH = 5.0


def take_name(worker: WorkerState, beat: Heartbeat) -> bool:
    """Hold the runner name for ``beat``'s boot: True once held, False if the worker was
    stopped while waiting. Raises ``NameInUse`` if another process beats under it."""
    options = worker.options
    seen = get_runner(options.name)
    # One heartbeat may be late without its process being gone (the orphan timeout's
    # own margin), so a live holder moves its row well within two of its own.
    watch_until = time.monotonic() + 2 * _beat_of(seen, options)
    waiting = False
    while True:
        if seen is not None and seen.boot_id == beat.boot_id:
            return True  # taken by an earlier try whose reply the database lost
        if seen is None or _silent(seen, options) or _gone(seen) or time.monotonic() >= watch_until:
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
    return not row.may_be_alive(options.orphan_timeout, _beat_of(row, options))


def _beat_of(row: Runner | None, options: WorkerOptions) -> float:
    """The holder's heartbeat interval (this worker's own for a row that lacks it), but no
    less than half of ``MIN_WATCH``."""
    beat = row.heartbeat if row is not None and row.heartbeat else options.heartbeat
    return max(beat, MIN_WATCH / 2)


def _gone(row: Runner) -> bool:
    """Whether ``row``'s process is certainly not running: on this host and in this pid
    space, its pid names no live process, or is this process's own with no worker of
    this process beating under the row's boot."""
    if row.pid is None or not is_this_host(row):
        return False
    if row.pid == os.getpid():
        return not beats_here(row.boot_id)
    return not _alive(row.pid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs here; a zombie (killed, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            # "pid (comm) state ...": comm may hold spaces and parentheses.
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # gone just now, or unreadable: not proof of death


def _in_use(options: WorkerOptions, holder: Runner, why: str) -> NameInUse:
    draining = ", draining" if holder.draining else ""
    return NameInUse(options.name, holder.host, holder.pid, f"{why}{draining}")


def _wait_logged(options: WorkerOptions, row: Runner) -> None:
    watch = 2 * _beat_of(row, options)
    logger.info(
        "runner name %s was heard from %.1fs ago (host %s pid %s): watching its heartbeat "
        "for up to %gs before taking the name over",
        options.name,
        row.seconds_silent(),
        row.host or "?",
        row.pid or "?",
        watch,
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
