"""Sync work (the ORM, a sync step's body) awaited from async code, on a thread.

Django's ORM is sync and refuses to run on a thread with a running event loop. Where
the sync work runs:

- in a worker's event loop (``everystep.worker.event_loop``), on that loop's pool of
  threads (``offload_to``), each with its own connection: every run of the loop shares
  them, so 200 async runs use a handful of threads and connections;
- anywhere else (an ASGI view, a pass run in-process by ``everystep.testing.run_due``
  or a replay check), through Django's ``sync_to_async`` on its thread for sync code:
  the thread of the sync caller that started the loop, if one did, so a test's
  transaction sees the rows.

The caller's context variables go along (the frame of the body, a span), as
``sync_to_async`` takes them.

Before a long wait from async code (``aresult``, ``awatch``), ``release`` closes the
idle connections of that thread for sync code. Under Django's ASGI handler it is the
request's own thread (``ThreadSensitiveContext``), where a view's ORM calls opened a
connection that Django closes only at ``request_finished``: a hundred open streams
would hold a hundred connections while the hub alone reads for them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from everystep.store import database

T = TypeVar("T")

offload_to: contextvars.ContextVar[Executor | None] = contextvars.ContextVar(
    "everystep_offload_to", default=None
)


async def offload(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread that may use the ORM, awaited."""
    executor = offload_to.get()
    if executor is None:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def release() -> None:
    """Close the idle connections of the caller's thread for sync code (see the module
    docstring): the next ORM call there opens one again."""
    if offload_to.get() is not None:
        return  # a worker loop's threads keep theirs: every run of the loop shares them
    await sync_to_async(database.close_idle, thread_sensitive=True)()
