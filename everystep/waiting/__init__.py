"""Waiting for runs from outside a run (a view, a script, a test), above the engine: the
durable waits inside a body are the engine's (``everystep.engine.operations.results``).

- ``blocking``: ``result()`` and ``gather()``, the calling thread blocked until the runs
  end (inside a body they hand over to the engine's durable wait);
- ``waiters``: ``aresult``, ``agather`` and ``awatch`` on an event loop;
- ``hub``: the one thread per process that reads and wakes for every such waiter;
- ``watching``: ``published()`` and ``watch()``, a run's published values.
"""
