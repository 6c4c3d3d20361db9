"""The one shutdown sequence: stop claiming → let in-flight steps finish up to the drain
deadline → requeue what is left → stop the heartbeat → close connections.

Runs in ``Worker.run()``'s ``finally``, whatever ended the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from django.db import connections

from everystep.engine.core.outcome import report_requeued
from everystep.store import database
from everystep.store.guard import UNREACHABLE
from everystep.store.outcome import requeue_run
from everystep.values import Claim
from everystep.worker.connections import close_thread_connections
from everystep.worker.heartbeat import SHUTDOWN_LOCK_WAIT, Heartbeat
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


def drain(
    worker: WorkerState, executor: ThreadPoolExecutor, beat: Heartbeat, reap: Callable[[], object]
) -> bool:
    """Drain the worker; True if every in-flight run ended on its own before the deadline.
    ``reap`` collects the runs that ended (the worker's own bookkeeping)."""
    worker.begin_stopping()
    options = worker.options
    extra = {"event": "worker.draining", "runner": options.name}
    logger.info(
        "worker %s draining %d run(s), drain %gs",
        options.name,
        worker.inflight,
        options.drain,
        extra=extra,
    )
    _requeue_backlog(worker)
    deadline = time.monotonic() + options.drain if options.drain > 0 else None
    while worker.running and not worker.force.is_set():
        left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
        if left <= 0:
            break
        wait(list(worker.running), timeout=left, return_when=FIRST_COMPLETED)
        reap()
        _requeue_backlog(worker)  # a pass that could not reach the database lands there
    leftovers = list(worker.running.values())
    for held in leftovers:
        _requeue(worker, held)
    if leftovers:
        logger.warning(
            "worker %s requeued %d run(s) still executing at the drain deadline",
            options.name,
            len(leftovers),
            extra={"event": "worker.drain_deadline", "runner": options.name},
        )
    beat.stop()
    if worker.event_loop is not None:
        worker.event_loop.close(wait=not leftovers)
    if leftovers:
        # Past the deadline the pool's threads are abandoned (see Worker.run).
        executor.shutdown(wait=False, cancel_futures=True)
    else:
        # The pool is idle: close its threads' connections (kept from run to run) and
        # wait for the threads, so run() leaves neither a thread nor a session behind.
        close_thread_connections(executor)
        executor.shutdown(wait=True)
    connections.close_all()
    logger.info(
        "worker %s stopped", options.name, extra={"event": "worker.stopped", "runner": options.name}
    )
    return not leftovers


def _requeue_backlog(worker: WorkerState) -> None:
    # Held but never started (catchup, database retries): nothing to wait for.
    while worker.backlog:
        _requeue(worker, worker.backlog.popleft()[1])


def _requeue(worker: WorkerState, held: Claim) -> None:
    runner = worker.options.name
    try:
        with database.lock_waits_at_most(SHUTDOWN_LOCK_WAIT):
            requeued = requeue_run(held)
        if requeued:
            report_requeued(held.run_id, held.workflow or "?", runner, "worker shutdown")
    except UNREACHABLE as exc:
        # Left running under this name: a restart under the same name, or orphan
        # recovery once the heartbeat expires, resumes it.
        logger.error(
            "run %s could not be requeued (%s); it stays with runner %s",
            held.run_id,
            exc,
            runner,
            extra={
                "event": "run.requeue_failed",
                "run_id": str(held.run_id),
                "runner": runner,
            },
        )
