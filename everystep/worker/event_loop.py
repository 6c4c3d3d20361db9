"""The worker's event loop, for runs whose body is an ``async def``.

A sync run's pass holds a pool thread from claim to end, its I/O waits included. An
async run's pass is a task on this one loop instead, so ``--pool 200`` of I/O-bound
async runs costs 200 coroutines, not 200 threads. ``--pool`` keeps its meaning: the
runs in flight, sync and async together, claimed and reaped by the same loop
(``everystep.worker.passes``) through the same futures.

The database work of those passes (claims' records, a sync step's body) runs on a
small pool of threads of the loop's own, each with its connection kept from one call
to the next: ``threads`` connections for all the loop's runs. Started on the first
async run a worker claims; a worker that never claims one has neither.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from everystep.engine.asynchronous.async_body import install
from everystep.engine.asynchronous.offload import offload_to
from everystep.engine.core.outcome import PassResult
from everystep.engine.execute import arun_pass
from everystep.values import Claim
from everystep.worker.connections import close_thread_connections, keep_connections

# Threads for the loop's database work: enough to keep a few statements in flight while
# hundreds of runs await I/O, few enough to hold a handful of connections.
MAX_THREADS = 8


class _DatabaseThreads(ThreadPoolExecutor):
    """Threads that keep their connections from call to call, closing a broken one."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return super().submit(_kept, fn, args, kwargs)


def _kept(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return fn(*args, **kwargs)
    except BaseException:
        keep_connections()  # checks connections only after an error: see its docstring
        raise


class EventLoop:
    """One thread running one event loop, on which async runs' passes are tasks."""

    def __init__(self, pool_size: int) -> None:
        self.threads = max(1, min(pool_size, MAX_THREADS))
        self._database = _DatabaseThreads(self.threads, thread_name_prefix="everystep-async-db")
        self._loop = asyncio.new_event_loop()
        install(self._loop)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="everystep-event-loop", daemon=True
        )
        self._thread.start()

    def submit(self, claim: Claim, should_drain: Callable[[], bool]) -> Future[PassResult]:
        """Start a pass of ``claim`` on the loop."""
        return asyncio.run_coroutine_threadsafe(self._pass(claim, should_drain), self._loop)

    async def _pass(self, claim: Claim, should_drain: Callable[[], bool]) -> PassResult:
        offload_to.set(self._database)  # this task's context: its run's work, not others'
        return await arun_pass(claim, should_drain=should_drain)

    def close(self, *, wait: bool) -> None:
        """Stop the loop. ``wait``: no pass is in flight; close the database threads'
        connections and wait for the threads. Otherwise (passes abandoned at the drain
        deadline) leave them, as the sync pool's threads are."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not wait:
            self._database.shutdown(wait=False, cancel_futures=True)
            return
        close_thread_connections(self._database)
        self._database.shutdown(wait=True)
        if not self._loop.is_running():
            self._loop.close()
