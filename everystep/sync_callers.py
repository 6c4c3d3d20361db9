"""Sync code and event loops: sync calls of the API from async code, refused with the
call to await instead; and the thread of sync code that waits for a loop it started.

Django's ORM refuses to run on a thread with a running event loop, with a
``SynchronousOnlyOperation`` that names no API; ``schedule()`` called from an async view
would fail that way, deep in the ORM. The same exception class is raised here, before
anything is done, saying which call to await. ``DJANGO_ALLOW_ASYNC_UNSAFE`` lets the call
through, as it lets the ORM.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Executor

from asgiref.sync import AsyncToSync


def refuse_on_event_loop(what: str, twin: str) -> None:
    """Raise Django's ``SynchronousOnlyOperation`` if ``what`` is called on a thread that
    runs an event loop; ``twin``: the call to await there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    if os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE"):
        return
    from django.core.exceptions import SynchronousOnlyOperation

    raise SynchronousOnlyOperation(
        f"{what} was called from async code (this thread runs an event loop), where "
        f"Django's ORM cannot run: use {twin}"
    )


def sync_caller(loop: asyncio.AbstractEventLoop) -> Executor | None:
    """If ``loop`` was started by ``async_to_sync`` for sync code that waits on its
    thread (a script, a test, ``testing.run_due()``), that thread's executor: it runs
    work sent to it while it waits, as ``sync_to_async`` sends it there (asgiref keeps it
    by loop). None for any other loop (a worker's, an ASGI server's)."""
    executor = getattr(AsyncToSync, "loop_thread_executors", {}).get(loop)
    return executor if isinstance(executor, Executor) else None
