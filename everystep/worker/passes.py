"""A run's pass on the worker's thread pool: submitted, executed on a pool thread, and
reaped once done. Reaping decides what becomes of a finished pass: done with it, back to
the backlog after the backoff when it met a database outage, or failed when it crashed
outside the engine.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from everystep import registry
from everystep.engine.core.outcome import PassResult, fail
from everystep.engine.execute import run_pass
from everystep.errors import StoreUnavailable
from everystep.store.runs import get_run
from everystep.values import Claim
from everystep.worker.connections import keep_connections
from everystep.worker.event_loop import EventLoop
from everystep.worker.outage import Outage
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


def submit(state: WorkerState, executor: ThreadPoolExecutor, batch: list[Claim]) -> None:
    """Start a pass of each run in ``batch`` on the pool; a finished pass wakes the loop."""
    for held in batch:
        if _is_async(held):
            if state.event_loop is None:
                state.event_loop = EventLoop(state.options.pool_size)
            future = state.event_loop.submit(held, state.stop.is_set)
        else:
            future = executor.submit(_execute, state, held)
        state.running[future] = held
        future.add_done_callback(lambda _: state.wake.set())


def _is_async(held: Claim) -> bool:
    """Whether ``held`` is a run of an ``async def`` body, for the event loop. A claim
    not read with its run goes to a thread, whose pass runs an async body on a loop of
    its own."""
    if held.workflow is None:
        return False
    try:
        defn = registry.definition(held.workflow)
    except BaseException:
        # The pass meets it again on its pool thread, whose future keeps what it raised
        # for ``reap`` to fail the run. Here, on the claim loop's thread, even a
        # SystemExit must not end the worker: the run would be claimed again after each
        # restart, never reaching the recovery limit checked in its pass.
        return False
    return defn is not None and defn.is_async


def _execute(state: WorkerState, held: Claim) -> PassResult:
    try:
        return run_pass(held, should_drain=state.stop.is_set)
    finally:
        keep_connections()


def reap(state: WorkerState, outage: Outage) -> list[tuple[Claim, PassResult | None]]:
    """Collect finished passes; fail the runs that crashed outside the engine."""
    running = state.running
    finished = [(future, held) for future, held in running.items() if future.done()]
    reaped: list[tuple[Claim, PassResult | None]] = []
    for future, held in finished:
        del running[future]
        exc = future.exception()
        if exc is not None:
            _fail_crashed(state, outage, held, exc)
            reaped.append((held, None))
            continue
        result = future.result()
        if result.status == "retry":
            _retry_later(state, outage, held, result)
        reaped.append((held, result))
    return reaped


def _retry_later(state: WorkerState, outage: Outage, held: Claim, result: PassResult) -> None:
    outage.down(result.exc)
    # Steps may have been recorded before the database went away: the next pass
    # loads them rather than trusting the claim's "fresh".
    held = replace(held, fresh=False)
    state.backlog.append((time.monotonic() + max(outage.backoff, state.options.poll), held))


def _fail_crashed(state: WorkerState, outage: Outage, held: Claim, exc: BaseException) -> None:
    workflow = held.workflow
    if workflow is None:
        try:
            row = get_run(held.run_id)
        except StoreUnavailable:
            row = None
        workflow = row.name if row is not None else "?"
    extra = {
        "event": "run.crashed",
        "run_id": str(held.run_id),
        "workflow": workflow,
        "runner": state.options.name,
    }
    # The traceback is logged here; the outcome itself (log line, metrics, Sentry)
    # goes through the engine's one path, like every other outcome.
    logger.error(
        "run %s (%s) crashed outside the engine; marking it failed",
        held.run_id,
        workflow,
        exc_info=exc,
        extra=extra,
    )
    try:
        fail(held, workflow, exc)
    except StoreUnavailable as down:
        _retry_later(state, outage, held, PassResult("retry", down))
