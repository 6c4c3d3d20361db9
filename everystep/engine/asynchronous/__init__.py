"""The machinery of ``async def`` bodies (the package named in full: async is a keyword):

- ``async_body``: the replay on an event loop, a scope per task;
- ``async_ops``: the awaitable waits and starts, ids taken at the call;
- ``async_steps``: a step awaited;
- ``offload``: sync work on a thread from async code, and the release of a request
  thread's idle connections before a long wait;
- ``asyncio_internals``: what the machinery reads of asyncio's and CPython's internals
  (a done-callback of ``asyncio.wait``, a coroutine's arguments), in one place, pinned
  per Python version by ``tests/unit/test_asyncio_internals.py``.
"""
