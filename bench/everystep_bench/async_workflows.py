"""The workflows of ``bench/async_io.py`` (issue 36): one step of simulated I/O, written
as a sync client does it and as an async one does, and an async run that waits for an
event (the waiters' phase).

``bench_io_sync(i, seconds)`` and ``bench_io_async(i, seconds)`` do the same thing: one
step that waits ``seconds`` for "I/O" and returns, the run returning ``i``. The sync one
holds its pool thread for the wait (``time.sleep``); the async one awaits it
(``asyncio.sleep``), so the worker's event loop can hold hundreds of them at once.
``bench_waits(i)`` waits durably for the event ``go`` and returns ``i + payload``.

Every worker process registers them: ``apps.EverystepBenchConfig.ready`` imports this
module (``everystep``'s autodiscovery imports only ``workflows.py``).
"""

from __future__ import annotations

import asyncio
import time

from everystep import await_for, step, workflow


@step
def bench_io_block(seconds: float) -> float:
    """``seconds`` of I/O as a blocking client waits: the pool thread is held."""
    time.sleep(seconds)
    return seconds


@step
async def bench_io_await(seconds: float) -> float:
    """``seconds`` of I/O as an async client waits: the event loop runs others meanwhile."""
    await asyncio.sleep(seconds)
    return seconds


@workflow
def bench_io_sync(i: int, seconds: float) -> int:
    bench_io_block(seconds)
    return i


@workflow
async def bench_io_async(i: int, seconds: float) -> int:
    await bench_io_await(seconds)
    return i


@workflow
async def bench_waits(i: int) -> int:
    payload = await await_for("go")
    return i + int(payload)
