"""The runner heartbeat, orphan recovery and the sweep for waiters left asleep
(``everystep.store.run_waits``), on a thread of their own so a busy claim loop or a long
step never delays them."""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

from django.db import connections

from everystep.engine.core.outcome import report_requeued
from everystep.store import database, run_waits, runners
from everystep.store.guard import DATABASE_ERRORS
from everystep.worker import carrying
from everystep.worker.worker_state import WorkerState

if TYPE_CHECKING:
    from everystep.models import Runner

logger = logging.getLogger("everystep.worker")
# Seconds a statement of the shutdown waits for a row lock before giving up.
SHUTDOWN_LOCK_WAIT = 2
# Seconds a statement of the loop or the heartbeat waits for a lock on SQLite and
# MariaDB/MySQL (``database.keep_lock_waits_short``): how long SIGTERM can go unheard.
LOCK_WAIT = 1
# The heartbeats of this process, by boot. A runner row written by this process's own pid
# is proof of a dead predecessor (worker/naming.py) only if no worker of this process
# still beats under that boot: an application may run the embedded Worker more than once.
_HERE: weakref.WeakValueDictionary[uuid.UUID, Heartbeat] = weakref.WeakValueDictionary()


def beats_here(boot_id: uuid.UUID) -> bool:
    """Whether a worker of this process holds, or may still hold, boot ``boot_id``."""
    beat = _HERE.get(boot_id)
    return beat is not None and not beat.stop_event.is_set()


class Heartbeat(threading.Thread):
    """Every ``heartbeat`` seconds: write this runner's row, then requeue the runs of
    runners whose heartbeat is older than ``orphan_timeout`` (0 = never)."""

    def __init__(self, worker: WorkerState) -> None:
        super().__init__(name="everystep-heartbeat", daemon=True)
        self.worker = worker
        self.options = worker.options
        self.boot_id = uuid.uuid4()
        self.stop_event = threading.Event()
        _HERE[self.boot_id] = self
        # When this thread last found the database again after failing to reach it
        # (monotonic; None: no failure yet). See ``may_sweep``.
        self.reconnected_at: float | None = None
        self.displaced = False  # another boot holds the name now (``_displaced_by``)
        self.waiting_runs = carrying.WaitingRuns(worker)

    def beat(self) -> None:
        if self.displaced:
            return  # the name is another process's now: its row is not ours to write
        sent = time.monotonic()
        holder = runners.beat(self.options.name, self.boot_id, **self._state())
        if holder is not None:
            self._displaced_by(holder)
            return
        self.worker.beat_written = sent

    def take_name(self, replacing: Runner | None) -> bool:
        """Make this boot the holder of the runner name, if ``replacing`` (the row as last
        read; ``None``: no row) is still as read (``runners.take_name``)."""
        sent = time.monotonic()
        state = {
            **self._state(),
            "heartbeat": self.options.heartbeat,
            "carrying": carrying.current(),
        }
        if not runners.take_name(self.options.name, self.boot_id, replacing, **state):
            return False
        self.worker.beat_written = sent
        return True

    def _state(self) -> dict[str, Any]:
        return {
            "pool_size": self.options.pool_size,
            "inflight": self.worker.inflight,
            "draining": self.worker.draining,
            "started_at": self.worker.started_at,
        }

    def _displaced_by(self, holder: Runner) -> None:
        """Another process took the name over while this one was silent for two heartbeats
        (paused, frozen, cut off): it has taken back the runs under the name, this one's
        included, and their passes here are fenced out. Two live workers under one name is
        what taking the name prevents, so this one stops claiming and drains; its process
        ends as after SIGTERM, and the name stays with the process that holds it."""
        self.displaced = True
        logger.error(
            "runner name %s was taken over by host %s pid %s while this worker was silent; "
            "it stops claiming and drains",
            self.options.name,
            holder.host or "?",
            holder.pid or "?",
            extra=self._extra("worker.name_taken"),
        )
        self.worker.begin_stopping()

    def freshen(self) -> None:
        """Beat now, from the calling thread, if the last beat written is older than twice
        the interval: the process was paused (SIGSTOP, a frozen VM, starved of CPU) or the
        thread is behind. The claim loop calls it before claiming: a claim made while this
        runner's row looks dead is taken back by the next orphan sweep of another worker,
        and the steps already running for it run a second time."""
        written = self.worker.beat_written
        if written is None or time.monotonic() - written > 2 * self.options.heartbeat:
            self.beat()

    def recover_orphans(self) -> None:
        for run_id, workflow, dead in runners.requeue_orphans(self.options.orphan_timeout):
            report_requeued(
                run_id,
                workflow,
                self.options.name,
                f"runner {dead} stopped sending heartbeats",
                dead_runner=dead,
            )

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.options.heartbeat):
                self._tick()
                # Liveness reads this: a heartbeat thread that hangs or dies fails the
                # probe, instead of this live worker's runs being taken as orphans unseen.
                self.worker.beat_attempted()
        finally:
            connections.close_all()

    def may_sweep(self) -> bool:
        """Whether to take other runners' runs now. Not within ``orphan_timeout`` of this
        runner's own outage: an outage that kept this runner from the database kept the
        others too, and their heartbeats are stale for that reason alone. Taking their
        runs at once would re-execute steps that live runners are finishing (their
        records fenced out, but executed twice); they get a full timeout to beat again."""
        timeout = self.options.orphan_timeout
        if timeout <= 0 or self.worker.draining or self.worker.beat_failing:
            return False
        since = self.reconnected_at
        return since is None or time.monotonic() - since >= timeout

    def _tick(self) -> None:
        try:
            # A beat waiting for a lock would hold up the shutdown's join of this thread.
            database.keep_lock_waits_short(LOCK_WAIT)
            self.beat()
            if self.worker.beat_failing:
                # Readiness reads the flag too (``WorkerState.database_silent``).
                self.worker.beat_failing, self.reconnected_at = False, time.monotonic()
            if self.may_sweep():
                self.recover_orphans()
            # Waiters a dead worker's run ended without waking (``store.run_waits``).
            run_waits.sweep()
            self.waiting_runs.check_if_due()
        except DATABASE_ERRORS as exc:
            self.worker.beat_failing = True
            logger.warning(
                "heartbeat failed (%s); retrying", exc, extra=self._extra("worker.heartbeat_failed")
            )
            connections.close_all()
        except Exception:
            # Anything else (a bug, a broken signal receiver) must not end the thread:
            # a silent runner loses its runs to orphan recovery.
            logger.exception(
                "heartbeat failed unexpectedly; retrying",
                extra=self._extra("worker.heartbeat_failed"),
            )
            connections.close_all()

    def stop(self) -> None:
        """Stop beating and remove this boot's row (a clean shutdown is not a death)."""
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=self.options.heartbeat + 5)
        try:
            # Shutdown must not wait out a row lock (``SHUTDOWN_LOCK_WAIT``).
            with database.lock_waits_at_most(SHUTDOWN_LOCK_WAIT):
                runners.forget_runner(self.options.name, self.boot_id)
        except DATABASE_ERRORS as exc:
            logger.warning(
                "could not remove the heartbeat row: %s",
                exc,
                extra=self._extra("worker.heartbeat_failed"),
            )

    def _extra(self, event: str) -> dict[str, Any]:
        return {"event": event, "runner": self.options.name}
